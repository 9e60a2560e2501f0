// olmo2: OLMo 2 and OLMo 3 (llama.cpp's olmo2). No pre-norms: the
// attention and the FFN read the residual stream itself and RMSNorm their
// outputs before the residual add (post_attention_norm, post_ffw_norm; HF
// post_attention_layernorm, post_feedforward_layernorm). QK-norm over the
// whole Q and K projections (q_norm [n_head * head_dim], k_norm
// [n_head_kv * head_dim]), SwiGLU, NeoX RoPE, untied output in the releases.
// OLMo 3: sliding windows on the layers olmo2.attention.sliding_window_pattern
// marks (from layer_types; default: all but every 4th), which rotate with
// rope.freq_base_swa and no RoPE scaling (YaRN only on the global layers),
// as llama.cpp and transformers run them.
#include <nlohmann/json.hpp>

#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"

namespace ember {
namespace {

using namespace archs;

constexpr std::array<TensorSpec, 4> kOlmo2Norms = {{
    {R::kAttnQNorm, P::kRequired, G::kAlways},
    {R::kAttnKNorm, P::kRequired, G::kAlways},
    {R::kPostAttnNorm, P::kRequired, G::kAlways, "post_attention_layernorm.weight"},
    {R::kPostFfnNorm, P::kRequired, G::kAlways, "post_feedforward_layernorm.weight"},
}};
constexpr auto kBlockTensors = tensor_list(kAttentionProjTensors, kDenseFfnTensors, kOlmo2Norms);
constexpr const char* kHfClasses[] = {"Olmo2ForCausalLM", "Olmo3ForCausalLM"};
constexpr const char* kHfModelTypes[] = {"olmo2", "olmo3"};

Status fill_olmo2(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNeox));
  EMBER_RETURN_IF_ERROR(fill_sliding_windows(meta, cfg, 4));  // llama.cpp's default pattern
  const std::string key = "olmo2.rope.freq_base_swa";
  double swa_base = cfg->layers.empty() ? 10000.0 : cfg->layers[0].rope_base;
  if (meta.find(key)) {
    auto v = meta.get_float(key);
    if (!v || !(*v > 0) || !std::isfinite(*v)) return Status::errorf("metadata key '{}' is invalid", key);
    swa_base = *v;
  }
  for (LayerConfig& l : cfg->layers)
    if (l.sliding_window > 0) {
      l.rope_base = static_cast<float>(swa_base);
      l.rope_freq_scale = 1.f;
      l.rope_ext_factor = 0.f;
      l.rope_attn_factor = 1.f;
    }
  return Status::ok();
}

// Olmo3Config: sliding windows by layer_types (default: all but every 4th
// layer) and the sliding layers' RoPE base. Olmo2Config has neither.
Status hf_olmo2(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  const HfConfigView::json* mt = cv.get("model_type");
  if (!mt || !mt->is_string() || mt->get<std::string>() != "olmo3" || !cv.get("sliding_window")) return Status::ok();
  int64_t window = 0;
  EMBER_RETURN_IF_ERROR(cv.get_count("sliding_window", &window, std::nullopt));
  std::vector<int32_t> sliding(static_cast<size_t>(ctx.n_layer));  // Olmo3Config: all but every 4th
  for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (i + 1) % 4 != 0;
  EMBER_RETURN_IF_ERROR(hf_set_sliding_windows(cv, "olmo2", window, std::move(sliding), meta));
  meta->set("olmo2.rope.freq_base_swa", hf_f32(ctx.local_rope_theta));
  return Status::ok();
}

}  // namespace

constinit const ArchSpec kOlmo2Spec = {
    .name = "olmo2",
    .fill = fill_olmo2,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    // Olmo2Config's defaults.
    .hf_defaults = {.hidden_size = 4096, .num_hidden_layers = 32, .num_attention_heads = 32, .intermediate_size = 11008,
                    .vocab_size = 50304, .max_position_embeddings = 2048, .rope_theta = 10000.0},
    .hf_config = hf_olmo2,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 100352, .n_ctx = 4096, .rope_base = 500000, .norm_eps = 1e-6},  // OLMo 2 1B
    .qk_norm_full = true,
};

}  // namespace ember
