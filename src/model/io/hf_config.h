// Hugging Face config.json -> GGUF-style metadata, and HF tensor names ->
// GGUF tensor names, for the architectures ember runs from safetensors:
// llama (LlamaForCausalLM, MistralForCausalLM), qwen2 (Qwen2ForCausalLM),
// qwen3 (Qwen3ForCausalLM) and gemma3 (Gemma3ForCausalLM,
// Gemma3ForConditionalGeneration's text model).
// Both the legacy config layout (rope_theta / rope_scaling) and the newer
// one (rope_parameters, per layer type for gemma3) are understood.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/metadata.h"

namespace ember {

// What the loader needs besides the metadata.
struct HfModelInfo {
  std::string arch;  // "llama", "qwen2", "qwen3" or "gemma3"
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_vocab = 0;
  int64_t head_dim = 0;
  bool tie_word_embeddings = false;
  // Gemma's RMSNorm scales by (1 + w); GGUF stores w + 1, so the loader adds 1.
  bool norm_plus_one = false;
  // llama3-style RoPE scaling: per-frequency divisors (head_dim / 2 values)
  // that the loader publishes as the tensor rope_freqs.weight, as GGUF
  // converters do. Empty otherwise.
  std::vector<float> rope_freq_factors;
};

// Parses config.json text (`name` is used in messages) and fills `meta` with
// GGUF-style keys; see model_file.h for the list.
Result<HfModelInfo> hf_config_to_metadata(const std::string& config_text, const std::string& name, Metadata* meta);

// "model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight" for `arch`.
// Returns "" for tensors ember does not use (vision tower, projector, rotary
// buffers, anything unknown). Prefixes of multimodal checkpoints
// ("language_model.model.", "model.language_model.") are understood.
std::string hf_tensor_name_to_gguf(const std::string& arch, const std::string& hf_name);

// llama3 RoPE frequency divisors for rope_freqs.weight (head_dim / 2 values).
std::vector<float> llama3_rope_freq_factors(int64_t head_dim, double theta, double factor, double low_freq_factor,
                                            double high_freq_factor, double original_context);

}  // namespace ember
