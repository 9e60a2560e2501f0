// ArchSpec: everything ember knows about one architecture, as data. The
// generic code iterates these tables: config_from_metadata (config filler,
// block wiring flags), bind_weights (tensor list and shapes), the Hugging
// Face loader (class names, model types, config.json defaults and extra
// keys, tensor names, norm +1), the GGUF loader (default RoPE type), convert
// (Q/K permutation of Hugging Face checkpoints), the chat prompt (built-in
// template) and gen-model (tensor list, shape defaults, vocabulary). A new
// architecture is one spec file (model/archs/<name>.cpp) registered in
// archs.cpp, plus its fixtures.
// Specs are constant, statically initialised objects; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/archs/tensors.h"
#include "model/config.h"

namespace ember {

class HfConfigView;  // model/io/hf_config.h
struct ModelFile;        // model/io/model_file.h
struct SafetensorsSet;   // model/io/safetensors.h

// Whether a listed tensor must be in the file.
enum class Presence : uint8_t {
  kRequired,  // missing: the model does not load
  kOptional,  // bound when present (biases, rope_freqs; output: tied when absent)
  kUnbound,   // part of the layout (gen-model writes it) but not run by ember yet (MoE experts)
};

// When gen-model writes a listed tensor.
enum class GenWhen : uint8_t {
  kAlways,
  kNever,
  kUntied,       // output.weight, unless the shape ties it to the embedding
  kRopeScaling,  // rope_freqs.weight, with Llama 3.1 RoPE scaling
  kLongRope,     // rope_factors_long / _short, with LongRoPE (an original context below the trained one)
  kQkvBias,      // Q/K/V biases, when the shape has them
  kDense,        // dense FFN matrices, without experts
  kExperts,      // the Mixtral layout's router and experts
};

struct TensorSpec {
  TensorRole role;
  Presence presence;
  GenWhen gen;
  // Hugging Face name when it differs from role_info(role).hf. For a 3-D
  // expert role, the name of one expert's 2-D matrix with "{e}" where its
  // index goes ("mlp.experts.{e}.gate_proj.weight"), loaded under
  // gguf_expert_tensor_name.
  const char* hf = nullptr;
  // Another Hugging Face name of the same tensor, taken as it is: the fused
  // 3-D expert tensor transformers v5 writes ("mlp.experts.down_proj").
  const char* hf_alt = nullptr;
  // A fused matrix: the rows of these roles stacked in this order (Phi-3's
  // attn_qkv is Q|K|V, its ffn_up gate|up); its shape is [n_in, the sum of
  // their rows] (tensor_shape) and the binder gives each part its rows.
  std::span<const TensorRole> parts = {};
  // GGUF name (after "blk.N.") when it differs from role_info(role).gguf:
  // gpt-oss's FFN pre-norm is llama.cpp's "post_attention_norm.weight".
  const char* gguf = nullptr;
};

// config.json defaults for keys a config may omit, as the transformers
// config class of the architecture has them.
struct HfConfigDefaults {
  // 0: the key is required.
  int64_t hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, intermediate_size = 0, vocab_size = 0;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads
  int64_t max_position_embeddings = 2048;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads, which must divide
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
};

// What the architecture's own config.json reader gets besides the config.
struct HfConfigContext {
  int64_t n_layer = 0;
  int64_t head_dim = 0;
  int64_t n_ctx = 0;  // max_position_embeddings
  double local_rope_theta = 10000.0;  // rope_local_base_freq / rope_parameters.sliding_attention
  // F32 tensors the loader publishes beside the checkpoint's (GGUF name ->
  // values), as GGUF converters write them (LongRoPE factors). Never null.
  std::map<std::string, std::vector<float>>* f32_tensors = nullptr;
};

// The synthetic byte-level BPE vocabularies gen-model can write.
enum class SyntheticVocab : uint8_t {
  kLlama3,  // Llama 3 special tokens, pre "llama-bpe", BOS added
  kQwen2,   // Qwen special tokens, pre "qwen2", no BOS
  kPhi3,    // Phi-3's special tokens (<unk>, <s>, </s>, <|endoftext|>, chat markers; llama.cpp looks them
            // up in models named phi3), pre "llama-bpe", no BOS
};

// gen-model's defaults for `--arch NAME` (sizes come from the user).
struct GenModelDefaults {
  int n_vocab = 32000;
  int n_ctx = 4096;
  double rope_base = 10000;
  double norm_eps = 1e-5;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  int sliding_window = 0;
  SyntheticVocab vocab = SyntheticVocab::kLlama3;
  // `ember gen-model` copies the default model's vocabulary unless told
  // otherwise (Gemma 3: the default model is one).
  bool copy_default_vocab = false;
  // The experts' width goes in <arch>.expert_feed_forward_length (Qwen-MoE);
  // else it is feed_forward_length (Mixtral, OLMoE).
  bool expert_ff_key = false;
};

struct ArchSpec {
  const char* name;  // general.architecture

  // GGUF: completes the config after the common keys are read (RoPE style,
  // activation, per-layer windows and bases, scales). The block wiring flags
  // (qk_norm, post_attn_norm, post_ffn_norm) are set from the tensor list
  // before it runs.
  Status (*fill)(const Metadata& meta, ModelConfig* cfg);
  const char* gguf_rope_type;  // "<arch>.rope.type" of GGUF files that do not say

  // Tensors, in file order (gen-model writes them in this order).
  std::span<const TensorSpec> model_tensors;  // token_embd, rope_freqs, output_norm, output
  std::span<const TensorSpec> block_tensors;  // blk.N.*

  // Hugging Face.
  std::span<const char* const> hf_classes;      // "architectures" entries
  std::span<const char* const> hf_model_types;  // "model_type" values
  HfConfigDefaults hf_defaults;
  // Writes the architecture's own metadata keys from config.json (null: none).
  Status (*hf_config)(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta);
  bool hf_norm_plus_one;  // norms are applied as (1 + w): GGUF stores w + 1
  // HF checkpoints store Q/K rows for rotate_half (NeoX) RoPE while this
  // architecture's GGUF files pair rows for interleaved RoPE: converting to
  // GGUF permutes them and sets rope.type "normal".
  bool hf_permute_qk;

  const char* chat_template;  // built-in template for models without one

  GenModelDefaults gen;

  // QK-norm over the whole Q / K projection (OLMoE, OLMo 2) rather than each
  // head (ModelConfig::qk_norm_full).
  bool qk_norm_full = false;

  // Hugging Face checkpoints whose tensors are not GGUF's layout (gpt-oss:
  // experts stored transposed, gate and up interleaved): run on the loaded
  // tensors (GGUF names, as the listed hf / hf_alt names map them) before
  // binding, with the checkpoint's tensors at hand (quantized experts the
  // name map does not cover: gpt-oss's MXFP4 _blocks / _scales); replaces
  // or adds owned rearranged copies (null: none).
  Status (*hf_rearrange)(const SafetensorsSet& set, ModelFile* file) = nullptr;

  // The listed entry for `role`, or null (a fused tensor's parts are not
  // listed entries).
  const TensorSpec* find(TensorRole role) const;
  bool requires_tensor(TensorRole role) const {
    const TensorSpec* t = find(role);
    return t && t->presence == Presence::kRequired;
  }
  bool has_experts() const;
};

// What a Mixture-of-Experts architecture's GGUF files leave out
// (fill_moe_layers), as llama.cpp's loader assumes it.
struct MoeDefaults {
  // Without <arch>.expert_count (or with 0) the layers are dense; with
  // `required` that is an error instead (the qwen2moe / qwen3moe / olmoe
  // loaders of llama.cpp refuse n_expert 0).
  bool required = true;
  // expert_feed_forward_length absent: n_ff / n_expert_used (llama.cpp's
  // rule for qwen2moe / qwen3moe) or n_ff (OLMoE and Mixtral give the
  // expert width as feed_forward_length).
  bool ff_exp_is_ff_over_used = false;
  // expert_shared_feed_forward_length absent: n_ff (qwen2moe) or no shared
  // expert.
  bool shared_expert = false;
  // expert_weights_norm absent: whether the k weights are renormalised
  // (qwen3moe and Mixtral yes; qwen2moe and OLMoE no, as llama.cpp runs
  // them).
  bool norm_topk = false;
  // expert_gating_func absent: this rule (gpt-oss: softmax over the top k
  // logits, as llama.cpp hard-codes it for the architecture).
  MoeGating gating = MoeGating::kSoftmax;
};

// config.json keys of a Mixture-of-Experts architecture (hf_moe_config),
// with its transformers config class's defaults (0: required).
struct HfMoeKeys {
  int64_t n_expert = 0;       // num_experts / num_local_experts; 0 here and absent: a dense model
  int64_t n_expert_used = 0;  // num_experts_per_tok
  // The experts' width: this key (written as expert_feed_forward_length),
  // or null: intermediate_size is their width (OLMoE, Mixtral).
  const char* ff_exp_key = nullptr;
  int64_t ff_exp_default = 0;
  bool shared_expert = false;  // shared_expert_intermediate_size
  int64_t shared_default = 0;
  bool norm_topk = false;      // norm_topk_prob when absent (or always, without norm_topk_key)
  bool norm_topk_key = true;   // the config has norm_topk_prob (Mixtral always renormalises)
};

// Shared parts of the specs.
// Writes <arch>.expert_count, .expert_used_count,
// .expert_feed_forward_length, .expert_shared_feed_forward_length and
// .expert_weights_norm from config.json. Dense layers among MoE ones
// (mlp_only_layers, decoder_sparse_step != 1) are an error.
Status hf_moe_config(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta, const HfMoeKeys& k);
// The MoE keys of a GGUF file into cfg->layers (after the RoPE fill, which
// resets them): expert_count, expert_used_count (1 <= used <= count),
// expert_feed_forward_length (one value or one per layer),
// expert_shared_feed_forward_length, expert_weights_norm (bool),
// expert_weights_scale (0 means 1), expert_gating_func (llama.cpp's values:
// 1 softmax, 3 softmax over the top k). Errors name the key.
Status fill_moe_layers(const Metadata& meta, ModelConfig* cfg, const MoeDefaults& d);
// Fills per-layer RoPE settings shared by most architectures from
// "<arch>.rope.freq_base" and "<arch>.rope.scaling.*" (resets cfg->layers):
// linear and YaRN scaling (type, factor, yarn_beta_fast / _slow,
// yarn_ext_factor, yarn_log_multiplier, yarn_attn_factor, as llama.cpp reads
// them), the magnitude rope.scaling.attn_factor (LongRoPE), and the use of
// a frequency-factor tensor when the model has one.
Status fill_default_rope(const Metadata& meta, ModelConfig* cfg);
// Per-layer sliding windows from "<arch>.attention.sliding_window" (absent
// or 0: none) and "<arch>.attention.sliding_window_pattern": one boolean per
// layer (true: sliding, as llama.cpp's converter writes it for OLMo 3), or
// N: every N-th layer (1-based) global; absent: `default_period` (0: every
// layer slides). Sets the windows of cfg->layers (sized n_layer).
Status fill_sliding_windows(const Metadata& meta, ModelConfig* cfg, int default_period);
// Reads "<arch>.rope.type" ("normal"/"neox") if present, else keeps `fallback`.
RopeStyle rope_style_from_metadata(const Metadata& meta, const std::string& arch, RopeStyle fallback);
// The filler of Llama-like architectures: RoPE style from "<arch>.rope.type"
// (else `fallback`), SiLU-gated FFN, fill_default_rope.
Status fill_silu_decoder(const Metadata& meta, ModelConfig* cfg, RopeStyle fallback);

}  // namespace ember
