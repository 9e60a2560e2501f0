// Translation of Hugging Face config.json files and tensor names into the
// GGUF vocabulary; see hf_config.h. What differs between architectures (HF
// class names, defaults for keys a config may omit, extra keys, tensor
// names) comes from their ArchSpecs (model/archs), which follow the
// transformers config classes (LlamaConfig, Qwen2Config, Qwen3Config,
// Gemma3TextConfig).
#include "model/io/hf_config.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/archs/archs.h"

namespace ember {

using json = nlohmann::json;

HfConfigView::HfConfigView(const json& root, const std::string& name) : root_(root), name_(name) {
  auto tc = root.find("text_config");
  if (tc != root.end() && tc->is_object()) text_ = &*tc;
}

const json* HfConfigView::get(const char* key) const {
  if (text_) {
    auto it = text_->find(key);
    if (it != text_->end() && !it->is_null()) return &*it;
  }
  auto it = root_.find(key);
  if (it != root_.end() && !it->is_null()) return &*it;
  return nullptr;
}

Status HfConfigView::get_int(const char* key, int64_t* out, std::optional<int64_t> def) const {
  const json* j = get(key);
  if (!j) {
    if (!def) return Status::errorf("{}: missing '{}'", name_, key);
    *out = *def;
    return Status::ok();
  }
  if (j->is_number_integer()) {
    *out = j->get<int64_t>();
    if (j->is_number_unsigned() && j->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return Status::errorf("{}: '{}' is out of range", name_, key);
  } else if (j->is_number_float() && std::isfinite(j->get<double>()) && j->get<double>() == std::floor(j->get<double>()) &&
             std::fabs(j->get<double>()) < 9e15) {
    *out = static_cast<int64_t>(j->get<double>());
  } else {
    return Status::errorf("{}: '{}' must be an integer", name_, key);
  }
  return Status::ok();
}

Status HfConfigView::get_count(const char* key, int64_t* out, std::optional<int64_t> def) const {
  EMBER_RETURN_IF_ERROR(get_int(key, out, def));
  if (*out <= 0 || *out > INT32_MAX) return Status::errorf("{}: '{}' = {} is out of range", name_, key, *out);
  return Status::ok();
}

Status HfConfigView::get_float(const char* key, double* out, std::optional<double> def) const {
  return number_of(get(key), key, out, def);
}

Status HfConfigView::number_of(const json* j, const char* key, double* out, std::optional<double> def) const {
  if (!j) {
    if (!def) return Status::errorf("{}: missing '{}'", name_, key);
    *out = *def;
    return Status::ok();
  }
  if (!j->is_number() || !std::isfinite(j->get<double>()))
    return Status::errorf("{}: '{}' must be a finite number", name_, key);
  *out = j->get<double>();
  return Status::ok();
}

Status hf_set_sliding_windows(const HfConfigView& cv, const std::string& arch, int64_t window,
                              std::vector<int32_t> sliding, Metadata* meta) {
  if (const json* lt = cv.get("layer_types")) {
    if (!lt->is_array() || lt->size() != sliding.size())
      return Status::errorf("{}: layer_types must list {} layer types", cv.name(), sliding.size());
    for (size_t i = 0; i < sliding.size(); ++i) {
      const json& e = (*lt)[i];
      if (!e.is_string() || (e != "sliding_attention" && e != "full_attention"))
        return Status::errorf("{}: layer_types[{}] must be sliding_attention or full_attention", cv.name(), i);
      sliding[i] = e == "sliding_attention";
    }
  }
  meta->set(arch + ".attention.sliding_window", hf_u32(window));
  meta->set(arch + ".attention.sliding_window_pattern", Metadata::make_int_array(sliding, GgufType::kBool));
  return Status::ok();
}

GgufValue hf_u32(int64_t v) { return Metadata::make_int(v, GgufType::kUint32); }
GgufValue hf_f32(double v) { return Metadata::make_float(v, GgufType::kFloat32); }

namespace {

struct RopeScaling {
  std::string type;  // "" (none), "linear", "llama3", "yarn", "longrope" (the architecture's reader handles it)
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_context = 0;
  // yarn, as transformers' _compute_yarn_parameters reads them (0: absent).
  double beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0, attention_factor = 0;
  bool truncate = true;  // the ramp's bounds floored / ceiled (gpt-oss: false)
};

// Reads one rope scaling object (legacy rope_scaling, or an entry of
// rope_parameters; both use rope_type, older files use type).
Status read_rope_scaling(const HfConfigView& cv, const json* s, RopeScaling* out) {
  *out = RopeScaling{};
  if (!s) return Status::ok();
  if (!s->is_object()) return Status::errorf("{}: rope scaling must be an object", cv.name());
  const json* type = nullptr;
  if (auto it = s->find("rope_type"); it != s->end()) type = &*it;
  else if (auto it2 = s->find("type"); it2 != s->end()) type = &*it2;
  if (!type || type->is_null()) return Status::ok();
  if (!type->is_string()) return Status::errorf("{}: rope_type must be a string", cv.name());
  const std::string t = type->get<std::string>();
  if (t == "default") return Status::ok();
  auto field = [&](const char* k) -> const json* {
    auto it = s->find(k);
    return it == s->end() || it->is_null() ? nullptr : &*it;
  };
  if (t == "longrope" || t == "su") {  // per-dimension factors: the architecture's reader (Phi-3)
    out->type = "longrope";
    auto it = s->find("original_max_position_embeddings");
    return cv.number_of(it == s->end() || it->is_null() ? nullptr : &*it, "original_max_position_embeddings",
                        &out->original_context, 0.0);
  }
  if (t != "linear" && t != "llama3" && t != "yarn")
    return Status::errorf("{}: unsupported rope scaling type '{}' (supported: linear, llama3, yarn, longrope)",
                          cv.name(), t);
  out->type = t;
  EMBER_RETURN_IF_ERROR(cv.number_of(field("factor"), "rope scaling factor", &out->factor, std::nullopt));
  if (!(out->factor > 0)) return Status::errorf("{}: rope scaling factor must be positive", cv.name());
  if (t == "llama3") {
    EMBER_RETURN_IF_ERROR(cv.number_of(field("low_freq_factor"), "low_freq_factor", &out->low_freq_factor, 1.0));
    EMBER_RETURN_IF_ERROR(cv.number_of(field("high_freq_factor"), "high_freq_factor", &out->high_freq_factor, 4.0));
    EMBER_RETURN_IF_ERROR(cv.number_of(field("original_max_position_embeddings"), "original_max_position_embeddings",
                                       &out->original_context, 8192.0));
    if (!(out->high_freq_factor > out->low_freq_factor) || !(out->low_freq_factor > 0) ||
        !(out->original_context > 0))
      return Status::errorf("{}: invalid llama3 rope scaling parameters", cv.name());
  } else if (t == "yarn") {
    EMBER_RETURN_IF_ERROR(cv.number_of(field("original_max_position_embeddings"), "original_max_position_embeddings",
                                       &out->original_context, 0.0));
    // transformers treats 0 like absent here (`get("beta_fast") or 32`).
    for (auto [key, dst, def] : {std::tuple{"beta_fast", &out->beta_fast, 32.0}, {"beta_slow", &out->beta_slow, 1.0},
                                 {"mscale", &out->mscale, 0.0}, {"mscale_all_dim", &out->mscale_all_dim, 0.0},
                                 {"attention_factor", &out->attention_factor, 0.0}}) {
      EMBER_RETURN_IF_ERROR(cv.number_of(field(key), key, dst, def));
      if (*dst < 0) return Status::errorf("{}: rope scaling '{}' must not be negative", cv.name(), key);
      if (*dst == 0 && def > 0) *dst = def;
    }
    if (const json* tr = field("truncate"); tr && !tr->is_null()) {
      if (!tr->is_boolean()) return Status::errorf("{}: yarn rope scaling 'truncate' must be a boolean", cv.name());
      out->truncate = tr->get<bool>();
    }
  }
  return Status::ok();
}

const json* object_field(const json* j, const char* key) {
  if (!j || !j->is_object()) return nullptr;
  auto it = j->find(key);
  return it == j->end() || it->is_null() ? nullptr : &*it;
}

// "LlamaForCausalLM, MistralForCausalLM, ..." over every spec.
std::string hf_class_names() {
  std::string out;
  for (const ArchSpec* s : arch_specs())
    for (const char* c : s->hf_classes) out += std::string(out.empty() ? "" : ", ") + c;
  return out;
}

// The default of a required-unless-defaulted count (0: required).
std::optional<int64_t> def_or_required(int64_t v) { return v > 0 ? std::optional<int64_t>(v) : std::nullopt; }

}  // namespace

std::vector<float> llama3_rope_freq_factors(int64_t head_dim, double theta, double factor, double low_freq_factor,
                                            double high_freq_factor, double original_context) {
  // For each rotary frequency: keep high frequencies, divide low ones by
  // `factor`, and blend in between (Llama 3.1's "llama3" rope_type).
  const double kPi = 3.14159265358979323846;
  const double low_wavelen = original_context / low_freq_factor;
  const double high_wavelen = original_context / high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    const double wavelen = 2 * kPi / freq;
    double div;
    if (wavelen < high_wavelen) {
      div = 1.0;
    } else if (wavelen > low_wavelen) {
      div = factor;
    } else {
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      div = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(div));
  }
  return out;
}

Status parse_hf_config_json(const std::string& text, const std::string& name, json* out) {
  try {
    *out = json::parse(text);
  } catch (const std::exception& e) {
    return Status::errorf("{}: invalid JSON: {}", name, e.what());
  }
  if (!out->is_object()) return Status::errorf("{}: not a JSON object", name);
  return Status::ok();
}

Result<HfModelInfo> hf_config_to_metadata(const std::string& text, const std::string& name, Metadata* meta) {
  json root;
  EMBER_RETURN_IF_ERROR(parse_hf_config_json(text, name, &root));
  const HfConfigView cv(root, name);
  HfModelInfo info;

  // Architecture: the first known entry of "architectures", else model_type.
  const ArchSpec* spec = nullptr;
  std::string hf_arch;
  if (auto it = root.find("architectures"); it != root.end() && it->is_array()) {
    for (const json& a : *it) {
      if (!a.is_string()) continue;
      if (!spec) {
        spec = find_arch_by_hf_class(a.get<std::string>());
        if (spec) hf_arch = a.get<std::string>();
      }
      if (hf_arch.empty()) hf_arch = a.get<std::string>();
    }
  }
  if (!spec) {
    const json* mt = nullptr;  // the top-level model_type, else text_config's
    if (auto it = root.find("model_type"); it != root.end() && it->is_string()) mt = &*it;
    if (!mt) mt = cv.get("model_type");
    if (mt && mt->is_string()) {
      spec = find_arch_by_hf_model_type(mt->get<std::string>());
      if (!spec && hf_arch.empty()) hf_arch = mt->get<std::string>();
    }
  }
  if (!spec)
    return Status::errorf("{}: unsupported architecture '{}' (supported: {})", name,
                          hf_arch.empty() ? "unknown" : hf_arch, hf_class_names());
  info.arch = spec->name;
  const std::string& a = info.arch;
  const HfConfigDefaults& d = spec->hf_defaults;

  // Core dimensions; keys the architecture's config class defaults may be omitted.
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_ff = 0, n_vocab = 0, n_head_kv = 0, n_ctx = 0, head_dim = 0;
  EMBER_RETURN_IF_ERROR(cv.get_count("hidden_size", &n_embd, def_or_required(d.hidden_size)));
  EMBER_RETURN_IF_ERROR(cv.get_count("num_hidden_layers", &n_layer, def_or_required(d.num_hidden_layers)));
  EMBER_RETURN_IF_ERROR(cv.get_count("num_attention_heads", &n_head, def_or_required(d.num_attention_heads)));
  EMBER_RETURN_IF_ERROR(cv.get_count("intermediate_size", &n_ff, def_or_required(d.intermediate_size)));
  EMBER_RETURN_IF_ERROR(cv.get_count("vocab_size", &n_vocab, def_or_required(d.vocab_size)));
  EMBER_RETURN_IF_ERROR(
      cv.get_count("num_key_value_heads", &n_head_kv, d.num_key_value_heads > 0 ? d.num_key_value_heads : n_head));
  EMBER_RETURN_IF_ERROR(cv.get_count("max_position_embeddings", &n_ctx, d.max_position_embeddings));
  if (d.head_dim > 0) {
    EMBER_RETURN_IF_ERROR(cv.get_count("head_dim", &head_dim, d.head_dim));
  } else {
    if (n_embd % n_head != 0 && !cv.get("head_dim"))
      return Status::errorf("{}: hidden_size {} is not a multiple of num_attention_heads {}", name, n_embd, n_head);
    EMBER_RETURN_IF_ERROR(cv.get_count("head_dim", &head_dim, n_embd / n_head));
  }
  if (n_head % n_head_kv != 0)
    return Status::errorf("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", name, n_head,
                          n_head_kv);
  if (head_dim % 2 != 0) return Status::errorf("{}: head_dim {} must be even for RoPE", name, head_dim);
  double eps = 0;
  EMBER_RETURN_IF_ERROR(cv.get_float("rms_norm_eps", &eps, 1e-6));
  if (!(eps > 0)) return Status::errorf("{}: rms_norm_eps must be positive", name);

  // RoPE: legacy (rope_theta, rope_scaling, rope_local_base_freq) or
  // rope_parameters (flat, or per layer type for Gemma 3).
  double theta = d.rope_theta;
  double local_theta = 10000.0;
  RopeScaling scaling;
  if (const json* rp = cv.get("rope_parameters")) {
    if (!rp->is_object()) return Status::errorf("{}: rope_parameters must be an object", name);
    const json* full = object_field(rp, "full_attention");
    const json* params = full ? full : rp;
    EMBER_RETURN_IF_ERROR(cv.number_of(object_field(params, "rope_theta"), "rope_theta", &theta, theta));
    EMBER_RETURN_IF_ERROR(read_rope_scaling(cv, params, &scaling));
    if (const json* sliding = object_field(rp, "sliding_attention"))
      EMBER_RETURN_IF_ERROR(
          cv.number_of(object_field(sliding, "rope_theta"), "rope_theta", &local_theta, local_theta));
  } else {
    EMBER_RETURN_IF_ERROR(cv.get_float("rope_theta", &theta, theta));
    EMBER_RETURN_IF_ERROR(read_rope_scaling(cv, cv.get("rope_scaling"), &scaling));
    EMBER_RETURN_IF_ERROR(cv.get_float("rope_local_base_freq", &local_theta, local_theta));
  }
  if (!(theta > 0) || !(local_theta > 0)) return Status::errorf("{}: rope_theta must be positive", name);
  // Rotated dimensions: head_dim * partial_rotary_factor (top level, or in
  // the rope parameters as transformers moves it there), as transformers
  // computes them.
  int64_t n_rot = head_dim;
  {
    const json* prf = cv.get("partial_rotary_factor");
    if (const json* rp = cv.get("rope_parameters"); !prf && rp)
      prf = object_field(object_field(rp, "full_attention") ? object_field(rp, "full_attention") : rp,
                         "partial_rotary_factor");
    if (!prf) prf = object_field(cv.get("rope_scaling"), "partial_rotary_factor");
    double f = 1.0;
    EMBER_RETURN_IF_ERROR(cv.number_of(prf, "partial_rotary_factor", &f, 1.0));
    if (!(f > 0 && f <= 1)) return Status::errorf("{}: partial_rotary_factor must be in (0, 1]", name);
    n_rot = static_cast<int64_t>(static_cast<double>(head_dim) * f);
    if (n_rot < 2 || n_rot % 2 != 0)
      return Status::errorf("{}: head_dim {} * partial_rotary_factor {} = {} rotated dimensions (must be even)", name,
                            head_dim, f, n_rot);
  }
  // A top-level original_max_position_embeddings takes precedence for the
  // scaled RoPE types (transformers' standardize_rope_params), then the rope
  // parameters' own, then max_position_embeddings.
  if (scaling.type == "yarn" || scaling.type == "llama3" || scaling.type == "longrope") {
    double top = 0;
    EMBER_RETURN_IF_ERROR(cv.get_float("original_max_position_embeddings", &top, 0.0));
    if (top > 0) scaling.original_context = top;
    else if (!(scaling.original_context > 0)) scaling.original_context = static_cast<double>(n_ctx);
  }

  bool tie = d.tie_word_embeddings;
  if (const json* t = cv.get("tie_word_embeddings")) {
    if (!t->is_boolean()) return Status::errorf("{}: tie_word_embeddings must be a boolean", name);
    tie = t->get<bool>();
  }

  meta->set("general.architecture", Metadata::make_string(a));
  meta->set(a + ".vocab_size", hf_u32(n_vocab));
  meta->set(a + ".context_length", hf_u32(n_ctx));
  meta->set(a + ".embedding_length", hf_u32(n_embd));
  meta->set(a + ".block_count", hf_u32(n_layer));
  meta->set(a + ".feed_forward_length", hf_u32(n_ff));
  meta->set(a + ".attention.head_count", hf_u32(n_head));
  meta->set(a + ".attention.head_count_kv", hf_u32(n_head_kv));
  meta->set(a + ".attention.key_length", hf_u32(head_dim));
  meta->set(a + ".attention.value_length", hf_u32(head_dim));
  meta->set(a + ".attention.layer_norm_rms_epsilon", hf_f32(eps));
  meta->set(a + ".rope.freq_base", hf_f32(theta));
  meta->set(a + ".rope.dimension_count", hf_u32(n_rot));
  // HF checkpoints rotate halves (rotate_half), i.e. NeoX-style RoPE on the
  // unpermuted Q/K weights, for every architecture here.
  meta->set(a + ".rope.type", Metadata::make_string("neox"));
  if (!scaling.type.empty() && scaling.type != "longrope") {
    meta->set(a + ".rope.scaling.type", Metadata::make_string(scaling.type));
    meta->set(a + ".rope.scaling.factor", hf_f32(scaling.factor));
    if (scaling.type == "llama3") {
      meta->set(a + ".rope.scaling.low_freq_factor", hf_f32(scaling.low_freq_factor));
      meta->set(a + ".rope.scaling.high_freq_factor", hf_f32(scaling.high_freq_factor));
      info.f32_tensors["rope_freqs.weight"] =
          llama3_rope_freq_factors(n_rot, theta, scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor,
                                   scaling.original_context);
    } else if (scaling.type == "yarn") {
      // The magnitude as transformers computes it (llama.cpp's converter
      // writes mscale_all_dim as yarn_log_multiplier, which gives the same
      // when mscale is 1).
      auto mscale = [&](double m) { return scaling.factor <= 1 ? 1.0 : 0.1 * m * std::log(scaling.factor) + 1.0; };
      const double attn = scaling.attention_factor > 0 ? scaling.attention_factor
                          : scaling.mscale > 0 && scaling.mscale_all_dim > 0
                              ? mscale(scaling.mscale) / mscale(scaling.mscale_all_dim)
                              : mscale(1);
      meta->set(a + ".rope.scaling.yarn_beta_fast", hf_f32(scaling.beta_fast));
      meta->set(a + ".rope.scaling.yarn_beta_slow", hf_f32(scaling.beta_slow));
      if (scaling.mscale_all_dim > 0) meta->set(a + ".rope.scaling.yarn_log_multiplier", hf_f32(scaling.mscale_all_dim));
      meta->set(a + ".rope.scaling.yarn_attn_factor", hf_f32(attn));
      // ember's own key (llama.cpp always truncates): the ramp's bounds as
      // computed, not floored / ceiled (gpt-oss's truncate = false).
      if (!scaling.truncate) meta->set(a + ".rope.scaling.yarn_truncate", Metadata::make_bool(false));
    }
  }
  if (scaling.original_context > 0)
    meta->set(a + ".rope.scaling.original_context_length", hf_u32(static_cast<int64_t>(scaling.original_context)));

  if (spec->hf_config) {
    HfConfigContext ctx;
    ctx.n_layer = n_layer;
    ctx.head_dim = head_dim;
    ctx.n_ctx = n_ctx;
    ctx.local_rope_theta = local_theta;
    ctx.f32_tensors = &info.f32_tensors;
    EMBER_RETURN_IF_ERROR(spec->hf_config(cv, ctx, meta));
  }
  if (scaling.type == "longrope" && !info.f32_tensors.count("rope_factors_long.weight"))
    return Status::errorf("{}: rope scaling type 'longrope' is not supported for {}", name, a);

  // Special token ids, when the config has them (eos may be a list: the first
  // is used; tokenizer files may refine these).
  auto token_id = [&](const char* key, const char* gguf_key) {
    const json* j = cv.get(key);
    if (j && j->is_array() && !j->empty()) j = &(*j)[0];
    if (j && j->is_number_integer() && j->get<int64_t>() >= 0 && j->get<int64_t>() <= INT32_MAX)
      meta->set(gguf_key, hf_u32(j->get<int64_t>()));
  };
  token_id("bos_token_id", "tokenizer.ggml.bos_token_id");
  token_id("eos_token_id", "tokenizer.ggml.eos_token_id");
  token_id("pad_token_id", "tokenizer.ggml.padding_token_id");

  info.n_layer = n_layer;
  info.n_embd = n_embd;
  info.n_vocab = n_vocab;
  info.head_dim = head_dim;
  info.tie_word_embeddings = tie;
  info.norm_plus_one = spec->hf_norm_plus_one;
  return info;
}

std::string hf_tensor_name_to_gguf(const std::string& arch, const std::string& hf_name) {
  const ArchSpec* spec = find_arch(arch);
  if (!spec) return "";
  std::string n = hf_name;
  auto replace_prefix = [&](const char* from, const char* to) {
    const size_t len = std::strlen(from);
    if (n.compare(0, len, from) == 0) n = to + n.substr(len);
  };
  replace_prefix("model.language_model.", "model.");
  replace_prefix("language_model.model.", "model.");
  replace_prefix("language_model.lm_head.", "lm_head.");
  auto hf_of = [](const TensorSpec& t) { return t.hf ? t.hf : role_info(t.role).hf; };

  for (const TensorSpec& t : spec->model_tensors)
    if (const char* h = hf_of(t); h && n == h) return role_info(t.role).gguf;

  static const char kLayers[] = "model.layers.";
  if (n.compare(0, sizeof(kLayers) - 1, kLayers) != 0) return "";
  size_t p = sizeof(kLayers) - 1;
  const size_t digits = p;
  while (p < n.size() && n[p] >= '0' && n[p] <= '9') ++p;
  if (p == digits || p - digits > 6 || p >= n.size() || n[p] != '.') return "";
  if (n[digits] == '0' && p - digits > 1) return "";  // no leading zeros
  const std::string layer = n.substr(digits, p - digits);
  const std::string rest = n.substr(p + 1);
  for (const TensorSpec& t : spec->block_tensors) {
    if (t.hf_alt && rest == t.hf_alt) return gguf_tensor_name(t, std::stoi(layer));
    const char* h = hf_of(t);
    if (!h) continue;
    if (rest == h) return gguf_tensor_name(t, std::stoi(layer));
    // One expert's matrix: "{e}" stands for its index (no leading zeros).
    const std::string_view pat(h);
    const size_t brace = pat.find("{e}");
    if (brace == std::string_view::npos) continue;
    const std::string_view pre = pat.substr(0, brace), post = pat.substr(brace + 3);
    if (rest.size() <= pre.size() + post.size() || rest.compare(0, pre.size(), pre) != 0 ||
        rest.compare(rest.size() - post.size(), post.size(), post) != 0)
      continue;
    const std::string idx = rest.substr(pre.size(), rest.size() - pre.size() - post.size());
    if (idx.empty() || idx.size() > 6 || (idx[0] == '0' && idx.size() > 1) ||
        idx.find_first_not_of("0123456789") != std::string::npos)
      continue;
    return gguf_expert_tensor_name(t.role, std::stoi(layer), std::stoi(idx));
  }
  return "";
}

}  // namespace ember
