// QuaRot rotations fused into the weights; see quarot.h.
#include "transform/quarot.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "kernels/hadamard.h"
#include "quant/quantize.h"

namespace ember {

int64_t largest_hadamard_divisor(int64_t n) {
  for (int64_t g = std::min<int64_t>(n, kHadamardMaxSize); g >= 2; --g)
    if (n % g == 0 && hadamard_check(g)) return g;
  return 0;
}

namespace {

// A matrix (or vector: n_out 1) read as f32, written back when changed.
struct F32Tensor {
  std::vector<float> v;
  int64_t n_in = 0, n_out = 0;
};

class Rotator {
 public:
  Rotator(ModelFile* f, QuantPlan* plan, ThreadPool& pool) : f_(f), pool_(pool) {
    if (plan)
      for (QuantPlanEntry& e : plan->entries) entries_[e.name] = &e;
  }

  // Each row's blocks of g values <- H_g times them: W <- W blockdiag(H_g)^T.
  Status rotate_columns(const std::string& name, int64_t g, int64_t n_in) {
    F32Tensor* t = get(name);
    if (!t) return Status::errorf("quarot: missing tensor '{}'", name);
    if (t->n_in != n_in || n_in % g != 0)
      return Status::errorf("quarot: tensor '{}' has rows of {}, expected {}", name, t->n_in, n_in);
    pool_.parallel_for(t->n_out, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t c = 0; c < n_in; c += g) hadamard_row(t->v.data() + r * n_in + c, g, false);
    });
    return Status::ok();
  }

  // Each head's block of g rows <- H_g times it (per column), and the bias
  // (if any) the same per head: W_v <- blockdiag(H_g) W_v.
  Status rotate_rows(const std::string& weight, const std::string& bias, int64_t g, int64_t n_out) {
    F32Tensor* t = get(weight);
    if (!t) return Status::errorf("quarot: missing tensor '{}'", weight);
    if (t->n_out != n_out || n_out % g != 0)
      return Status::errorf("quarot: tensor '{}' has {} rows, expected {}", weight, t->n_out, n_out);
    const int64_t n_in = t->n_in;
    pool_.parallel_for(n_out / g, 1, [&](int64_t b, int64_t e, int) {
      std::vector<float> col(static_cast<size_t>(g));
      for (int64_t h = b; h < e; ++h)
        for (int64_t j = 0; j < n_in; ++j) {
          for (int64_t i = 0; i < g; ++i) col[i] = t->v[(h * g + i) * n_in + j];
          hadamard_row(col.data(), g, false);
          for (int64_t i = 0; i < g; ++i) t->v[(h * g + i) * n_in + j] = col[i];
        }
    });
    if (F32Tensor* bt = get(bias)) {
      if (static_cast<int64_t>(bt->v.size()) != n_out)
        return Status::errorf("quarot: tensor '{}' has {} values, expected {}", bias, bt->v.size(), n_out);
      for (int64_t h = 0; h < n_out / g; ++h) hadamard_row(bt->v.data() + h * g, g, false);
    }
    return Status::ok();
  }

  // Every changed tensor into the file as f32; its plan entry re-planned.
  Status store() {
    for (auto& [name, t] : t_) {
      replace_with_f32(f_, name, std::move(t.v));
      if (entries_.empty()) continue;
      auto it = entries_.find(name);
      if (it == entries_.end()) return Status::errorf("quarot: tensor '{}' is not in the plan", name);
      QuantPlanEntry* e = it->second;
      if (e->transform != TensorTransform::kNone)
        return Status::errorf("quarot: tensor '{}' is permuted at conversion (a Hugging Face Q/K); convert the "
                              "model to GGUF first",
                              name);
      e->source = DType::kF32;
      if (e->method == QuantMethod::kCopy || e->method == QuantMethod::kConvert) e->method = method_from_f32(e->target);
    }
    return Status::ok();
  }

 private:
  F32Tensor* get(const std::string& name) {
    if (auto it = t_.find(name); it != t_.end()) return &it->second;
    const TensorView* t = f_->tensor(name);
    if (!t) return nullptr;
    F32Tensor& f = t_[name];
    f.n_in = t->ne[0];
    f.n_out = t->nrows();
    f.v.resize(static_cast<size_t>(f.n_in * f.n_out));
    for (int64_t r = 0; r < f.n_out; ++r) dequantize_row_ref(t->type, t->row(r), f.v.data() + r * f.n_in, f.n_in);
    return &f;
  }

  ModelFile* f_;
  ThreadPool& pool_;
  std::map<std::string, QuantPlanEntry*> entries_;
  std::map<std::string, F32Tensor> t_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> apply_quarot(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                                const QuarotOptions& o, ThreadPool& pool, ModelRotation* applied) {
  auto cfg = config_from_metadata(src->metadata);
  if (!cfg) return cfg.status();
  if (cfg->rotation.any()) return Status::error("quarot: the model is already rotated (ember.quarot.* metadata)");
  ModelRotation r;
  auto size_for = [](int64_t width, const char* what, int* out) -> Status {
    *out = static_cast<int>(largest_hadamard_divisor(width));
    if (*out == 0) return Status::errorf("quarot: no Hadamard size divides the {} width {}", what, width);
    return Status::ok();
  };
  if (o.attn_in || o.ffn_in) {
    int g = 0;
    EMBER_RETURN_IF_ERROR(size_for(cfg->n_embd, "embedding", &g));
    r.attn_in = o.attn_in ? g : 0;
    r.ffn_in = o.ffn_in ? g : 0;
  }
  if (o.ffn_down) {  // one size for every layer: the largest that divides all n_ff
    int64_t ff = 0;
    for (const LayerConfig& l : cfg->layers) ff = std::gcd(ff, static_cast<int64_t>(l.n_ff));
    EMBER_RETURN_IF_ERROR(size_for(ff, "FFN", &r.ffn_down));
  }
  if (o.attn_out) {
    int64_t w = 0;
    for (const LayerConfig& l : cfg->layers) w = std::gcd(w, static_cast<int64_t>(l.n_head) * cfg->head_dim_v);
    EMBER_RETURN_IF_ERROR(size_for(w, "attention output", &r.attn_out));
  }
  if (o.attn_v) {
    if (Status st = hadamard_check(cfg->head_dim_v); !st) return st.with_context("quarot: V head size");
    r.attn_v = cfg->head_dim_v;
  }
  Rotator rot(src.get(), plan, pool);
  const int64_t E = cfg->n_embd;
  for (int il = 0; il < cfg->n_layer; ++il) {
    const LayerConfig& lc = cfg->layers[il];
    auto name = [&](const char* role, const char* suffix = "weight") {
      return fmt::format("blk.{}.{}.{}", il, role, suffix);
    };
    if (r.attn_in)
      for (const char* m : {"attn_q", "attn_k", "attn_v"})
        EMBER_RETURN_IF_ERROR(rot.rotate_columns(name(m), r.attn_in, E));
    if (r.ffn_in)
      for (const char* m : {"ffn_gate", "ffn_up"}) EMBER_RETURN_IF_ERROR(rot.rotate_columns(name(m), r.ffn_in, E));
    if (r.ffn_down) EMBER_RETURN_IF_ERROR(rot.rotate_columns(name("ffn_down"), r.ffn_down, lc.n_ff));
    if (r.attn_v) {
      EMBER_RETURN_IF_ERROR(rot.rotate_rows(name("attn_v"), name("attn_v", "bias"), r.attn_v,
                                            static_cast<int64_t>(lc.n_head_kv) * cfg->head_dim_v));
      EMBER_RETURN_IF_ERROR(
          rot.rotate_columns(name("attn_output"), r.attn_v, static_cast<int64_t>(lc.n_head) * cfg->head_dim_v));
    }
    if (r.attn_out)
      EMBER_RETURN_IF_ERROR(
          rot.rotate_columns(name("attn_output"), r.attn_out, static_cast<int64_t>(lc.n_head) * cfg->head_dim_v));
  }
  EMBER_RETURN_IF_ERROR(rot.store());
  for (auto [key, g] : {std::pair{kRotAttnInKey, r.attn_in}, std::pair{kRotFfnInKey, r.ffn_in},
                        std::pair{kRotFfnDownKey, r.ffn_down}, std::pair{kRotAttnVKey, r.attn_v},
                        std::pair{kRotAttnOutKey, r.attn_out}})
    if (g) src->metadata.set(key, Metadata::make_int(g, GgufType::kUint32));
  if (applied) *applied = r;
  return src;
}

}  // namespace ember
