// Hugging Face config.json -> GGUF-style metadata, and HF tensor names ->
// GGUF tensor names, for the architectures ember runs from safetensors (the
// ArchSpecs in model/archs: their HF class names, model types, config
// defaults, extra keys and tensor names). Both the legacy config layout
// (rope_theta / rope_scaling) and the newer one (rope_parameters, per layer
// type for gemma3) are understood.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/metadata.h"
#include "core/status.h"

namespace ember {

// What the loader needs besides the metadata.
struct HfModelInfo {
  std::string arch;  // an ArchSpec name
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_vocab = 0;
  int64_t head_dim = 0;
  bool tie_word_embeddings = false;
  // The architecture's norms are (1 + w); GGUF stores w + 1, so the loader adds 1.
  bool norm_plus_one = false;
  // F32 tensors the loader publishes beside the checkpoint's, by GGUF name,
  // as GGUF converters write them: llama3-style RoPE scaling's divisors
  // (rope_freqs.weight, n_rot / 2 values), LongRoPE's factors
  // (rope_factors_long / _short.weight).
  std::map<std::string, std::vector<float>> f32_tensors;
};

// config.json text as a JSON object; errors name `name`.
Status parse_hf_config_json(const std::string& config_text, const std::string& name, nlohmann::json* out);

// Parses config.json text (`name` is used in messages) and fills `meta` with
// GGUF-style keys; see model_file.h for the list.
Result<HfModelInfo> hf_config_to_metadata(const std::string& config_text, const std::string& name, Metadata* meta);

// "model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight" for `arch`
// (the names its ArchSpec lists). Returns "" for tensors ember does not use
// (vision tower, projector, rotary buffers, anything unlisted) and for an
// unknown architecture. Prefixes of multimodal checkpoints
// ("language_model.model.", "model.language_model.") are understood.
std::string hf_tensor_name_to_gguf(const std::string& arch, const std::string& hf_name);

// llama3 RoPE frequency divisors for rope_freqs.weight (head_dim / 2 values).
std::vector<float> llama3_rope_freq_factors(int64_t head_dim, double theta, double factor, double low_freq_factor,
                                            double high_freq_factor, double original_context);

// A parsed config.json as the readers see it: keys are looked up in
// text_config first (multimodal configs), then at the top; JSON null counts
// as absent. Errors name the file (`name`) and the key. Borrows the JSON
// and the name; used on one thread.
class HfConfigView {
 public:
  using json = nlohmann::json;
  HfConfigView(const json& root, const std::string& name);

  const json* get(const char* key) const;
  // An integer (integral floats accepted); `def` when absent, else an error.
  Status get_int(const char* key, int64_t* out, std::optional<int64_t> def) const;
  // A positive integer that fits GGUF's uint32 fields.
  Status get_count(const char* key, int64_t* out, std::optional<int64_t> def) const;
  Status get_float(const char* key, double* out, std::optional<double> def) const;
  // A finite number from `j` (null: `def`, else an error naming `key`).
  Status number_of(const json* j, const char* key, double* out, std::optional<double> def) const;
  const std::string& name() const { return name_; }

 private:
  const json& root_;
  const json* text_ = nullptr;
  const std::string& name_;
};

// Sliding windows of a config.json for an architecture that keeps them as
// "<arch>.attention.sliding_window" + a per-layer boolean
// "<arch>.attention.sliding_window_pattern" (fill_sliding_windows reads them):
// `sliding` holds the default flag per layer (1: sliding); layer_types, when
// present, overrides it ("sliding_attention" / "full_attention"). Writes the
// keys; errors name the key.
Status hf_set_sliding_windows(const HfConfigView& cv, const std::string& arch, int64_t window,
                              std::vector<int32_t> sliding, Metadata* meta);

// GGUF values of the types llama.cpp's converter writes for config keys.
GgufValue hf_u32(int64_t v);
GgufValue hf_f32(double v);

}  // namespace ember
