// AWQ over a model, block by block, with the scales folded; see awq_model.h.
#include "transform/awq_model.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"
#include "transform/imatrix.h"
#include "transform/layerwise.h"

namespace ember {

void AwqCollector::on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                                   int64_t n_in) {
  // K/V read Q's rows, up reads gate's: one group each.
  if (layer != layer_ || role == LinearRole::kK || role == LinearRole::kV || role == LinearRole::kUp ||
      role == LinearRole::kOutput)
    return;
  Group& g = groups_[role];
  if (g.n_in == 0) {
    g.n_in = n_in;
    g.sum_abs.assign(static_cast<size_t>(n_in), 0.0);
    g.sum_sq.assign(static_cast<size_t>(n_in), 0.0);
  }
  EMBER_CHECK(g.n_in == n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = x + r * ld;
    for (int64_t j = 0; j < n_in; ++j) {
      const double v = row[j];
      g.sum_abs[j] += std::fabs(v);
      g.sum_sq[j] += v * v;
    }
    const int64_t global = chunk_ * rows_per_chunk_ + r;
    if (global % stride_ == 0 && g.n_samples() < max_samples_) g.samples.insert(g.samples.end(), row, row + n_in);
  }
  g.n_tok += n_rows;
}

const AwqCollector::Group* AwqCollector::group(LinearRole role) const {
  auto it = groups_.find(role);
  return it == groups_.end() || it->second.n_tok == 0 ? nullptr : &it->second;
}

namespace {

// A tensor of the block being folded, read as f32.
struct F32Tensor {
  std::vector<float> v;
  int64_t n_in = 0, n_out = 0;  // ne[0], rows
  bool changed = false;
};


// What every block's folding shares.
struct AwqContext {
  const ModelConfig& cfg;
  std::map<std::string, QuantPlanEntry*>* entries;
  const AwqRunOptions& o;
  Backend& be;
  ThreadPool& pool;
  std::map<std::string, std::vector<float>>* importance;
  std::vector<AwqGroupReport>* report;
};

class LayerFolder {
 public:
  LayerFolder(int layer, ModelFile* current, const AwqContext& c)
      : l_(layer), cfg_(c.cfg), cur_(current), entries_(c.entries), o_(c.o), be_(c.be), pool_(c.pool),
        importance_(c.importance), report_(c.report) {}

  Status run(const AwqCollector& col) {
    const LayerConfig& lc = cfg_.layers[l_];
    EMBER_RETURN_IF_ERROR(group(col, LinearRole::kQ, "attn_q", {"attn_q", "attn_k", "attn_v"}, 1,
                                [&](const std::vector<float>& s) { return divide_norm("attn_norm", s); }));
    // O: its channel (h, d) is V's row (h / (n_head / n_head_kv), d).
    const int64_t hdv = cfg_.head_dim_v;
    F32Tensor* v = get(name("attn_v"));
    F32Tensor* out = get(name("attn_output"));
    const bool vo = o_.fold_vo && v && out && lc.n_head_kv > 0 && lc.n_head % lc.n_head_kv == 0 &&
                    v->n_out == lc.n_head_kv * hdv && out->n_in == lc.n_head * hdv;
    EMBER_RETURN_IF_ERROR(group(col, LinearRole::kO, "attn_output", {"attn_output"}, vo ? lc.n_head / lc.n_head_kv : 0,
                                [&](const std::vector<float>& s) {
                                  const int64_t g = lc.n_head / lc.n_head_kv;
                                  std::vector<float> rows(static_cast<size_t>(v->n_out));
                                  for (int64_t k = 0; k < lc.n_head_kv; ++k)
                                    for (int64_t d = 0; d < hdv; ++d) rows[k * hdv + d] = s[(k * g) * hdv + d];
                                  return divide_rows("attn_v", rows);
                                }));
    EMBER_RETURN_IF_ERROR(group(col, LinearRole::kGate, "ffn_gate", {"ffn_gate", "ffn_up"}, 1,
                                [&](const std::vector<float>& s) { return divide_norm("ffn_norm", s); }));
    F32Tensor* up = get(name("ffn_up"));
    F32Tensor* down = get(name("ffn_down"));
    const bool ud = o_.fold_up_down && up && down && up->n_out == down->n_in;
    EMBER_RETURN_IF_ERROR(group(col, LinearRole::kDown, "ffn_down", {"ffn_down"}, ud ? 1 : 0,
                                [&](const std::vector<float>& s) { return divide_rows("ffn_up", s); }));
    return store();
  }

 private:
  std::string name(const char* role, const char* suffix = "weight") const {
    return fmt::format("blk.{}.{}.{}", l_, role, suffix);
  }

  F32Tensor* get(const std::string& n) {
    if (auto it = t_.find(n); it != t_.end()) return &it->second;
    const TensorView* t = cur_->tensor(n);
    if (!t) return nullptr;
    F32Tensor& f = t_[n];
    f.n_in = t->ne[0], f.n_out = t->nrows();
    f.v = read_f32_rows(*t);
    return &f;
  }

  QuantPlanEntry* awq_entry(const std::string& n) {
    auto it = entries_->find(n);
    return it != entries_->end() && it->second->method == QuantMethod::kAwq ? it->second : nullptr;
  }

  Status divide_norm(const char* role, const std::vector<float>& s) {
    F32Tensor* n = get(name(role));
    if (!n || n->n_out != 1 || n->n_in != static_cast<int64_t>(s.size()))
      return Status::errorf("block {}: no {} of {} values to fold the AWQ scales into", l_, role, s.size());
    for (size_t j = 0; j < s.size(); ++j) n->v[j] /= s[j];
    n->changed = true;
    return Status::ok();
  }

  // Rows (and bias) of the matrix `role` divided by s (one per row).
  Status divide_rows(const char* role, const std::vector<float>& s) {
    F32Tensor* m = get(name(role));
    EMBER_CHECK(m && m->n_out == static_cast<int64_t>(s.size()));
    for (int64_t r = 0; r < m->n_out; ++r)
      for (int64_t j = 0; j < m->n_in; ++j) m->v[r * m->n_in + j] /= s[r];
    m->changed = true;
    if (F32Tensor* b = get(name(role, "bias"))) {
      if (b->n_in * b->n_out != m->n_out) return Status::errorf("block {}: {} bias of the wrong size", l_, role);
      for (int64_t r = 0; r < m->n_out; ++r) b->v[r] /= s[r];
      b->changed = true;
    }
    return Status::ok();
  }

  // One input group: search over its kAwq matrices, fold the scales into
  // every matrix of the group (columns) and, through fold_prev, into what
  // makes its input. tie > 0: heads of the input are tied in groups of
  // `tie` query heads (O with GQA; 1: no tying); 0: no fold (plain
  // rounding with the statistics).
  template <class Fold>
  Status group(const AwqCollector& col, LinearRole role, const char* gname, std::vector<const char*> mats, int64_t tie,
               Fold fold_prev) {
    std::vector<const char*> awq;
    for (const char* m : mats)
      if (awq_entry(name(m))) awq.push_back(m);
    if (awq.empty()) return Status::ok();
    const AwqCollector::Group* g = col.group(role);
    if (!g) return Status::errorf("tensor '{}': no calibration input reached it", name(awq[0]));
    const int64_t n_in = g->n_in;
    std::vector<float> mean_abs(static_cast<size_t>(n_in)), mean_sq(static_cast<size_t>(n_in));
    for (int64_t j = 0; j < n_in; ++j) {
      mean_abs[j] = static_cast<float>(g->sum_abs[j] / static_cast<double>(g->n_tok));
      mean_sq[j] = static_cast<float>(g->sum_sq[j] / static_cast<double>(g->n_tok));
    }
    if (tie > 1) {  // mean |x| over the query heads that share a kv head
      const int64_t hdv = cfg_.head_dim_v, n_kv = n_in / (hdv * tie);
      for (int64_t k = 0; k < n_kv; ++k)
        for (int64_t d = 0; d < hdv; ++d) {
          double sum = 0;
          for (int64_t h = k * tie; h < (k + 1) * tie; ++h) sum += mean_abs[h * hdv + d];
          for (int64_t h = k * tie; h < (k + 1) * tie; ++h) mean_abs[h * hdv + d] = static_cast<float>(sum / tie);
        }
    }
    std::vector<float> s(static_cast<size_t>(n_in), 1.f);
    if (tie > 0) {
      std::vector<AwqMatrix> am;
      for (const char* m : awq) {
        F32Tensor* t = get(name(m));
        if (t->n_in != n_in)
          return Status::errorf("tensor '{}': rows of {} for inputs of {}", name(m), t->n_in, n_in);
        am.push_back({t->v.data(), t->n_out, awq_entry(name(m))->target});
      }
      auto r = awq_search_scales(g->samples.data(), g->n_samples(), n_in, mean_abs.data(), mean_sq.data(), am,
                                 o_.search, be_, pool_);
      if (!r) return r.status().with_context(fmt::format("block {} {}", l_, gname));
      if (report_) report_->push_back({fmt::format("blk.{}.{}", l_, gname), r->alpha, r->error, r->error_plain});
      if (r->alpha != 0.f) {
        s = std::move(r->scales);
        for (const char* m : mats)
          if (F32Tensor* t = get(name(m))) {
            for (int64_t row = 0; row < t->n_out; ++row)
              for (int64_t j = 0; j < n_in; ++j) t->v[row * n_in + j] *= s[j];
            t->changed = true;
          }
        EMBER_RETURN_IF_ERROR(fold_prev(s));
      }
    }
    std::vector<float> xs;  // the sample rows as the scaled matrices see them: x / s
    for (const char* m : awq) {
      QuantPlanEntry* e = awq_entry(name(m));
      std::vector<float>* imp = nullptr;
      if (o_.search.imatrix_rounding) {
        imp = &(*importance_)[e->name];
        imp->resize(static_cast<size_t>(n_in));
        for (int64_t j = 0; j < n_in; ++j) (*imp)[j] = mean_sq[j] / (s[j] * s[j]);
      }
      const bool qk = std::strcmp(m, "attn_q") == 0 || std::strcmp(m, "attn_k") == 0;
      if (o_.search.clip && !qk && g->n_samples() > 0) {
        if (xs.empty()) {
          xs = g->samples;
          for (size_t i = 0; i < xs.size(); ++i) xs[i] /= s[i % static_cast<size_t>(n_in)];
        }
        F32Tensor* t = get(name(m));
        auto c = awq_clip_search(t->v.data(), t->n_out, n_in, e->target, xs.data(), g->n_samples(),
                                 imp ? imp->data() : nullptr, o_.search.clip_grid, o_.search.clip_max_shrink, pool_);
        if (!c) return c.status().with_context(fmt::format("block {} {} clipping", l_, m));
        if (c->clipped > 0) t->changed = true;
        if (report_) {
          AwqGroupReport r;
          r.group = fmt::format("blk.{}.{}", l_, m);
          r.clip = true;
          r.error = c->error, r.error_plain = c->error_plain;
          r.blocks = c->blocks, r.clipped = c->clipped;
          report_->push_back(r);
        }
      }
      done_.push_back(e);
    }
    return Status::ok();
  }

  // The changed tensors into the file (f32) and their entries re-planned.
  Status store() {
    for (auto& [n, f] : t_) {
      if (!f.changed) continue;
      replace_with_f32(cur_, n, std::move(f.v));
      auto it = entries_->find(n);
      if (it == entries_->end()) return Status::errorf("tensor '{}' is not in the plan", n);
      QuantPlanEntry* e = it->second;
      e->source = DType::kF32;
      if (e->method != QuantMethod::kAwq) e->method = method_from_f32(e->target);
    }
    for (QuantPlanEntry* e : done_) e->method = o_.search.imatrix_rounding ? QuantMethod::kImatrix : QuantMethod::kRtn;
    return Status::ok();
  }

  int l_;
  const ModelConfig& cfg_;
  ModelFile* cur_;
  std::map<std::string, QuantPlanEntry*>* entries_;
  const AwqRunOptions& o_;
  Backend& be_;
  ThreadPool& pool_;
  std::map<std::string, std::vector<float>>* importance_;
  std::vector<AwqGroupReport>* report_;
  std::map<std::string, F32Tensor> t_;
  std::vector<QuantPlanEntry*> done_;
};

// AWQ as a LayerwiseCallback: an AwqCollector per block with AWQ entries
// (the folds keep the function, so the observe pass advances too), then a
// LayerFolder over the current file.
class AwqLayers final : public LayerwiseCallback {
 public:
  AwqLayers(const AwqContext& c, const std::map<int, int>& per_layer, int64_t W, int64_t stride)
      : c_(c), per_layer_(per_layer), W_(W), stride_(stride) {}

  bool preserves_function() const override { return true; }
  ForwardObserver* observer(int layer) override {
    if (!per_layer_.count(layer)) return nullptr;
    col_ = std::make_unique<AwqCollector>(layer, W_, stride_, c_.o.search_tokens);
    return col_.get();
  }
  void on_window(int, int64_t window) override { col_->set_chunk(window); }
  Status transform(int layer, ModelFile* current) override {
    LayerFolder f(layer, current, c_);
    Status st = f.run(*col_);
    col_.reset();
    return st;
  }

 private:
  const AwqContext& c_;
  const std::map<int, int>& per_layer_;
  int64_t W_, stride_;
  std::unique_ptr<AwqCollector> col_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> run_awq(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                           const std::vector<int32_t>& tokens, const AwqRunOptions& o,
                                           ThreadPool& pool, std::map<std::string, std::vector<float>>* importance,
                                           std::vector<AwqGroupReport>* report) {
  const int64_t W = o.chunk_size;
  if (W < 2 || W > 512) return Status::errorf("AWQ calibration chunk size {} is not in [2, 512]", W);
  if (o.search_tokens < 1) return Status::error("AWQ needs at least one search token");
  const int64_t n_chunks = static_cast<int64_t>(tokens.size()) / W;
  if (n_chunks < 1) return Status::errorf("AWQ calibration needs at least {} tokens, got {}", W, tokens.size());
  if (src->metadata.get_string("ember.hf.dir"))
    return Status::error("AWQ of a Hugging Face checkpoint is not supported; convert it to GGUF first");
  if (o.search.imatrix_rounding && !importance) return Status::error("AWQ imatrix rounding needs an importance map");
  static const char* const kRoles[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  std::map<std::string, QuantPlanEntry*> entries;
  std::map<int, int> awq_per_layer;
  for (QuantPlanEntry& e : plan->entries) {
    entries[e.name] = &e;
    if (e.method != QuantMethod::kAwq) continue;
    if (e.layer < 0) return Status::errorf("tensor '{}': AWQ runs only on the matrices of the blocks", e.name);
    if (!awq_can_round(e.target, o.search.imatrix_rounding))
      return Status::errorf("tensor '{}': AWQ cannot round to {}", e.name, dtype_name(e.target));
    if (e.transform != TensorTransform::kNone)
      return Status::errorf("tensor '{}': AWQ of a permuted (Hugging Face) tensor is not supported", e.name);
    if (e.n_matrices() > 1 || is_moe_role(e.role))
      return Status::errorf("tensor '{}': AWQ does not fold scales into Mixture-of-Experts layers yet (use --method "
                            "imatrix or gptq, which calibrate each expert on its routed tokens)",
                            e.name);
    bool known = false;
    for (const char* r : kRoles) known |= e.name == fmt::format("blk.{}.{}.weight", e.layer, r);
    if (!known) return Status::errorf("tensor '{}': AWQ does not know where its input comes from", e.name);
    ++awq_per_layer[e.layer];
  }
  ModelConfig cfg;
  {
    auto base = Model::from_file(std::make_unique<ModelFile>(*src));
    if (!base) return base.status();
    cfg = (*base)->config();
  }
  const int64_t stride = std::max<int64_t>(1, n_chunks * W / o.search_tokens);
  int last = -1;
  for (const auto& [l, n] : awq_per_layer) last = l;
  std::unique_ptr<Backend> backend = make_cpu_backend(pool);
  const AwqContext ctx{cfg, &entries, o, *backend, pool, importance, report};
  AwqLayers cb(ctx, awq_per_layer, W, stride);
  LayerwiseOptions lo;
  lo.window = W;
  lo.bos_id = o.bos_id;
  lo.n_layers = last + 1;
  lo.progress = o.progress;
  lo.what = "AWQ calibration";
  return run_layerwise(std::move(src), tokens, lo, cb, pool);
}

}  // namespace ember
