// llama.cpp's named quantization mixes ("recipes": Q4_K_M, Q3_K_S, Q4_0, ...)
// as data and one rule function, reproducing llama-quantize's per-tensor
// choices (llama_tensor_get_type in llama.cpp's src/llama-quant.cpp) for the
// dense architectures ember runs:
//   - the output head (and the token embedding when tied to it) gets q6_K,
//     or q8_0 when its rows are not a multiple of the base type's block or
//     the base type is q8_0;
//   - attn_v and ffn_down are bumped by layer (use_more_bits: the first and
//     last eighth and every third layer between), attn_output for Q2_K and
//     Q3_K_M / Q3_K_L, attn_v by the GQA ratio for Q2_K;
//   - with an importance matrix, Q4_0 / Q5_0 put the first eighth of
//     ffn_down in q4_1 / q5_1;
// then the row fallback (fallback_row_type). Per-tensor overrides by regex
// (llama-quantize's --tensor-type PATTERN=TYPE, searched in the tensor name,
// first match wins) replace the recipe's rule; --output-tensor-type and
// --token-embedding-type replace everything for their tensor.
// Tests: tests/transform/quant_recipe_test.cpp against per-tensor type lists
// made by llama-quantize itself (tools/gen_quant_recipe_fixture.sh).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/archs/tensors.h"

namespace ember {

enum class QuantRecipe : uint8_t {
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0,
  kQ2_K, kQ2_K_S, kQ3_K_S, kQ3_K_M, kQ3_K_L, kQ4_K_S, kQ4_K_M, kQ5_K_S, kQ5_K_M, kQ6_K,
};

struct QuantRecipeInfo {
  QuantRecipe recipe;
  const char* name;  // as llama-quantize spells it: "Q4_K_M"
  DType base;        // the type of every matrix without a rule
  int file_type;     // general.file_type (llama_ftype)
};

// The recipe called `name` (case-insensitive; llama-quantize's aliases
// Q3_K, Q4_K, Q5_K for the _M mixes), nullopt if none.
std::optional<QuantRecipeInfo> find_quant_recipe(const std::string& name);
std::vector<std::string> quant_recipe_names();

// What the rules need to know about the model.
struct QuantRecipeModel {
  int n_layer = 0;      // blocks (llama.cpp's n_ffn_down; also its count of attn_v tensors)
  int n_gqa = 1;        // n_head / n_head_kv of layer 0
  bool is_70b = false;  // llama.cpp's LLM_TYPE_70B (a llama of 80 blocks)
  bool tied = false;    // no output.weight: the token embedding is the output head
  bool has_imatrix = false;
  // Experts per MoE layer (0: dense). llama.cpp's rules for 8 experts
  // (Mixtral): attn_v and attn_k Q8_0, attn_output Q5_K in the K mixes; its
  // ffn_down rules cover ffn_down_exps and ffn_down_shexp, indexed by layer.
  int n_expert = 0;
};

// The type of a weight matrix under `recipe` before the row fallback
// (role from the tensor vocabulary; n_per_row = ne[0]). index: for attn_v
// and ffn_down, the tensor's number among those of its role that the rules
// see (no --tensor-type override), in layer order, as llama.cpp counts them
// (the layer when there are no overrides).
DType quant_recipe_type(const QuantRecipeInfo& recipe, const QuantRecipeModel& m, TensorRole role, int index,
                        int64_t n_per_row);

// One --tensor-type override: tensors whose name contains a match of the
// regex `pattern` (ECMAScript, lowercased as llama-quantize does) get type.
struct TensorTypeOverride {
  std::string pattern;
  DType type = DType::kQ8_0;
};
// Parses "PATTERN=TYPE" (a ggml type name). Errors name what is wrong.
Result<TensorTypeOverride> parse_tensor_type_override(const std::string& arg);

}  // namespace ember
