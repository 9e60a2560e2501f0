// mistral3: Ministral 3 and the text model of Mistral Small 3.x (llama.cpp's
// mistral3). Llama blocks (interleaved RoPE on GGUF files, whose Q/K rows
// llama.cpp's converter permutes; SwiGLU), YaRN RoPE scaling (Ministral 3:
// factor 16 over 16k, magnitude 1), and the attention temperature of Llama 4
// (Q times 1 + beta ln(1 + floor(pos / original context)),
// mistral3.attention.temperature_scale = rope_parameters.llama_4_scaling_beta).
// Sliding windows as configured: Ministral 3 and Mistral apply
// sliding_window to every layer (transformers' MistralModel); the earlier
// Ministral (model_type ministral) per layer_types. GGUF files carry them as
// mistral3.attention.sliding_window and a per-layer
// .sliding_window_pattern (llama.cpp's mistral3 reads neither and attends
// globally).
#include <cmath>

#include <nlohmann/json.hpp>

#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kFfnNormTensors, kDenseFfnTensors);
constexpr const char* kHfClasses[] = {"Ministral3ForCausalLM", "Mistral3ForConditionalGeneration",
                                      "MinistralForCausalLM"};
constexpr const char* kHfModelTypes[] = {"ministral3", "mistral3", "ministral"};

Status fill_mistral3(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNormal));
  const std::string key = "mistral3.attention.temperature_scale";
  if (meta.find(key)) {
    auto v = meta.get_float(key);
    if (!v || !(*v >= 0) || !std::isfinite(*v)) return Status::errorf("metadata key '{}' is invalid", key);
    cfg->attn_temp_scale = static_cast<float>(*v);
  }
  return fill_sliding_windows(meta, cfg, 0);
}

// Ministral3Config / MistralConfig / MinistralConfig: the temperature and
// the sliding windows.
Status hf_mistral3(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  if (const HfConfigView::json* rp = cv.get("rope_parameters"); rp && rp->is_object()) {
    auto it = rp->find("llama_4_scaling_beta");
    if (it != rp->end() && !it->is_null()) {
      double beta = 0;
      EMBER_RETURN_IF_ERROR(cv.number_of(&*it, "llama_4_scaling_beta", &beta, std::nullopt));
      if (beta < 0) return Status::errorf("{}: llama_4_scaling_beta must not be negative", cv.name());
      meta->set("mistral3.attention.temperature_scale", hf_f32(beta));
    }
  }
  if (!cv.get("sliding_window")) return Status::ok();
  int64_t window = 0;
  EMBER_RETURN_IF_ERROR(cv.get_count("sliding_window", &window, std::nullopt));
  // Every layer slides (MistralModel); MinistralConfig's layer_types choose.
  const HfConfigView::json* mt = cv.get("model_type");
  const bool by_layer_types = mt && mt->is_string() && mt->get<std::string>() == "ministral";
  if (!by_layer_types) {
    meta->set("mistral3.attention.sliding_window", hf_u32(window));
    return Status::ok();
  }
  std::vector<int32_t> all(static_cast<size_t>(ctx.n_layer), 1);
  return hf_set_sliding_windows(cv, "mistral3", window, std::move(all), meta);
}

}  // namespace

constinit const ArchSpec kMistral3Spec = {
    .name = "mistral3",
    .fill = fill_mistral3,
    .gguf_rope_type = "normal",  // llama.cpp's converter permutes Q/K (a LlamaModel)
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    // Ministral3Config's defaults (head_dim: MistralConfig's, n_embd / n_head).
    .hf_defaults = {.hidden_size = 4096, .num_hidden_layers = 34, .num_attention_heads = 32, .intermediate_size = 14336,
                    .vocab_size = 131072, .num_key_value_heads = 8, .max_position_embeddings = 262144,
                    .rope_theta = 1000000.0},
    .hf_config = hf_mistral3,
    .hf_norm_plus_one = false,
    .hf_permute_qk = true,
    .chat_template = "chatml",
    .gen = {.n_vocab = 131072, .n_ctx = 262144, .rope_base = 1000000, .norm_eps = 1e-5, .tied_embeddings = true},
};

}  // namespace ember
