// gemma3: Gemma 3 text models. Interleaved sliding-window / global attention
// (every 6th layer global), QK-norm, pre and post norms around attention and
// FFN, GELU-tanh gated FFN, embeddings scaled by sqrt(n_embd), tied output,
// RoPE base 10k on local layers and <arch>.rope.freq_base (+ scaling) on
// global ones, NeoX RoPE. Hugging Face names differ from Llama's: its
// post_attention_layernorm is the norm *after* attention (GGUF
// post_attention_norm), the FFN's pre-norm is pre_feedforward_layernorm; norms
// are applied as (1 + w).
#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"

namespace ember {
namespace {

using namespace archs;

// Gemma's norms around attention and FFN, with their Hugging Face names.
constexpr std::array<TensorSpec, 2> kPreFfnNorms = {{
    {R::kPostAttnNorm, P::kRequired, G::kAlways, "post_attention_layernorm.weight"},
    {R::kFfnNorm, P::kRequired, G::kAlways, "pre_feedforward_layernorm.weight"},
}};
constexpr std::array<TensorSpec, 1> kPostFfnNorm = {{
    {R::kPostFfnNorm, P::kRequired, G::kAlways, "post_feedforward_layernorm.weight"},
}};
constexpr auto kBlockTensors =
    tensor_list(kAttentionTensors, kQkNormTensors, kPreFfnNorms, kDenseFfnTensors, kPostFfnNorm);
constexpr const char* kHfClasses[] = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"};
constexpr const char* kHfModelTypes[] = {"gemma3", "gemma3_text"};

Status fill_gemma3(const Metadata& meta, ModelConfig* cfg) {
  cfg->rope_style = RopeStyle::kNeox;
  cfg->activation = Activation::kGeluTanh;
  cfg->embd_scale = std::sqrt(static_cast<float>(cfg->n_embd));
  // Q is scaled by 1/sqrt(query_pre_attn_scalar), which is head_dim for all
  // released sizes except 27B (n_embd / n_head).
  float qpas = static_cast<float>(cfg->head_dim);
  if (auto v = meta.get_float("gemma3.attention.query_pre_attn_scalar")) qpas = static_cast<float>(*v);
  else if (cfg->n_layer == 62) qpas = static_cast<float>(cfg->n_embd / cfg->n_head);  // 27B
  cfg->attn_scale = 1.0f / std::sqrt(qpas);

  EMBER_RETURN_IF_ERROR(fill_default_rope(meta, cfg));
  const int window = static_cast<int>(meta.get_int("gemma3.attention.sliding_window").value_or(0));
  // The pattern: every N-th layer global, or (as llama.cpp also reads it, and
  // `ember prune` writes it after removing layers) one flag per layer, true
  // for a sliding-window layer.
  const GgufValue* pv = meta.find("gemma3.attention.sliding_window_pattern");
  const bool per_layer = pv && pv->type == GgufType::kArray;
  if (per_layer && (!(gguf_type_is_int(pv->elem_type) || pv->elem_type == GgufType::kBool) ||
                    pv->ints.size() != static_cast<size_t>(cfg->n_layer)))
    return Status::errorf("metadata key 'gemma3.attention.sliding_window_pattern' must be an integer or {} flags",
                          cfg->n_layer);
  const int pattern =
      per_layer ? 0 : static_cast<int>(meta.get_int("gemma3.attention.sliding_window_pattern").value_or(6));
  const float local_base = static_cast<float>(meta.get_float("gemma3.rope.local_freq_base").value_or(10000.0));
  for (int il = 0; il < cfg->n_layer; ++il) {
    const bool global = per_layer ? pv->ints[il] == 0 : pattern <= 0 || (il + 1) % pattern == 0;
    if (!global && window > 0) {
      LayerConfig& l = cfg->layers[il];
      l.sliding_window = window;
      l.rope_base = local_base;
      l.rope_freq_scale = 1.0f;
    }
  }
  return Status::ok();
}

// Gemma 3 attends globally on every `pattern`-th layer (1-based) and with a
// sliding window elsewhere. Returns the pattern implied by layer_types, or
// the sliding_window_pattern field (default 6).
Status hf_pattern(const HfConfigView& cv, int64_t n_layer, int64_t* pattern) {
  int64_t p = 6;
  const HfConfigView::json* sp = cv.get("sliding_window_pattern");
  if (!sp) sp = cv.get("_sliding_window_pattern");
  if (sp) {
    if (!sp->is_number_integer() || sp->get<int64_t>() <= 0)
      return Status::errorf("{}: sliding_window_pattern must be a positive integer", cv.name());
    p = sp->get<int64_t>();
  }
  const HfConfigView::json* lt = cv.get("layer_types");
  if (lt) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != n_layer)
      return Status::errorf("{}: layer_types must list {} layer types", cv.name(), n_layer);
    for (int64_t i = 0; i < n_layer; ++i) {
      const auto& e = (*lt)[static_cast<size_t>(i)];
      if (e.is_string() && e.get<std::string>() == "full_attention") {
        p = i + 1;
        break;
      }
    }
    for (int64_t i = 0; i < n_layer; ++i) {
      const auto& e = (*lt)[static_cast<size_t>(i)];
      const bool full = (i + 1) % p == 0;
      if (!e.is_string() || e.get<std::string>() != (full ? "full_attention" : "sliding_attention"))
        return Status::errorf("{}: layer_types does not follow a fixed sliding-window pattern (layer {})", cv.name(), i);
    }
  }
  *pattern = p;
  return Status::ok();
}

// Gemma3TextConfig's keys: sliding window and its pattern, the query scale,
// the local RoPE base and the soft-capping values when set.
Status hf_gemma3(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  int64_t window = 0, pattern = 0;
  double qpas = 0;
  EMBER_RETURN_IF_ERROR(cv.get_count("sliding_window", &window, 4096));
  EMBER_RETURN_IF_ERROR(cv.get_float("query_pre_attn_scalar", &qpas, 256.0));
  if (!(qpas > 0)) return Status::errorf("{}: query_pre_attn_scalar must be positive", cv.name());
  EMBER_RETURN_IF_ERROR(hf_pattern(cv, ctx.n_layer, &pattern));
  meta->set("gemma3.attention.sliding_window", hf_u32(window));
  meta->set("gemma3.attention.sliding_window_pattern", hf_u32(pattern));
  // An integer in released configs (uint32 then), a float otherwise.
  const bool integral = qpas == std::floor(qpas) && qpas <= INT32_MAX;
  meta->set("gemma3.attention.query_pre_attn_scalar", integral ? hf_u32(static_cast<int64_t>(qpas)) : hf_f32(qpas));
  meta->set("gemma3.rope.local_freq_base", hf_f32(ctx.local_rope_theta));
  double cap = 0;
  if (cv.get("attn_logit_softcapping")) {
    EMBER_RETURN_IF_ERROR(cv.get_float("attn_logit_softcapping", &cap, std::nullopt));
    meta->set("gemma3.attn_logit_softcapping", hf_f32(cap));
  }
  if (cv.get("final_logit_softcapping")) {
    EMBER_RETURN_IF_ERROR(cv.get_float("final_logit_softcapping", &cap, std::nullopt));
    meta->set("gemma3.final_logit_softcapping", hf_f32(cap));
  }
  return Status::ok();
}

}  // namespace

constinit const ArchSpec kGemma3Spec = {
    .name = "gemma3",
    .fill = fill_gemma3,
    .gguf_rope_type = "neox",
    .model_tensors = kDecoderModelTensors,
    .block_tensors = kBlockTensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    // Gemma3TextConfig's defaults (multimodal configs omit keys that have them).
    .hf_defaults = {.hidden_size = 2304, .num_hidden_layers = 26, .num_attention_heads = 8,
                    .intermediate_size = 9216, .vocab_size = 262208, .num_key_value_heads = 4,
                    .max_position_embeddings = 131072, .head_dim = 256, .rope_theta = 1e6,
                    .tie_word_embeddings = true},
    .hf_config = hf_gemma3,
    .hf_norm_plus_one = true,
    .hf_permute_qk = false,
    .chat_template = "gemma",
    .gen = {.n_vocab = 262144, .n_ctx = 32768, .rope_base = 1000000, .norm_eps = 1e-6, .tied_embeddings = true,
            .sliding_window = 512, .copy_default_vocab = true},  // Gemma 3 270M
};

}  // namespace ember
