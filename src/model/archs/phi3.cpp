// phi3: Phi-3, Phi-3.5 and Phi-4-mini. Pre-norm blocks whose Q, K and V
// rows are one matrix (attn_qkv = Q|K|V; HF qkv_proj) and whose FFN gate and
// up rows are one matrix (ffn_up = gate|up, 2 * n_ff rows; HF gate_up_proj),
// SwiGLU, NeoX RoPE over rope.dimension_count dimensions (Phi-4-mini: 3/4 of
// the head). LongRoPE (128k models): per-dimension frequency divisors
// rope_factors_short / rope_factors_long, the long set when the context the
// model runs with exceeds rope.scaling.original_context_length (Model::
// set_context_length), cos and sin times rope.scaling.attn_factor
// (sqrt(1 + ln(n_ctx_train / original) / ln(original)) unless the config
// gives attention_factor). A sliding window, when the config has one,
// applies to every layer (transformers' Phi3Model; llama.cpp ignores it).
#include <cmath>

#include <nlohmann/json.hpp>

#include "model/archs/archs.h"
#include "model/archs/tensor_lists.h"
#include "model/io/hf_config.h"

namespace ember {
namespace {

using namespace archs;

constexpr TensorRole kQkvParts[] = {R::kAttnQ, R::kAttnK, R::kAttnV};
constexpr TensorRole kGateUpParts[] = {R::kFfnGate, R::kFfnUp};
constexpr std::array<TensorSpec, 6> kPhi3Tensors = {{
    {R::kAttnNorm, P::kRequired, G::kAlways},
    {R::kAttnQkv, P::kRequired, G::kAlways, nullptr, nullptr, kQkvParts},
    {R::kAttnOutput, P::kRequired, G::kAlways},
    {R::kFfnNorm, P::kRequired, G::kAlways},
    {R::kFfnUp, P::kRequired, G::kAlways, "mlp.gate_up_proj.weight", nullptr, kGateUpParts},
    {R::kFfnDown, P::kRequired, G::kAlways},
}};
constexpr const char* kHfClasses[] = {"Phi3ForCausalLM"};
constexpr const char* kHfModelTypes[] = {"phi3"};

Status fill_phi3(const Metadata& meta, ModelConfig* cfg) {
  EMBER_RETURN_IF_ERROR(fill_silu_decoder(meta, cfg, RopeStyle::kNeox));
  // llama.cpp's converter marks LongRoPE by the magnitude key it writes with the factors.
  if (meta.find("phi3.rope.scaling.attn_factor")) cfg->rope_longrope = true;
  return fill_sliding_windows(meta, cfg, 0);
}

// Phi3Config: LongRoPE's factor lists (rope_parameters or the legacy
// rope_scaling, type longrope / su) and magnitude, the sliding window.
Status hf_phi3(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta) {
  const HfConfigView::json* rp = cv.get("rope_parameters");
  if (!rp) rp = cv.get("rope_scaling");
  const auto field = [&](const char* k) -> const HfConfigView::json* {
    if (!rp || !rp->is_object()) return nullptr;
    auto it = rp->find(k);
    return it == rp->end() || it->is_null() ? nullptr : &*it;
  };
  const HfConfigView::json* type = field("rope_type");
  if (!type) type = field("type");
  if (type && type->is_string() && (type->get<std::string>() == "longrope" || type->get<std::string>() == "su")) {
    const int64_t n_rot = meta->get_int("phi3.rope.dimension_count").value_or(ctx.head_dim);
    for (const char* key : {"long_factor", "short_factor"}) {
      const HfConfigView::json* f = field(key);
      if (!f) return Status::errorf("{}: longrope scaling needs rope_scaling.{}", cv.name(), key);
      if (!f->is_array() || static_cast<int64_t>(f->size()) != n_rot / 2)
        return Status::errorf("{}: rope_scaling.{} must list {} numbers (half the rotated dimensions)", cv.name(), key,
                              n_rot / 2);
      std::vector<float> v;
      for (const auto& x : *f) {
        if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
          return Status::errorf("{}: rope_scaling.{} must hold positive numbers", cv.name(), key);
        v.push_back(static_cast<float>(x.get<double>()));
      }
      (*ctx.f32_tensors)[key == std::string("long_factor") ? "rope_factors_long.weight" : "rope_factors_short.weight"] =
          std::move(v);
    }
    const double orig = static_cast<double>(meta->get_int("phi3.rope.scaling.original_context_length").value_or(0));
    if (!(orig > 1)) return Status::errorf("{}: longrope scaling needs original_max_position_embeddings", cv.name());
    double factor = 0, attn = 0;
    EMBER_RETURN_IF_ERROR(cv.number_of(field("factor"), "rope scaling factor", &factor, 0.0));
    if (!(factor > 0)) factor = static_cast<double>(ctx.n_ctx) / orig;
    EMBER_RETURN_IF_ERROR(cv.number_of(field("attention_factor"), "attention_factor", &attn, 0.0));
    if (!(attn > 0)) attn = factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(orig));
    meta->set("phi3.rope.scaling.type", Metadata::make_string("longrope"));
    meta->set("phi3.rope.scaling.attn_factor", hf_f32(attn));
  }
  if (cv.get("sliding_window")) {
    int64_t window = 0;
    EMBER_RETURN_IF_ERROR(cv.get_count("sliding_window", &window, std::nullopt));
    meta->set("phi3.attention.sliding_window", hf_u32(window));
  }
  return Status::ok();
}

}  // namespace

constinit const ArchSpec kPhi3Spec = {
    .name = "phi3",
    .fill = fill_phi3,
    .gguf_rope_type = "neox",
    .model_tensors = kLongRopeModelTensors,
    .block_tensors = kPhi3Tensors,
    .hf_classes = kHfClasses,
    .hf_model_types = kHfModelTypes,
    // Phi3Config's defaults.
    .hf_defaults = {.hidden_size = 3072, .num_hidden_layers = 32, .num_attention_heads = 32, .intermediate_size = 8192,
                    .vocab_size = 32064, .max_position_embeddings = 4096, .rope_theta = 10000.0},
    .hf_config = hf_phi3,
    .hf_norm_plus_one = false,
    .hf_permute_qk = false,
    .chat_template = "chatml",
    .gen = {.n_vocab = 200064, .n_ctx = 131072, .rope_base = 10000, .norm_eps = 1e-5, .tied_embeddings = true,
            .vocab = SyntheticVocab::kPhi3},  // Phi-4-mini
};

}  // namespace ember
