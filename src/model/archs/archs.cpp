// The architecture registry and the helpers specs share; see archs.h.
#include "model/archs/archs.h"

#include <cmath>

namespace ember {
namespace {

constexpr const ArchSpec* kSpecs[] = {&kLlamaSpec, &kQwen2Spec,    &kQwen3Spec, &kGemma3Spec,
                                      &kQwen2MoeSpec, &kQwen3MoeSpec, &kOlmoeSpec};

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
  float freq_scale = 1.0f;
  const std::string* type = meta.get_string(a + ".rope.scaling.type");
  if (type && *type == "linear") {
    auto f = meta.get_float(a + ".rope.scaling.factor");
    if (f && *f > 0) freq_scale = static_cast<float>(1.0 / *f);
  } else if (!type) {
    // Older files only carry the factor (implicitly linear).
    auto f = meta.get_float(a + ".rope.scale_linear");
    if (f && *f > 0) freq_scale = static_cast<float>(1.0 / *f);
  }
  cfg->layers.assign(cfg->n_layer, LayerConfig{});
  for (LayerConfig& l : cfg->layers) {
    l.rope_base = base;
    l.rope_freq_scale = freq_scale;
    l.use_rope_freq_factors = true;  // only takes effect if rope_freqs.weight exists
  }
  return Status::ok();
}

}  // namespace ember
