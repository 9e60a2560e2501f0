// The tensor vocabulary shared by every architecture: each TensorRole is one
// GGUF tensor name of llama.cpp's convention ("token_embd.weight",
// "blk.N.attn_q.weight", ...), with its kind, its place in the file and its
// shape written in model sizes (Dim). Architectures (arch_spec.h) list which
// roles they have; weight binding, the Hugging Face name map, the
// quantization plan and gen-model all read this one table.
// Plain constant data; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace ember {

enum class TensorRole : uint8_t {
  kTokenEmbd,       // token_embd.weight
  kRopeFreqs,       // rope_freqs.weight (Llama 3.1 frequency divisors)
  kRopeFactorsLong,   // rope_factors_long.weight (LongRoPE divisors beyond the original context)
  kRopeFactorsShort,  // rope_factors_short.weight (LongRoPE divisors within it)
  kOutputNorm,      // output_norm.weight
  kOutput,          // output.weight (absent: tied to token_embd)
  kAttnNorm,        // blk.N.attn_norm.weight
  kAttnQ,           // blk.N.attn_q.weight
  kAttnK,
  kAttnV,
  kAttnQkv,         // blk.N.attn_qkv.weight (Q|K|V rows in one matrix: Phi-3)
  kAttnQBias,       // blk.N.attn_q.bias
  kAttnKBias,
  kAttnVBias,
  kAttnOutput,      // blk.N.attn_output.weight
  kAttnOutputBias,
  kAttnQNorm,       // blk.N.attn_q_norm.weight (per-head RMSNorm; OLMoE, OLMo 2: over the whole row)
  kAttnKNorm,
  kPostAttnNorm,    // blk.N.post_attention_norm.weight
  kFfnNorm,         // blk.N.ffn_norm.weight
  kFfnGateInp,      // blk.N.ffn_gate_inp.weight (MoE router)
  kFfnGateExps,     // blk.N.ffn_gate_exps.weight (MoE experts, 3-D)
  kFfnUpExps,
  kFfnDownExps,
  kFfnGateUpExps,   // blk.N.ffn_gate_up_exps.weight (gate rows then up rows of each expert, 3-D)
  kFfnGateInpShexp, // blk.N.ffn_gate_inp_shexp.weight (the shared expert's sigmoid gate, [n_embd])
  kFfnGateShexp,    // blk.N.ffn_gate_shexp.weight (shared expert)
  kFfnUpShexp,
  kFfnDownShexp,
  kFfnGate,         // blk.N.ffn_gate.weight
  kFfnUp,
  kFfnDown,
  kPostFfnNorm,     // blk.N.post_ffw_norm.weight
  // gpt-oss: learned attention sinks (one logit per head), the router's
  // bias and the experts' biases ([width, n_expert]: row e is expert e's).
  kAttnSinks,       // blk.N.attn_sinks.weight
  kFfnGateInpBias,  // blk.N.ffn_gate_inp.bias
  kFfnGateExpsBias, // blk.N.ffn_gate_exps.bias
  kFfnUpExpsBias,
  kFfnDownExpsBias,
  kUnknown,         // a name outside the vocabulary
};
inline constexpr int kNumTensorRoles = static_cast<int>(TensorRole::kUnknown);

// Where a tensor sits: before the blocks, in each block, after the blocks
// (also the order in which gen-model writes them).
enum class TensorScope : uint8_t { kModel, kBlock, kHead };

enum class TensorKind : uint8_t {
  kMatrix,     // 2-D weight of a matrix product (or the embedding table)
  kNorm,       // 1-D RMSNorm weight
  kBias,       // 1-D bias
  kRopeFreqs,  // 1-D RoPE frequency divisors
  kRouter,     // 2-D MoE router, kept in f32
  kExperts,    // 3-D stack of expert matrices
};

// The sizes shapes are written in.
enum class Dim : uint8_t {
  kEmbd,      // n_embd
  kVocab,     // n_vocab
  kQ,         // n_head * head_dim (the layer's)
  kKv,        // n_head_kv * head_dim
  kQkv,       // q + kv + v (a fused Q|K|V matrix)
  kV,         // n_head_kv * head_dim_v
  kO,         // n_head * head_dim_v
  kFf,        // n_ff (the layer's)
  kHeadDim,   // head_dim
  kRopeHalf,  // n_rot / 2
  kExperts,   // n_expert
  kFfExp,     // n_ff_exp: an expert's FFN width (the layer's)
  kFfExp2,    // 2 * n_ff_exp (fused gate + up)
  kFfShexp,   // n_ff_shexp: the shared expert's FFN width
  kQNorm,     // the Q norm's width: head_dim, or n_head * head_dim (ModelConfig::qk_norm_full)
  kKNorm,     // the K norm's width: head_dim, or n_head_kv * head_dim
  kHead,      // n_head (the layer's)
};

struct RoleInfo {
  TensorRole role;
  const char* name;  // short name for reports: "attn_q", "attn_q_bias", ...
  const char* gguf;  // GGUF name, after "blk.N." for block tensors
  TensorScope scope;
  TensorKind kind;
  int n_dims;
  Dim ne[3];          // GGML order: ne[0] is the row length
  const char* hf;     // Hugging Face name (after "model.layers.N." for block tensors) in the Llama
                      // convention; an ArchSpec may override it; nullptr: none (derived tensors)
};

const RoleInfo& role_info(TensorRole r);

// Values of the Dim symbols for one layer (or the model-level tensors).
struct TensorSizes {
  int64_t embd = 0, vocab = 0, q = 0, kv = 0, v = 0, o = 0, ff = 0, head_dim = 0, rope_half = 0, experts = 0;
  int64_t ff_exp = 0, ff_shexp = 0, q_norm = 0, k_norm = 0, head = 0;
  int64_t of(Dim d) const;
};

struct TensorSpec;  // model/archs/arch_spec.h
// The GGML shape (ne[0] first) of a listed tensor for `sizes`: its role's,
// unless the spec stacks the rows of other roles (TensorSpec::parts:
// [n_in, sum of their rows]).
std::vector<int64_t> tensor_shape(const TensorSpec& spec, const TensorSizes& sizes);
// Sizes of layer `il` of `cfg` (its own head counts and FFN width); il < 0:
// the model-wide values (for model-level tensors).
TensorSizes tensor_sizes(const ModelConfig& cfg, int il);

// "blk.3.attn_q.weight" -> kAttnQ with *layer = 3; "output.weight" -> kOutput
// with *layer = -1; anything else -> kUnknown. `layer` may be null.
TensorRole role_from_gguf_name(std::string_view name, int* layer);
// The GGUF name of role `r` in layer `il` (ignored for model-level roles).
std::string gguf_tensor_name(TensorRole r, int il);
// The GGUF name of a listed tensor: its role's, or the spec's own
// (TensorSpec::gguf: gpt-oss's FFN pre-norm is "post_attention_norm").
std::string gguf_tensor_name(const TensorSpec& spec, int il);

// One expert's 2-D matrix of a 3-D expert role (kFfnGateExps, kFfnUpExps,
// kFfnDownExps) under llama.cpp's per-expert names: "blk.3.ffn_gate.5.weight"
// for (kFfnGateExps, layer 3, expert 5). Hugging Face checkpoints that store
// one matrix per expert are loaded under these names (model_file.h).
std::string gguf_expert_tensor_name(TensorRole exps, int il, int expert);
// The inverse: the 3-D role with *layer and *expert, or kUnknown.
TensorRole role_from_gguf_expert_name(std::string_view name, int* layer, int* expert);
// True for the tensors of a Mixture-of-Experts FFN (router, experts, shared
// expert), bound when a layer's ffn_kind is FfnKind::kMoe; the dense FFN's
// (kFfnGate, kFfnUp, kFfnDown) are bound otherwise.
bool is_moe_role(TensorRole r);
bool is_dense_ffn_role(TensorRole r);

}  // namespace ember
