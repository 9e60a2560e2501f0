// ModelConfig: everything the one transformer-block implementation needs to
// know about an architecture. Each architecture's spec (model/archs/*.cpp)
// fills it from metadata; the forward pass never branches on the
// architecture name.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#include "core/metadata.h"

namespace ember {

// The gate's activation of the gated FFNs: SiLU, GELU (tanh), or gpt-oss's
// clamped SwiGLU (kernels/ops.h swiglu_oai_row).
enum class Activation { kSilu, kGeluTanh, kSwiGluOai };

// What a layer's feed-forward sub-block is: the dense gated FFN
// (down(act(gate x) * up x)) or a Mixture-of-Experts layer of such FFNs
// (model/layers/moe.h).
enum class FfnKind { kDenseGated, kMoe };

// How a Mixture-of-Experts router turns its logits into the chosen experts
// and their weights: MoeGating (kernels/moe.h has the arithmetic). kSoftmax
// is Qwen2/3-MoE's, OLMoE's and Mixtral's (softmax over all experts, top k,
// renormalised with LayerConfig::moe_norm_topk: norm_topk_prob, true for
// Mixtral); kSoftmaxTopK gpt-oss's (top k logits, softmax over them);
// kSigmoid the shared expert's one-logit gate of Qwen2-MoE.

// Per-layer settings. Head counts and the FFN width are per layer because
// structured pruning (and some architectures) make layers differ; a model
// whose file gives single values has the same values in every layer. GGUF
// files give per-layer values as arrays of n_layer integers
// (<arch>.attention.head_count, .attention.head_count_kv,
// .feed_forward_length), as llama.cpp writes them.
struct LayerConfig {
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  FfnKind ffn_kind = FfnKind::kDenseGated;
  int sliding_window = 0;     // 0: global attention; else keys with q_pos - k_pos >= window are masked
  bool use_rope = true;       // false: Q and K are not rotated (SmolLM3's NoPE layers)
  float rope_base = 10000.f;  // theta base for this layer
  float rope_freq_scale = 1.f;  // linear RoPE scaling: positions multiplied by this
  // Divide frequencies by the model's factor tensor: rope_freqs.weight
  // (Llama 3.1) or, with LongRoPE, rope_factors_short / _long (Model picks
  // one by the context length it runs with, Model::set_context_length).
  bool use_rope_freq_factors = false;
  // YaRN: each frequency blended from its rope_freq_scale-interpolated
  // value towards its unscaled one by this times the ramp over the
  // dimensions (ModelConfig::yarn_beta_*; llama.cpp's ext_factor: 1 for
  // YaRN, 0 for none: interpolated only).
  float rope_ext_factor = 0.f;
  // YaRN / LongRoPE magnitude: cos and sin are multiplied by it (as
  // transformers and llama.cpp do: the rotated dimensions of Q and K grow,
  // the others not).
  float rope_attn_factor = 1.f;
  // Mixture of experts (ffn_kind kMoe; GGUF <arch>.expert_count,
  // .expert_used_count, .expert_feed_forward_length,
  // .expert_shared_feed_forward_length, .expert_weights_norm,
  // .expert_weights_scale, .expert_gating_func): n_expert experts of width
  // n_ff_exp, n_expert_used of them per token with the router's weights
  // (times moe_weights_scale), plus a shared expert of width n_ff_shexp
  // (0: none) scaled by sigmoid(x . ffn_gate_inp_shexp) when the layer has
  // that gate. n_ff is the dense FFN's width and unused by a MoE layer.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int n_ff_shexp = 0;
  MoeGating moe_gating = MoeGating::kSoftmax;
  bool moe_norm_topk = false;
  float moe_weights_scale = 1.f;

  // Tensor parallelism (model/shard.h): the ranks that hold a copy of each
  // of this layer's KV heads (1: the KV heads are split; more when the
  // layer has fewer KV heads than ranks). A QK-norm over whole K rows counts
  // a replicated head's squares once (ModelConfig::qk_norm_full).
  int kv_replicas = 1;

  int n_q_dim(int head_dim) const { return n_head * head_dim; }
  int n_kv_dim(int head_dim) const { return n_head_kv * head_dim; }
  int n_v_dim(int head_dim_v) const { return n_head_kv * head_dim_v; }
};

// GGUF keys of the rotations `ember quantize --rotate` fuses into the
// weights (transform/quarot.h) and of the activation bits; each rotation
// value is a Hadamard group size g (kernels/hadamard.h), 0 or absent: none.
constexpr const char* kRotAttnInKey = "ember.quarot.attn_in_hadamard";    // Q/K/V input, g | n_embd
constexpr const char* kRotFfnInKey = "ember.quarot.ffn_in_hadamard";      // gate/up input, g | n_embd
constexpr const char* kRotFfnDownKey = "ember.quarot.ffn_down_hadamard";  // down input, g | every n_ff
constexpr const char* kRotAttnVKey = "ember.quarot.attn_v_hadamard";      // V rows / O columns, g = head_dim_v
constexpr const char* kRotAttnOutKey = "ember.quarot.attn_out_hadamard";  // O input, g | every n_head * head_dim_v
constexpr const char* kActBitsKey = "ember.activation_bits";              // 8 (default) or 4
// A trimmed output vocabulary (`ember prune --vocab N`): the ascending token
// ids whose rows output.weight holds (ModelConfig::output_tokens).
constexpr const char* kOutputTokensKey = "ember.output_tokens";

// Rotations fused into the weights. An input rotation of width g: the
// forward pass multiplies the linear's input rows by blockdiag(H_g, ...)
// online (H_g the orthonormal Hadamard of kernels/hadamard.h) and the
// weight's columns hold W blockdiag(H_g)^T, so x W^T is unchanged in exact
// arithmetic. attn_v is offline only: V's rows hold H W_v per head and O's
// columns W_o H^T per head (the attention output stays rotated between them);
// attn_out is an input rotation of O on top of it (across heads).
struct ModelRotation {
  int attn_in = 0;
  int ffn_in = 0;
  int ffn_down = 0;
  int attn_v = 0;
  int attn_out = 0;
  bool any() const { return attn_in || ffn_in || ffn_down || attn_v || attn_out; }
};

struct ModelConfig {
  std::string arch;
  std::string name;
  int n_layer = 0;
  int n_embd = 0;
  // Model-wide sizes; each layer's own are in layers[il]. When the file
  // gives per-layer values, n_head / n_head_kv / n_ff are the largest of
  // them (so sizes derived from them bound every layer), and the default
  // head_dim (no key_length) is n_embd over layer 0's head count, as in
  // llama.cpp.
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;     // K/Q head size
  int head_dim_v = 0;   // V head size
  int n_ff = 0;
  int n_vocab = 0;
  // The tokens the output head scores when it scores only a subset of the
  // vocabulary (a truncated draft head, engine/speculative/layerskip.h): ascending
  // ids; logits rows are n_logits() wide, entry j the score of
  // head_tokens[j]. Empty: the whole vocabulary (every model from a file).
  std::vector<int32_t> head_tokens;
  // A file whose output head keeps only some tokens (kOutputTokensKey;
  // ascending ids, output.weight row j scores output_tokens[j]): logits
  // rows stay n_vocab wide, every other token's logit is -inf (probability
  // 0), so the model runs as any target. Empty: the whole vocabulary.
  std::vector<int32_t> output_tokens;
  int n_ctx_train = 0;
  float norm_eps = 1e-5f;

  RopeStyle rope_style = RopeStyle::kNormal;
  int n_rot = 0;  // rotated dims per head
  // The context the RoPE scaling was trained from (<arch>.rope.scaling.
  // original_context_length): YaRN's ramp, LongRoPE's switch from short to
  // long factors, the attention temperature's period. Absent: n_ctx_train.
  int rope_orig_ctx = 0;
  float yarn_beta_fast = 32.f, yarn_beta_slow = 1.f;  // YaRN ramp bounds (rotations)
  // The ramp's bounds floored / ceiled to whole dimensions (llama.cpp,
  // transformers' default); false: as computed (gpt-oss's truncate = false;
  // GGUF <arch>.rope.scaling.yarn_truncate, ember's key).
  bool yarn_truncate = true;
  // The file declares LongRoPE (rope.scaling.type "longrope"; Phi-3's
  // rope.scaling.attn_factor): rope_factors_long / _short must be there.
  bool rope_longrope = false;
  std::vector<LayerConfig> layers;

  // Block wiring (set from the architecture's tensor list).
  bool attn_pre_norm = true;    // RMSNorm of the attention input (all but OLMo 2)
  bool ffn_pre_norm = true;     // RMSNorm of the FFN input (all but OLMo 2)
  bool qk_norm = false;         // RMSNorm on each Q/K head (Gemma 3, Qwen3)
  bool qk_norm_full = false;    // ... over the whole Q / K row instead (OLMoE, OLMo 2; weights [q width] / [kv width])
  bool post_attn_norm = false;  // RMSNorm on attention output before the residual (Gemma, OLMo 2)
  bool post_ffn_norm = false;   // RMSNorm on FFN output before the residual (Gemma, OLMo 2)
  Activation activation = Activation::kSilu;
  float embd_scale = 1.f;       // token embeddings multiplied by this (Gemma: sqrt(n_embd))
  float attn_scale = 0.f;       // multiplies Q·K; 0 means 1/sqrt(head_dim)
  float attn_logit_softcap = 0.f;
  float final_logit_softcap = 0.f;
  // Attention temperature (Llama 4, Ministral 3): Q of the token at position
  // p times 1 + attn_temp_scale * ln(1 + floor(p / rope_orig_ctx)), in
  // every layer after RoPE. 0: off.
  float attn_temp_scale = 0.f;

  ModelRotation rotation;  // from the kRot*Key metadata
  int act_bits = 8;        // kActBitsKey: activation bits of the block linears (Model::set_activation_bits)
  // Batch-aware expert sharing of the MoE layers (kernels/moe.h; off by
  // default: exact routing). Set at run time by Model::set_moe_routing.
  MoeSharing moe_sharing;

  int n_kv_dim() const { return n_head_kv * head_dim; }
  int n_q_dim() const { return n_head * head_dim; }
  int n_v_dim() const { return n_head_kv * head_dim_v; }
  // Width of a logits row: the head's tokens when it is truncated.
  int n_logits() const { return head_tokens.empty() ? n_vocab : static_cast<int>(head_tokens.size()); }
  // Largest per-layer sizes (buffer sizes).
  int max_n_head() const;
  int max_n_head_kv() const;
  int max_n_ff() const;
  // Largest n_expert_used * n_ff_exp (rows of the expert buffers per token),
  // n_expert_used, n_expert and n_ff_shexp over the MoE layers (0 without).
  int64_t max_moe_ff_per_token() const;
  int max_n_expert_used() const;
  int max_n_expert() const;
  int max_n_ff_shexp() const;
  bool has_moe() const { return max_n_expert() > 0; }
};

// Reads the common hyper-parameters ("<arch>.block_count", ...), sets the
// block wiring from the architecture's tensor list and lets its spec's
// filler complete the config. Unknown architecture (the message lists the
// supported ones), a missing/invalid key or a per-layer array of the wrong
// length, with a non-positive entry, or with a layer whose head_count is not
// a multiple of its head_count_kv: an error naming it.
Result<ModelConfig> config_from_metadata(const Metadata& meta);

// Reads the kRot*Key and kActBitsKey metadata into cfg (layers already
// filled): each rotation 0 or a Hadamard size dividing its input width
// (attn_v: equal to head_dim_v), activation bits 4 or 8. Errors name the key.
// Part of config_from_metadata.
Status read_rotation_metadata(const Metadata& meta, ModelConfig* cfg);

// Names of the supported architectures (the registry of model/archs/archs.h).
std::vector<std::string> supported_architectures();

}  // namespace ember
