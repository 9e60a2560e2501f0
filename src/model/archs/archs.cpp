// The architecture registry and the helpers specs share; see archs.h.
#include "model/archs/archs.h"

#include <cmath>

namespace ember {
namespace {

constexpr const ArchSpec* kSpecs[] = {&kLlamaSpec,    &kQwen2Spec,    &kQwen3Spec,    &kGemma3Spec,
                                      &kQwen2MoeSpec, &kQwen3MoeSpec, &kOlmoeSpec,    &kPhi3Spec,
                                      &kMistral3Spec, &kSmolLM3Spec,  &kOlmo2Spec,    &kGptOssSpec};

}  // namespace

std::span<const ArchSpec* const> arch_specs() { return kSpecs; }

const ArchSpec* find_arch(std::string_view name) {
  for (const ArchSpec* s : kSpecs)
    if (name == s->name) return s;
  return nullptr;
}

const ArchSpec* find_arch_by_hf_class(std::string_view name) {
  for (const ArchSpec* s : kSpecs)
    for (const char* c : s->hf_classes)
      if (name == c) return s;
  return nullptr;
}

const ArchSpec* find_arch_by_hf_model_type(std::string_view name) {
  for (const ArchSpec* s : kSpecs)
    for (const char* c : s->hf_model_types)
      if (name == c) return s;
  return nullptr;
}

std::string arch_names(std::string_view sep) {
  std::string out;
  for (const ArchSpec* s : kSpecs) {
    if (!out.empty()) out += sep;
    out += s->name;
  }
  return out;
}

Status unsupported_arch_error(std::string_view name) {
  return Status::errorf("unsupported architecture '{}' (supported: {})", name, arch_names());
}

const TensorSpec* ArchSpec::find(TensorRole role) const {
  for (std::span<const TensorSpec> list : {model_tensors, block_tensors})
    for (const TensorSpec& t : list)
      if (t.role == role) return &t;
  return nullptr;
}

bool ArchSpec::has_experts() const {
  for (const TensorSpec& t : block_tensors)
    if (t.gen == GenWhen::kExperts) return true;
  return false;
}

RopeStyle rope_style_from_metadata(const Metadata& meta, const std::string& arch, RopeStyle fallback) {
  const std::string* s = meta.get_string(arch + ".rope.type");
  if (!s) return fallback;
  if (*s == "neox") return RopeStyle::kNeox;
  if (*s == "normal" || *s == "norm") return RopeStyle::kNormal;
  return fallback;
}

Status fill_silu_decoder(const Metadata& meta, ModelConfig* cfg, RopeStyle fallback) {
  cfg->rope_style = rope_style_from_metadata(meta, cfg->arch, fallback);
  cfg->activation = Activation::kSilu;
  return fill_default_rope(meta, cfg);
}

Status fill_default_rope(const Metadata& meta, ModelConfig* cfg) {
  const std::string& a = cfg->arch;
  const float base = static_cast<float>(meta.get_float(a + ".rope.freq_base").value_or(10000.0));
  if (!(base > 0) || !std::isfinite(base)) return Status::errorf("metadata key '{}.rope.freq_base' is invalid", a);
  // A positive finite float key, or `def` when absent.
  auto positive = [&](const std::string& key, double def, double* out) -> Status {
    *out = def;
    if (!meta.find(key)) return Status::ok();
    auto v = meta.get_float(key);
    if (!v || !(*v > 0) || !std::isfinite(*v)) return Status::errorf("metadata key '{}' is invalid", key);
    *out = *v;
    return Status::ok();
  };
  float freq_scale = 1.0f, ext_factor = 0.0f;
  double attn_factor = 1.0;
  EMBER_RETURN_IF_ERROR(positive(a + ".rope.scaling.attn_factor", 1.0, &attn_factor));
  const std::string* type = meta.get_string(a + ".rope.scaling.type");
  if (type && *type == "linear") {
    auto f = meta.get_float(a + ".rope.scaling.factor");
    if (f && *f > 0) freq_scale = static_cast<float>(1.0 / *f);
  } else if (type && *type == "yarn") {
    // YaRN as llama.cpp runs it: frequencies interpolated by 1 / factor and
    // blended back to the unscaled ones by a ramp over the dimensions
    // (ModelConfig::yarn_beta_*), cos and sin times the magnitude
    // 0.1 ln(factor) + 1 (with yarn_log_multiplier m: its ratio to the same
    // with factor m, 1 for Ministral 3), or yarn_attn_factor when given.
    double factor = 0, ext = 1, beta_fast = 32, beta_slow = 1, log_mul = 0, yarn_attn = 0;
    EMBER_RETURN_IF_ERROR(positive(a + ".rope.scaling.factor", 0, &factor));
    if (factor == 0) return Status::errorf("yarn RoPE scaling needs '{}.rope.scaling.factor'", a);
    EMBER_RETURN_IF_ERROR(positive(a + ".rope.scaling.yarn_beta_fast", 32, &beta_fast));
    EMBER_RETURN_IF_ERROR(positive(a + ".rope.scaling.yarn_beta_slow", 1, &beta_slow));
    if (meta.find(a + ".rope.scaling.yarn_ext_factor")) {
      auto e = meta.get_float(a + ".rope.scaling.yarn_ext_factor");
      if (!e || !(*e >= 0 && *e <= 1))
        return Status::errorf("metadata key '{}.rope.scaling.yarn_ext_factor' is invalid", a);
      ext = *e;
    }
    EMBER_RETURN_IF_ERROR(positive(a + ".rope.scaling.yarn_log_multiplier", 0, &log_mul));
    EMBER_RETURN_IF_ERROR(positive(a + ".rope.scaling.yarn_attn_factor", 0, &yarn_attn));
    auto mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    const double magnitude = yarn_attn > 0 ? yarn_attn : log_mul > 0 ? mscale(1) / mscale(log_mul) : mscale(1);
    attn_factor *= ext > 0 ? magnitude : 1.0;
    freq_scale = static_cast<float>(1.0 / factor);
    ext_factor = static_cast<float>(ext);
    if (meta.find(a + ".rope.scaling.yarn_truncate")) {
      auto t = meta.get_bool(a + ".rope.scaling.yarn_truncate");
      if (!t) return Status::errorf("metadata key '{}.rope.scaling.yarn_truncate' must be a boolean", a);
      cfg->yarn_truncate = *t;
    }
    cfg->yarn_beta_fast = static_cast<float>(beta_fast);
    cfg->yarn_beta_slow = static_cast<float>(beta_slow);
    if (cfg->rope_orig_ctx <= 0) cfg->rope_orig_ctx = cfg->n_ctx_train;  // llama.cpp's fallback
  } else if (type && *type == "longrope") {
    cfg->rope_longrope = true;  // the factors are tensors (Model picks short or long)
  } else if (!type) {
    // Older files only carry the factor (implicitly linear).
    auto f = meta.get_float(a + ".rope.scale_linear");
    if (f && *f > 0) freq_scale = static_cast<float>(1.0 / *f);
  }
  cfg->layers.assign(cfg->n_layer, LayerConfig{});
  for (LayerConfig& l : cfg->layers) {
    l.rope_base = base;
    l.rope_freq_scale = freq_scale;
    l.rope_ext_factor = ext_factor;
    l.rope_attn_factor = static_cast<float>(attn_factor);
    l.use_rope_freq_factors = true;  // only takes effect if a factor tensor exists
  }
  return Status::ok();
}

Status fill_sliding_windows(const Metadata& meta, ModelConfig* cfg, int default_period) {
  const std::string& a = cfg->arch;
  const std::string wkey = a + ".attention.sliding_window", pkey = a + ".attention.sliding_window_pattern";
  std::vector<bool> swa(cfg->n_layer, false);
  int64_t window = 0;
  if (meta.find(wkey)) {
    auto w = meta.get_int(wkey);
    if (!w || *w < 0 || *w > INT32_MAX) return Status::errorf("metadata key '{}' is invalid", wkey);
    window = *w;
  }
  if (window == 0) return Status::ok();
  const GgufValue* p = meta.find(pkey);
  if (p && p->type == GgufType::kArray) {
    if (!gguf_type_is_int(p->elem_type) || p->ints.size() != static_cast<size_t>(cfg->n_layer))
      return Status::errorf("metadata key '{}' must list one boolean per layer ({})", pkey, cfg->n_layer);
    for (int il = 0; il < cfg->n_layer; ++il) swa[il] = p->ints[il] != 0;
  } else {
    int64_t period = default_period;
    if (p) {
      auto v = meta.get_int(pkey);
      if (!v || *v < 0 || *v > INT32_MAX) return Status::errorf("metadata key '{}' is invalid", pkey);
      period = *v;
    }
    // Every period-th layer (1-based) attends globally; 0: none does.
    for (int il = 0; il < cfg->n_layer; ++il) swa[il] = period <= 0 || (il + 1) % period != 0;
  }
  if (static_cast<int>(cfg->layers.size()) != cfg->n_layer) cfg->layers.resize(cfg->n_layer);
  for (int il = 0; il < cfg->n_layer; ++il)
    if (swa[il]) cfg->layers[il].sliding_window = static_cast<int>(window);
  return Status::ok();
}

}  // namespace ember
