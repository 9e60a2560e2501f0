// smollm3: SmolLM3. Llama blocks (interleaved RoPE on GGUF files, whose Q/K
// rows llama.cpp's converter permutes; SwiGLU; tied embeddings in the
// release) whose every fourth layer has no RoPE (NoPE: layers 3, 7, ...).
// GGUF files from llama.cpp's converter carry no key for it (llama.cpp fixes
// the interval at 4); a Hugging Face config's no_rope_layers list (1: RoPE)
// or no_rope_layer_interval is read as given and kept in the ember key
// smollm3.rope.layers (one boolean per layer, true: RoPE). Sliding windows
// (use_sliding_window, off in the release) on the layers layer_types names.
#include <nlohmann/json.hpp>

#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"

namespace ember {
namespace {

using namespace archs;

constexpr auto kBlockTensors = tensor_list(kAttentionTensors, kFfnNormTensors, kDenseFfnTensors);
constexpr const char* kHfClasses[] = {"SmolLM3ForCausalLM"};
constexpr const char* kHfModelTypes[] = {"smollm3"};
constexpr const char* kRopeLayersKey = "smollm3.rope.layers";

Status fill_smollm3(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNormal));
  const GgufValue* v = meta.find(kRopeLayersKey);
  if (v && (v->type != GgufType::kArray || !gguf_type_is_int(v->elem_type) ||
            v->ints.size() != static_cast<size_t>(cfg->n_layer)))
    return Status::errorf("metadata key '{}' must list one boolean per layer ({})", kRopeLayersKey, cfg->n_layer);
  for (int il = 0; il < cfg->n_layer; ++il) {
    LayerConfig& l = cfg->layers[il];
    l.use_rope = v ? v->ints[il] != 0 : (il + 1) % 4 != 0;
    if (!l.use_rope) l.rope_attn_factor = 1.f;
  }
  return fill_sliding_windows(meta, cfg, 0);
}

// SmolLM3Config: no_rope_layers / no_rope_layer_interval, and the sliding
// windows of use_sliding_window.
Status hf_smollm3(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  const size_t n = static_cast<size_t>(ctx.n_layer);
  std::vector<int32_t> rope(n);
  if (const HfConfigView::json* nr = cv.get("no_rope_layers")) {
    if (!nr->is_array() || nr->size() != n)
      return Status::errorf("{}: no_rope_layers must list {} values (1: the layer uses RoPE)", cv.name(), n);
    for (size_t i = 0; i < n; ++i) {
      const auto& e = (*nr)[i];
      if (!e.is_number_integer() || (e.get<int64_t>() != 0 && e.get<int64_t>() != 1))
        return Status::errorf("{}: no_rope_layers[{}] must be 0 or 1", cv.name(), i);
      rope[i] = static_cast<int32_t>(e.get<int64_t>());
    }
  } else {
    int64_t interval = 0;
    EMBER_RETURN_IF_ERROR(cv.get_count("no_rope_layer_interval", &interval, 4));
    for (size_t i = 0; i < n; ++i) rope[i] = (static_cast<int64_t>(i) + 1) % interval != 0;
  }
  meta->set(kRopeLayersKey, Metadata::make_int_array(rope, GgufType::kBool));

  const HfConfigView::json* use = cv.get("use_sliding_window");
  if (use && !use->is_boolean()) return Status::errorf("{}: use_sliding_window must be a boolean", cv.name());
  if (!use || !use->get<bool>() || !cv.get("sliding_window")) return Status::ok();
  int64_t window = 0;
  EMBER_RETURN_IF_ERROR(cv.get_count("sliding_window", &window, std::nullopt));
  // layer_types, else SmolLM3Config's default: the NoPE layers slide.
  std::vector<int32_t> sliding(n);
  for (size_t i = 0; i < n; ++i) sliding[i] = !rope[i];
  return hf_set_sliding_windows(cv, "smollm3", window, std::move(sliding), meta);
}

}  // namespace

constinit const ArchSpec kSmolLM3Spec = {
    .name = "smollm3",
    .fill = fill_smollm3,
    .gguf_rope_type = "normal",  // llama.cpp's converter permutes Q/K (a LlamaModel)
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    // SmolLM3Config's defaults.
    .hf_defaults = {.hidden_size = 2048, .num_hidden_layers = 36, .num_attention_heads = 16, .intermediate_size = 11008,
                    .vocab_size = 128256, .num_key_value_heads = 4, .max_position_embeddings = 32768,
                    .rope_theta = 2000000.0, .tie_word_embeddings = true},
    .hf_config = hf_smollm3,
    .hf_norm_plus_one = false,
    .hf_permute_qk = true,
    .chat_template = "chatml",
    .gen = {.n_vocab = 128256, .n_ctx = 65536, .rope_base = 5000000, .norm_eps = 1e-6, .tied_embeddings = true},
};

}  // namespace ember
