// The per-tensor quantization plan of `ember quantize`: one entry per tensor
// of the source model (its role from the tensor vocabulary of model/archs,
// source type, target type, method, load-time transform), built from
// ConvertOptions by one function with llama-quantize-like rules, then
// executed tensor by tensor by a Quantizer (quantizer.h). The plan is plain
// data: it can be printed, tested and edited before it runs, and the
// calibrated methods (issue 13) choose per tensor in the same place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/metadata.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/archs/tensors.h"
#include "model/io/model_file.h"
#include "transform/quant_recipe.h"

namespace ember {

class Quantizer;

struct ConvertOptions {
  DType type = DType::kQ8_0;
  // Matrices whose rows are not a multiple of the block size fall back to a
  // compatible type (fallback_row_type), as llama.cpp does; false: an error.
  bool allow_fallback = true;
  // Per-tensor overrides, as llama-quantize's --output-tensor-type and
  // --token-embedding-type: the output head (output.weight, or
  // token_embd.weight when the model ties them) and the token embedding.
  std::optional<DType> output_type;
  std::optional<DType> token_embd_type;
  // A llama.cpp mix (quant_recipe.h): every matrix gets the recipe's type
  // for it (type is ignored); general.file_type is the recipe's.
  std::optional<QuantRecipeInfo> recipe;
  bool has_imatrix = false;  // the recipe's rules for a calibrated quantization
  // One type for every matrix (--pure). Without it MXFP4 is an expert type,
  // as in llama-quantize's MXFP4_MOE: the other matrices get q8_0.
  bool pure = false;
  // --tensor-type overrides, first match wins (after output_type /
  // token_embd_type, before the recipe's rules).
  std::vector<TensorTypeOverride> tensor_types;
};

// How a tensor's new payload is made.
enum class QuantMethod : uint8_t {
  kCopy,     // passed through unchanged (the target is its type, no transform)
  kConvert,  // read as f32 and written as f32 / f16 / bf16
  kRtn,      // quantized to a block type by round-to-nearest (RtnQuantizer)
  kImatrix,  // importance-weighted rounding with calibration statistics (ImatrixQuantizer)
  kGptq,     // GPTQ error feedback with calibration Hessians (run_gptq, transform/gptq_model.h)
  kAwq,      // AWQ scales folded layer by layer (run_awq, transform/awq_model.h), then kRtn / kImatrix
};
const char* quant_method_name(QuantMethod m);
// The method of an entry whose source became f32 (a transform rewrote it):
// copy to f32, convert to f16 / bf16, round-to-nearest otherwise.
QuantMethod method_from_f32(DType target);

// Replaces tensor `name` of *f (which must exist) by the f32 values v of the
// same shape, owned by *f (a transform's output: AWQ folds, QuaRot).
void replace_with_f32(ModelFile* f, const std::string& name, std::vector<float> v);
// Replaces tensor `name` of *f (which must exist) by `bytes` bytes of type
// `type` (same shape), owned by *f (a quantized or pruned payload).
void replace_tensor(ModelFile* f, const std::string& name, DType type, std::shared_ptr<uint8_t[]> data, size_t bytes);
// The rows of a 2-D tensor [n_out, n_in] as f32 (dequantized by the
// reference dequantizers).
std::vector<float> read_f32_rows(const TensorView& t);

// A change of the tensor's values on the way.
enum class TensorTransform : uint8_t {
  kNone,
  // Rows of each head reordered from rotate_half (Hugging Face) to
  // interleaved pairs (GGUF): row 2i <- i, 2i+1 <- i + head_dim / 2. On a
  // 1-D tensor (the Q / K bias) the elements, which are its output rows.
  kPermuteQkRows,
};

struct QuantPlanEntry {
  std::string name;                       // GGUF name
  TensorRole role = TensorRole::kUnknown;  // from the name (kUnknown: outside the vocabulary)
  int layer = -1;                          // block index, -1 for model-level tensors
  std::vector<int64_t> ne;                 // shape, GGML order
  DType source = DType::kF32;
  DType target = DType::kF32;
  QuantMethod method = QuantMethod::kCopy;
  TensorTransform transform = TensorTransform::kNone;
  int64_t head_dim = 0;  // kPermuteQkRows: rows per head
  // The type the options asked for when a fallback replaced it (rows not a
  // multiple of its block size); nullopt otherwise.
  std::optional<DType> requested;
  // The user fixed this matrix's type (--output-type, --token-embedding-type
  // or a --tensor-type pattern): plan-wide choices (--target-bpw) keep it.
  bool pinned = false;
  // A 3-D expert tensor assembled from other tensors of the source (a
  // Hugging Face checkpoint's one matrix per expert, or the gate / up half
  // of its fused gate_up_proj): expert e's ne[1] rows are rows
  // sources[e].row0 .. of tensor sources[e].tensor (all of type `source`).
  // Empty: the source tensor `name` itself.
  struct RowSource {
    std::string tensor;
    int64_t row0 = 0;
  };
  std::vector<RowSource> sources;
  // Matrices stacked in the tensor (ne[2] of a 3-D expert tensor, else 1):
  // calibration statistics come per matrix (n_matrices() * ne[0] values).
  int64_t n_matrices() const { return ne.size() == 3 ? ne[2] : 1; }
};

struct QuantPlan {
  DType file_type = DType::kQ8_0;  // general.file_type of the result
  std::vector<QuantPlanEntry> entries;  // in the source's tensor order (by name)
  // Metadata keys the result sets (in this order), e.g. rope.type after a
  // Q/K permutation, general.file_type.
  std::vector<std::pair<std::string, GgufValue>> metadata;
};

// The type a matrix with rows of n_per_row elements gets when `type` does not
// fit it: type itself if n_per_row is a multiple of its block size, else
// q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K -> q4_0, others ->
// f16 (and f16 when the fallback does not fit either), as llama.cpp does.
DType fallback_row_type(DType type, int64_t n_per_row);

// True if t can be the target of a conversion (f32, f16, bf16 and the
// storage quantization types; not the activation types q8_1 / q8_K).
bool convertible_to(DType t);

// The llama.cpp "general.file_type" value for a model converted to t.
int llama_file_type(DType t);

// The plan for converting `src` with `opts`:
//   - 2-D tensors named *.weight, and 3-D expert tensors, are matrices (but
//     MoE routers, kept f32 as llama.cpp does): opts.type, or the recipe's
//     type for the tensor, or the first matching tensor_types override; the output head
//     (output.weight, or token_embd.weight when there is no output.weight)
//     gets opts.output_type and the embedding opts.token_embd_type when set;
//     a type that does not fit the rows falls back (fallback_row_type) or,
//     without allow_fallback, is an error naming the tensor;
//   - every other tensor (norms, biases, rope factors, routers) is f32;
//   - a Hugging Face checkpoint's experts become 3-D ffn_{gate,up,down}_exps
//     entries assembled from its per-expert matrices or fused gate_up /
//     down tensors (QuantPlanEntry::sources), as llama.cpp's converter
//     writes them;
//   - a tensor already in its target type is copied;
//   - Hugging Face checkpoints of architectures whose spec sets
//     hf_permute_qk get their Q/K rows permuted and rope.type "normal".
// Errors: an unconvertible type, an unreadable source type, a row length
// that does not fit, a head size that cannot be determined.
Result<QuantPlan> plan_quantization(const ModelFile& src, const ConvertOptions& opts);

// "q4_0: 12 tensors (2 by fallback from q4_K), q8_0: 1, f32: 9" and the
// methods used.
std::string quant_plan_summary(const QuantPlan& plan);

// Which quantizer runs entries of method m (null: none available).
using QuantizerFor = std::function<Quantizer*(QuantMethod m)>;
// The calibration importance of an entry's input columns (ne[0] values,
// QuantTensorContext::importance), null when there is none.
using ImportanceFor = std::function<const float*(const QuantPlanEntry& e)>;

// Executes `plan` on `src` (which the result keeps alive): each entry's rows
// are read as f32 (transformed if the entry says so) in chunks across `pool`
// and written by the entry's method. Fails if the plan does not match the
// source (a tensor missing or of another type) or a method has no quantizer.
// importance_for (optional) gives the quantizers their statistics.
Result<std::unique_ptr<ModelFile>> execute_quant_plan(std::unique_ptr<ModelFile> src, const QuantPlan& plan,
                                                      const QuantizerFor& quantizer_for, ThreadPool& pool,
                                                      const ImportanceFor& importance_for = {});

// One entry's rows of `t` (its source tensor) read as f32 (through the
// entry's row transform) in chunks across `pool` and written as e.target by
// `q` (null: a float conversion). The result's buffer is kept alive by
// *owner. A 3-D entry's rows are quantized expert by expert (no chunk spans
// two), each with its own importance (importance: n_matrices() * ne[0]
// values). Errors: the quantizer's, with the tensor's name.
Result<TensorView> run_plan_entry(const TensorView& t, const QuantPlanEntry& e, Quantizer* q, const float* importance,
                                  ThreadPool& pool, std::shared_ptr<void>* owner);
// The same with the entry's rows taken from `src`: the tensor `e.name`, or
// the assembled rows of e.sources.
Result<TensorView> run_plan_entry(const ModelFile& src, const QuantPlanEntry& e, Quantizer* q,
                                  const float* importance, ThreadPool& pool, std::shared_ptr<void>* owner);
// Row r of entry e's source rows in src (its own tensor, or e.sources), in
// the source type; null when out of range or missing.
const uint8_t* plan_entry_row(const ModelFile& src, const QuantPlanEntry& e, int64_t r);

}  // namespace ember
