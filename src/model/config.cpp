// Hyper-parameters from metadata; see config.h.
#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "kernels/hadamard.h"
#include "model/archs/archs.h"

namespace ember {

namespace {

constexpr int64_t kMaxSize = 1 << 30;

Status read_positive(const Metadata& meta, const std::string& key, int* out) {
  auto v = meta.get_int(key);
  if (!v) return Status::errorf("missing or non-integer metadata key '{}'", key);
  if (*v <= 0 || *v > kMaxSize) return Status::errorf("metadata key '{}' has invalid value {}", key, *v);
  *out = static_cast<int>(*v);
  return Status::ok();
}

// A size that is one integer for the model or, as llama.cpp writes it for
// models whose layers differ, an array of n_layer integers. *per_layer gets
// the array (empty for a single value); *out the single value or the
// largest entry.
Status read_positive_per_layer(const Metadata& meta, const std::string& key, int n_layer, int* out,
                               std::vector<int>* per_layer) {
  per_layer->clear();
  const GgufValue* v = meta.find(key);
  if (!v || v->type != GgufType::kArray) return read_positive(meta, key, out);
  if (!gguf_type_is_int(v->elem_type) || v->elem_type == GgufType::kBool)
    return Status::errorf("metadata key '{}' is an array of {}, expected integers", key, gguf_type_name(v->elem_type));
  if (v->ints.size() != static_cast<size_t>(n_layer))
    return Status::errorf("metadata key '{}' has {} values, expected one per layer ({})", key, v->ints.size(), n_layer);
  int largest = 0;
  for (size_t il = 0; il < v->ints.size(); ++il) {
    const int64_t x = v->ints[il];
    if (x <= 0 || x > kMaxSize) return Status::errorf("metadata key '{}' has invalid value {} for layer {}", key, x, il);
    per_layer->push_back(static_cast<int>(x));
    largest = std::max(largest, static_cast<int>(x));
  }
  *out = largest;
  return Status::ok();
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> v;
  for (const ArchSpec* a : arch_specs()) v.emplace_back(a->name);
  return v;
}

Result<ModelConfig> config_from_metadata(const Metadata& meta) {
  ModelConfig cfg;
  const std::string* arch = meta.get_string("general.architecture");
  if (!arch) return Status::error("missing metadata key 'general.architecture'");
  cfg.arch = *arch;
  const ArchSpec* spec = find_arch(cfg.arch);
  if (!spec) return unsupported_arch_error(cfg.arch);
  if (const std::string* n = meta.get_string("general.name")) cfg.name = *n;

  const std::string& a = cfg.arch;
  std::vector<int> ff_l, head_l, head_kv_l;  // per-layer values, when the file gives them
  EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".block_count", &cfg.n_layer));
  EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".embedding_length", &cfg.n_embd));
  EMBER_RETURN_IF_ERROR(read_positive_per_layer(meta, a + ".feed_forward_length", cfg.n_layer, &cfg.n_ff, &ff_l));
  EMBER_RETURN_IF_ERROR(
      read_positive_per_layer(meta, a + ".attention.head_count", cfg.n_layer, &cfg.n_head, &head_l));
  cfg.n_head_kv = cfg.n_head;
  head_kv_l = head_l;
  if (meta.find(a + ".attention.head_count_kv"))
    EMBER_RETURN_IF_ERROR(
        read_positive_per_layer(meta, a + ".attention.head_count_kv", cfg.n_layer, &cfg.n_head_kv, &head_kv_l));
  if (head_l.empty() && head_kv_l.empty()) {
    if (cfg.n_head % cfg.n_head_kv != 0)
      return Status::errorf("head_count {} is not a multiple of head_count_kv {}", cfg.n_head, cfg.n_head_kv);
  } else {
    for (int il = 0; il < cfg.n_layer; ++il) {
      const int h = head_l.empty() ? cfg.n_head : head_l[il];
      const int hkv = head_kv_l.empty() ? cfg.n_head_kv : head_kv_l[il];
      if (h % hkv != 0)
        return Status::errorf("layer {}: head_count {} is not a multiple of head_count_kv {}", il, h, hkv);
    }
  }
  // The default head size is n_embd over layer 0's head count (llama.cpp's
  // rule; the same as the model-wide count unless the file gives per-layer
  // counts, which come with an explicit key_length in practice).
  cfg.head_dim = cfg.n_embd / (head_l.empty() ? cfg.n_head : head_l[0]);
  if (meta.find(a + ".attention.key_length"))
    EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".attention.key_length", &cfg.head_dim));
  cfg.head_dim_v = cfg.head_dim;
  if (meta.find(a + ".attention.value_length"))
    EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".attention.value_length", &cfg.head_dim_v));
  if (cfg.head_dim <= 0) return Status::errorf("head dimension of '{}' is zero (n_embd < head_count)", a);
  if (cfg.head_dim % 2 != 0) return Status::errorf("head dimension {} is odd", cfg.head_dim);
  cfg.n_ctx_train = static_cast<int>(meta.get_int(a + ".context_length").value_or(4096));
  if (cfg.n_ctx_train <= 0) cfg.n_ctx_train = 4096;
  cfg.norm_eps = static_cast<float>(meta.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  cfg.n_rot = cfg.head_dim;
  if (auto r = meta.get_int(a + ".rope.dimension_count")) {
    if (*r <= 0 || *r > cfg.head_dim || *r % 2) return Status::errorf("invalid {}.rope.dimension_count {}", a, *r);
    cfg.n_rot = static_cast<int>(*r);
  }
  cfg.rope_orig_ctx = cfg.n_ctx_train;  // llama.cpp's n_ctx_orig_yarn default
  if (meta.find(a + ".rope.scaling.original_context_length"))
    EMBER_RETURN_IF_ERROR(read_positive(meta, a + ".rope.scaling.original_context_length", &cfg.rope_orig_ctx));
  if (auto v = meta.get_float(a + ".attn_logit_softcapping")) cfg.attn_logit_softcap = static_cast<float>(*v);
  if (auto v = meta.get_float(a + ".final_logit_softcapping")) cfg.final_logit_softcap = static_cast<float>(*v);
  if (const GgufValue* tokens = meta.find("tokenizer.ggml.tokens")) cfg.n_vocab = static_cast<int>(tokens->count);
  if (auto v = meta.get_int(a + ".vocab_size")) cfg.n_vocab = static_cast<int>(*v);

  // Block wiring follows the architecture's tensor list.
  cfg.attn_pre_norm = spec->requires_tensor(TensorRole::kAttnNorm);
  cfg.ffn_pre_norm = spec->requires_tensor(TensorRole::kFfnNorm);
  cfg.qk_norm = spec->requires_tensor(TensorRole::kAttnQNorm);
  cfg.qk_norm_full = cfg.qk_norm && spec->qk_norm_full;
  cfg.post_attn_norm = spec->requires_tensor(TensorRole::kPostAttnNorm);
  cfg.post_ffn_norm = spec->requires_tensor(TensorRole::kPostFfnNorm);
  EMBER_RETURN_IF_ERROR(spec->fill(meta, &cfg));
  if (static_cast<int>(cfg.layers.size()) != cfg.n_layer) cfg.layers.resize(cfg.n_layer);
  for (int il = 0; il < cfg.n_layer; ++il) {
    LayerConfig& l = cfg.layers[il];
    if (l.n_head == 0) l.n_head = head_l.empty() ? cfg.n_head : head_l[il];
    if (l.n_head_kv == 0) l.n_head_kv = head_kv_l.empty() ? cfg.n_head_kv : head_kv_l[il];
    if (l.n_ff == 0) l.n_ff = ff_l.empty() ? cfg.n_ff : ff_l[il];
  }
  EMBER_RETURN_IF_ERROR(read_rotation_metadata(meta, &cfg));
  if (const GgufValue* v = meta.find(kOutputTokensKey)) {
    if (v->type != GgufType::kArray || !gguf_type_is_int(v->elem_type) || v->elem_type == GgufType::kBool ||
        v->ints.empty())
      return Status::errorf("metadata key '{}' must be a non-empty array of token ids", kOutputTokensKey);
    for (int64_t id : v->ints) {
      if (id < 0 || id > INT32_MAX || (!cfg.output_tokens.empty() && id <= cfg.output_tokens.back()))
        return Status::errorf("metadata key '{}': token id {} is out of range or out of order", kOutputTokensKey, id);
      cfg.output_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  return cfg;
}

Status read_rotation_metadata(const Metadata& meta, ModelConfig* cfg) {
  // One key: absent -> 0; else a Hadamard size that divides every width.
  auto read = [&](const char* key, std::initializer_list<int64_t> widths, int* out) -> Status {
    *out = 0;
    const GgufValue* v = meta.find(key);
    if (!v) return Status::ok();
    auto g = meta.get_int(key);
    if (!g || v->type == GgufType::kBool) return Status::errorf("metadata key '{}' must be an integer", key);
    if (*g == 0) return Status::ok();
    if (Status st = hadamard_check(*g); !st)
      return Status::errorf("metadata key '{}': {} is not a rotation size: {}", key, *g, st.message());
    for (int64_t w : widths)
      if (w % *g != 0) return Status::errorf("metadata key '{}': {} does not divide the input width {}", key, *g, w);
    *out = static_cast<int>(*g);
    return Status::ok();
  };
  ModelRotation& r = cfg->rotation;
  EMBER_RETURN_IF_ERROR(read(kRotAttnInKey, {cfg->n_embd}, &r.attn_in));
  EMBER_RETURN_IF_ERROR(read(kRotFfnInKey, {cfg->n_embd}, &r.ffn_in));
  // An input rotation rotates the pre-norm's output (whose weight absorbed H).
  if ((r.attn_in && !cfg->attn_pre_norm) || (r.ffn_in && !cfg->ffn_pre_norm))
    return Status::errorf("metadata key '{}': input rotations need pre-norms, which {} does not have",
                          r.attn_in && !cfg->attn_pre_norm ? kRotAttnInKey : kRotFfnInKey, cfg->arch);
  EMBER_RETURN_IF_ERROR(read(kRotAttnVKey, {cfg->head_dim_v}, &r.attn_v));
  if (r.attn_v && r.attn_v != cfg->head_dim_v)
    return Status::errorf("metadata key '{}': {} is not the V head size {}", kRotAttnVKey, r.attn_v, cfg->head_dim_v);
  // Per-layer widths: the down input is n_ff wide, O's input n_head * head_dim_v.
  auto read_per_layer = [&](const char* key, const char* what, auto width, int* out) -> Status {
    EMBER_RETURN_IF_ERROR(read(key, {}, out));
    for (size_t il = 0; il < cfg->layers.size(); ++il)
      if (*out && width(cfg->layers[il]) % *out != 0)
        return Status::errorf("metadata key '{}': {} does not divide layer {}'s {} {}", key, *out, il, what,
                              width(cfg->layers[il]));
    return Status::ok();
  };
  EMBER_RETURN_IF_ERROR(read_per_layer(kRotFfnDownKey, "n_ff", [](const LayerConfig& l) { return l.n_ff; },
                                       &r.ffn_down));
  const int hdv = cfg->head_dim_v;
  EMBER_RETURN_IF_ERROR(read_per_layer(kRotAttnOutKey, "attention output width",
                                       [hdv](const LayerConfig& l) { return l.n_head * hdv; }, &r.attn_out));
  cfg->act_bits = 8;
  if (meta.find(kActBitsKey)) {
    auto b = meta.get_int(kActBitsKey);
    if (!b || (*b != 4 && *b != 8))
      return Status::errorf("metadata key '{}' must be 4 or 8", kActBitsKey);
    cfg->act_bits = static_cast<int>(*b);
  }
  return Status::ok();
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

namespace {

// The largest f(layer) over the MoE layers (0 without).
template <typename F>
int64_t max_over_moe(const std::vector<LayerConfig>& layers, F f) {
  int64_t m = 0;
  for (const LayerConfig& l : layers)
    if (l.ffn_kind == FfnKind::kMoe) m = std::max<int64_t>(m, f(l));
  return m;
}

}  // namespace

int64_t ModelConfig::max_moe_ff_per_token() const {
  return max_over_moe(layers, [](const LayerConfig& l) { return int64_t{l.n_expert_used} * l.n_ff_exp; });
}
int ModelConfig::max_n_expert_used() const {
  return static_cast<int>(max_over_moe(layers, [](const LayerConfig& l) { return l.n_expert_used; }));
}
int ModelConfig::max_n_expert() const {
  return static_cast<int>(max_over_moe(layers, [](const LayerConfig& l) { return l.n_expert; }));
}
int ModelConfig::max_n_ff_shexp() const {
  return static_cast<int>(max_over_moe(layers, [](const LayerConfig& l) { return l.n_ff_shexp; }));
}

int ModelConfig::max_n_ff() const {
  int m = n_ff;
  for (const LayerConfig& l : layers) m = std::max(m, l.n_ff);
  return m;
}

}  // namespace ember
