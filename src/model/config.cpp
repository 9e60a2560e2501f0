// Hyper-parameters from metadata; see config.h.
#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "model/archs/archs.h"

namespace ember {

namespace {

constexpr ArchFiller kArchs[] = {
    {"llama", fill_llama},
    {"qwen2", fill_qwen2},
    {"qwen3", fill_qwen3},
    {"gemma3", fill_gemma3},
};

Status read_positive(const Metadata& meta, const std::string& key, int* out) {
  auto v = meta.get_int(key);
  if (!v) return Status::errorf("missing or non-integer metadata key '{}'", key);
  if (*v <= 0 || *v > (1 << 30)) return Status::errorf("metadata key '{}' has invalid value {}", key, *v);
  *out = static_cast<int>(*v);
  return Status::ok();
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> v;
  for (const ArchFiller& a : kArchs) v.emplace_back(a.name);
  return v;
}

RopeStyle rope_style_from_metadata(const Metadata& meta, const std::string& arch, RopeStyle fallback) {
  const std::string* s = meta.get_string(arch + ".rope.type");
  if (!s) return fallback;
  if (*s == "neox") return RopeStyle::kNeox;
  if (*s == "normal" || *s == "norm") return RopeStyle::kNormal;
  return fallback;
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

Result<ModelConfig> config_from_metadata(const Metadata& meta) {
  ModelConfig cfg;
  const std::string* arch = meta.get_string("general.architecture");
  if (!arch) return Status::error("missing metadata key 'general.architecture'");
  cfg.arch = *arch;
  const ArchFiller* filler = nullptr;
  for (const ArchFiller& f : kArchs)
    if (cfg.arch == f.name) filler = &f;
  if (!filler) {
    std::string names;
    for (const ArchFiller& f : kArchs) names += std::string(names.empty() ? "" : ", ") + f.name;
    return Status::errorf("unsupported architecture '{}' (supported: {})", cfg.arch, names);
  }
  if (const std::string* n = meta.get_string("general.name")) cfg.name = *n;

  const std::string& a = cfg.arch;
  EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".block_count", &cfg.n_layer));
  EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".embedding_length", &cfg.n_embd));
  EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".feed_forward_length", &cfg.n_ff));
  EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".attention.head_count", &cfg.n_head));
  cfg.n_head_kv = cfg.n_head;
  if (meta.find(a + ".attention.head_count_kv"))
    EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".attention.head_count_kv", &cfg.n_head_kv));
  if (cfg.n_head % cfg.n_head_kv != 0)
    return Status::errorf("head_count {} is not a multiple of head_count_kv {}", cfg.n_head, cfg.n_head_kv);
  cfg.head_dim = cfg.n_embd / cfg.n_head;
  if (meta.find(a + ".attention.key_length"))
    EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".attention.key_length", &cfg.head_dim));
  cfg.head_dim_v = cfg.head_dim;
  if (meta.find(a + ".attention.value_length"))
    EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".attention.value_length", &cfg.head_dim_v));
  if (cfg.head_dim % 2 != 0) return Status::errorf("head dimension {} is odd", cfg.head_dim);
  cfg.n_ctx_train = static_cast<int>(meta.get_int(a + ".context_length").value_or(4096));
  if (cfg.n_ctx_train <= 0) cfg.n_ctx_train = 4096;
  cfg.norm_eps = static_cast<float>(meta.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  cfg.n_rot = cfg.head_dim;
  if (auto r = meta.get_int(a + ".rope.dimension_count")) {
    if (*r <= 0 || *r > cfg.head_dim || *r % 2) return Status::errorf("invalid {}.rope.dimension_count {}", a, *r);
    cfg.n_rot = static_cast<int>(*r);
  }
  if (auto v = meta.get_float(a + ".attn_logit_softcapping")) cfg.attn_logit_softcap = static_cast<float>(*v);
  if (auto v = meta.get_float(a + ".final_logit_softcapping")) cfg.final_logit_softcap = static_cast<float>(*v);
  if (const GgufValue* tokens = meta.find("tokenizer.ggml.tokens")) cfg.n_vocab = static_cast<int>(tokens->count);
  if (auto v = meta.get_int(a + ".vocab_size")) cfg.n_vocab = static_cast<int>(*v);

  EMBER_RETURN_IF_ERROR(filler->fill(meta, &cfg));
  if (static_cast<int>(cfg.layers.size()) != cfg.n_layer) cfg.layers.resize(cfg.n_layer);
  for (LayerConfig& l : cfg.layers) {
    if (l.n_head == 0) l.n_head = cfg.n_head;
    if (l.n_head_kv == 0) l.n_head_kv = cfg.n_head_kv;
    if (l.n_ff == 0) l.n_ff = cfg.n_ff;
  }
  return cfg;
}

int ModelConfig::max_n_head() const {
  int m = n_head;
  for (const LayerConfig& l : layers) m = std::max(m, l.n_head);
  return m;
}

int ModelConfig::max_n_head_kv() const {
  int m = n_head_kv;
  for (const LayerConfig& l : layers) m = std::max(m, l.n_head_kv);
  return m;
}

int ModelConfig::max_n_ff() const {
  int m = n_ff;
  for (const LayerConfig& l : layers) m = std::max(m, l.n_ff);
  return m;
}

}  // namespace ember
