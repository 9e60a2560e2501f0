// ModelFile: one weight map + metadata, whatever the on-disk format.
// GGUF files are used as they are; a Hugging Face folder (config.json +
// *.safetensors, optionally sharded) is translated on load into GGUF-style
// metadata keys ("llama.block_count", "tokenizer.ggml.tokens", ...) and GGUF
// tensor names ("blk.0.attn_q.weight"), so the rest of ember reads one form.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/metadata.h"

namespace ember {

struct ModelFile {
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  Metadata metadata;
  std::map<std::string, TensorView> tensors;  // by GGUF-style name

  // Keeps mapped files and any converted/owned tensor buffers alive.
  std::vector<std::shared_ptr<void>> owners;

  const TensorView* tensor(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  const std::string* architecture() const { return metadata.get_string("general.architecture"); }
};

// Opens a .gguf file (recognised by its magic), a .safetensors file
// (config.json beside it; only that file's tensors), a Hugging Face model
// folder, or its config.json / model.safetensors.index.json.
//
// GGUF: metadata and tensor views as in the file. One key is added when the
// file lacks it: "<arch>.rope.type", the architecture's ArchSpec
// gguf_rope_type ("normal" for llama, whose converter permutes Q/K for
// interleaved RoPE; "neox" for qwen2, qwen3, gemma3).
//
// Hugging Face (format "safetensors"), keys written from config.json
// (<arch>: the ArchSpec whose hf_classes / hf_model_types name the config,
// e.g. llama for LlamaForCausalLM/MistralForCausalLM):
//   general.architecture, general.name (folder name), ember.hf.dir (absolute
//   folder path, for the tokenizer files), <arch>.vocab_size,
//   .context_length, .embedding_length, .block_count, .feed_forward_length,
//   .attention.head_count, .attention.head_count_kv, .attention.key_length,
//   .attention.value_length (head_dim), .attention.layer_norm_rms_epsilon,
//   .rope.freq_base, .rope.dimension_count (head_dim * partial_rotary_factor),
//   .rope.type = "neox" (HF's rotate_half on unpermuted Q/K weights),
//   rope scaling: .rope.scaling.type ("linear", "llama3" or "yarn") and
//   .rope.scaling.factor; llama3 adds .rope.scaling.low_freq_factor,
//   .high_freq_factor, .original_context_length and the tensor
//   rope_freqs.weight (F32 [n_rot/2] frequency divisors, as GGUF
//   converters write it); yarn adds .original_context_length,
//   .yarn_beta_fast / _slow, .yarn_log_multiplier (mscale_all_dim) and
//   .yarn_attn_factor (the magnitude transformers computes); longrope (phi3)
//   the tensors rope_factors_long / _short.weight, .type "longrope" and
//   .attn_factor.
//   the architecture's own keys (ArchSpec::hf_config), for gemma3:
//   .attention.sliding_window, .attention.sliding_window_pattern
//   (every N-th layer is global; from layer_types or sliding_window_pattern),
//   .attention.query_pre_attn_scalar, .rope.local_freq_base (sliding layers),
//   .attn_logit_softcapping / .final_logit_softcapping when set; for phi3,
//   mistral3, smollm3 and olmo2 see their spec files (sliding windows as
//   .attention.sliding_window + a per-layer .sliding_window_pattern, the
//   attention temperature, smollm3.rope.layers, olmo2.rope.freq_base_swa).
//   tokenizer.ggml.bos_token_id / eos_token_id (first of a list) /
//   padding_token_id when config.json has them.
// Tensors get GGUF names (token_embd, output_norm, output, blk.N.attn_q, ...)
// from the spec's tensor list; tensors it does not list (vision tower,
// rotary buffers) are skipped. With tie_word_embeddings there is no
// output.weight. 1-D tensors (norms, biases) become owned F32 copies; norm
// weights of specs with hf_norm_plus_one (Gemma: HF applies (1 + w), GGUF
// files store w + 1) get +1. Matrices stay F16/BF16/F32 views into the map.
// Quantized checkpoints (config.json quantization_config: GPTQ, AWQ GEMM,
// compressed-tensors; model/io/hf_quant.h): each quantized linear is
// repacked at load time into an owned Q4_0 / Q4_1 / Q5_0 / Q8_0 (or exact
// dense F16 / F32) tensor whose dequantized values equal the reference
// dequantization bit for bit; ember.hf.quantization holds a one-line summary.
Result<std::unique_ptr<ModelFile>> open_model_file(const std::string& path);

}  // namespace ember
