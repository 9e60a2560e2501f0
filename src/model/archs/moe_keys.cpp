// The Mixture-of-Experts keys the MoE specs share: GGUF metadata into
// LayerConfig (fill_moe_layers) and Hugging Face config.json into that
// metadata (hf_moe_config); see arch_spec.h.
#include <algorithm>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "model/archs/archs.h"
#include "model/io/hf_config.h"

namespace ember {

Status fill_moe_layers(const Metadata& meta, ModelConfig* cfg, const MoeDefaults& d) {
  const std::string& a = cfg->arch;
  constexpr int64_t kMaxExperts = 4096, kMaxWidth = int64_t{1} << 30;
  // One integer key in [lo, hi] (absent: nullopt).
  auto read_int = [&](const std::string& key, int64_t lo, int64_t hi) -> Result<std::optional<int64_t>> {
    const GgufValue* v = meta.find(key);
    if (!v) return std::optional<int64_t>();
    auto x = meta.get_int(key);
    if (!x || v->type == GgufType::kBool) return Status::errorf("metadata key '{}' must be an integer", key);
    if (*x < lo || *x > hi) return Status::errorf("metadata key '{}' has invalid value {}", key, *x);
    return std::optional<int64_t>(*x);
  };
  auto n_expert = read_int(a + ".expert_count", 0, kMaxExperts);
  if (!n_expert) return n_expert.status();
  if (!n_expert->value_or(0)) {
    if (d.required) return Status::errorf("metadata key '{}.expert_count' is missing or 0: {} is a Mixture-of-Experts "
                                          "architecture", a, a);
    return Status::ok();
  }
  const int E = static_cast<int>(**n_expert);
  auto used = read_int(a + ".expert_used_count", 1, std::min(E, kMaxExpertsUsed));
  if (!used) return used.status();
  if (!*used) return Status::errorf("missing metadata key '{}.expert_used_count'", a);
  const int k = static_cast<int>(**used);
  // expert_feed_forward_length: one value or one per layer.
  std::vector<int> ff_exp(cfg->n_layer, 0);
  const std::string ff_key = a + ".expert_feed_forward_length";
  if (const GgufValue* v = meta.find(ff_key); v && v->type == GgufType::kArray) {
    if (!gguf_type_is_int(v->elem_type) || v->ints.size() != static_cast<size_t>(cfg->n_layer))
      return Status::errorf("metadata key '{}' must be one integer or one per layer ({})", ff_key, cfg->n_layer);
    for (int il = 0; il < cfg->n_layer; ++il) {
      if (v->ints[il] <= 0 || v->ints[il] > kMaxWidth)
        return Status::errorf("metadata key '{}' has invalid value {} for layer {}", ff_key, v->ints[il], il);
      ff_exp[il] = static_cast<int>(v->ints[il]);
    }
  } else {
    auto f = read_int(ff_key, 1, kMaxWidth);
    if (!f) return f.status();
    if (*f) std::fill(ff_exp.begin(), ff_exp.end(), static_cast<int>(**f));
  }
  auto shexp = read_int(a + ".expert_shared_feed_forward_length", 0, kMaxWidth);
  if (!shexp) return shexp.status();
  bool norm = d.norm_topk;
  if (meta.find(a + ".expert_weights_norm")) {
    auto b = meta.get_bool(a + ".expert_weights_norm");
    if (!b) return Status::errorf("metadata key '{}.expert_weights_norm' must be a boolean", a);
    norm = *b;
  }
  float scale = 1.f;
  if (meta.find(a + ".expert_weights_scale")) {
    auto f = meta.get_float(a + ".expert_weights_scale");
    if (!f || !std::isfinite(*f) || *f < 0) return Status::errorf("metadata key '{}.expert_weights_scale' is invalid", a);
    if (*f != 0) scale = static_cast<float>(*f);
  }
  MoeGating gating = d.gating;
  auto func = read_int(a + ".expert_gating_func", 0, 1 << 20);
  if (!func) return func.status();
  if (*func && **func == 3) gating = MoeGating::kSoftmaxTopK;
  else if (*func && **func == 1) gating = MoeGating::kSoftmax;
  else if (*func && **func != 0)
    return Status::errorf("metadata key '{}.expert_gating_func' = {}: only softmax (1) and softmax over the top k (3) "
                          "are supported", a, **func);
  for (int il = 0; il < cfg->n_layer; ++il) {
    LayerConfig& l = cfg->layers[il];
    l.ffn_kind = FfnKind::kMoe;
    l.n_expert = E;
    l.n_expert_used = k;
    l.moe_gating = gating;
    l.moe_norm_topk = norm;
    l.moe_weights_scale = scale;
    // The dense width is per layer in some files; read it as config_from_metadata does.
    int64_t n_ff = cfg->n_ff;
    if (const GgufValue* v = meta.find(a + ".feed_forward_length"); v && v->type == GgufType::kArray &&
                                                                     v->ints.size() == static_cast<size_t>(cfg->n_layer))
      n_ff = v->ints[il];
    l.n_ff_exp = ff_exp[il] ? ff_exp[il] : static_cast<int>(d.ff_exp_is_ff_over_used ? n_ff / k : n_ff);
    if (l.n_ff_exp <= 0) return Status::errorf("layer {}: expert width {} is not positive", il, l.n_ff_exp);
    l.n_ff_shexp = *shexp ? static_cast<int>(**shexp) : (d.shared_expert ? static_cast<int>(n_ff) : 0);
  }
  return Status::ok();
}

Status hf_moe_config(const HfConfigView& cv, const HfConfigContext& ctx, Metadata* meta, const HfMoeKeys& k) {
  const std::string* arch = meta->get_string("general.architecture");
  if (!arch) return Status::errorf("{}: no architecture", cv.name());
  const std::string a = *arch;  // a copy: meta->set below may move the entries
  // The expert count: num_experts (Qwen, OLMoE) or num_local_experts
  // (Mixtral, and what transformers v5 writes for Qwen3-MoE).
  const char* count_key = cv.get("num_experts") ? "num_experts" : "num_local_experts";
  if (!k.n_expert && !cv.get(count_key)) return Status::ok();  // a dense model of a family with MoE variants
  int64_t n_expert = 0, used = 0, ff_exp = 0, shexp = 0;
  EMBER_RETURN_IF_ERROR(cv.get_count(count_key, &n_expert, k.n_expert ? std::optional<int64_t>(k.n_expert) : std::nullopt));
  EMBER_RETURN_IF_ERROR(cv.get_count("num_experts_per_tok", &used, k.n_expert_used ? std::optional<int64_t>(k.n_expert_used) : std::nullopt));
  if (used > n_expert || used > kMaxExpertsUsed)
    return Status::errorf("{}: num_experts_per_tok {} must be at most the expert count {} (and {})", cv.name(), used,
                          n_expert, kMaxExpertsUsed);
  meta->set(a + ".expert_count", hf_u32(n_expert));
  meta->set(a + ".expert_used_count", hf_u32(used));
  if (k.ff_exp_key) {
    EMBER_RETURN_IF_ERROR(cv.get_count(k.ff_exp_key, &ff_exp, k.ff_exp_default ? std::optional<int64_t>(k.ff_exp_default) : std::nullopt));
    meta->set(a + ".expert_feed_forward_length", hf_u32(ff_exp));
  }
  if (k.shared_expert) {
    EMBER_RETURN_IF_ERROR(cv.get_count("shared_expert_intermediate_size", &shexp, k.shared_default ? std::optional<int64_t>(k.shared_default) : std::nullopt));
    meta->set(a + ".expert_shared_feed_forward_length", hf_u32(shexp));
  }
  bool norm = k.norm_topk;
  if (k.norm_topk_key) {
    if (const HfConfigView::json* j = cv.get("norm_topk_prob")) {
      if (!j->is_boolean()) return Status::errorf("{}: norm_topk_prob must be a boolean", cv.name());
      norm = j->get<bool>();
    }
  }
  meta->set(a + ".expert_weights_norm", Metadata::make_bool(norm));
  // Dense layers among the MoE ones (Qwen's mlp_only_layers and
  // decoder_sparse_step; llama.cpp runs every layer as MoE too).
  if (const HfConfigView::json* j = cv.get("mlp_only_layers"); j && !(j->is_array() && j->empty()))
    return Status::errorf("{}: mlp_only_layers (dense layers in a MoE model) is not supported", cv.name());
  int64_t step = 1;
  EMBER_RETURN_IF_ERROR(cv.get_int("decoder_sparse_step", &step, 1));
  if (step != 1)
    return Status::errorf("{}: decoder_sparse_step {} (dense layers in a MoE model) is not supported", cv.name(), step);
  (void)ctx;
  return Status::ok();
}

}  // namespace ember
