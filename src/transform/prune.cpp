// Unstructured and N:M pruning of the block matrices; see prune.h.
#include "transform/prune.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/dtype_sparse.h"
#include "eval/model_compare.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "transform/gptq_model.h"
#include "transform/imatrix.h"
#include "transform/layerwise.h"
#include "transform/sparsegpt.h"

namespace ember {

std::optional<PruneMethod> prune_method_from_name(std::string_view name) {
  if (name == "magnitude") return PruneMethod::kMagnitude;
  if (name == "wanda") return PruneMethod::kWanda;
  if (name == "sparsegpt") return PruneMethod::kSparseGpt;
  return std::nullopt;
}

const char* prune_method_name(PruneMethod m) {
  switch (m) {
    case PruneMethod::kMagnitude: return "magnitude";
    case PruneMethod::kWanda: return "wanda";
    case PruneMethod::kSparseGpt: return "sparsegpt";
  }
  return "?";
}

std::optional<LayerSparsity> layer_sparsity_from_name(std::string_view name) {
  if (name == "uniform") return LayerSparsity::kUniform;
  if (name == "owl") return LayerSparsity::kOwl;
  if (name == "kl") return LayerSparsity::kKl;
  return std::nullopt;
}

const char* layer_sparsity_name(LayerSparsity l) {
  switch (l) {
    case LayerSparsity::kUniform: return "uniform";
    case LayerSparsity::kOwl: return "owl";
    case LayerSparsity::kKl: return "kl";
  }
  return "?";
}

Result<PrunePattern> parse_prune_pattern(std::string_view s) {
  if (s == "unstructured") return PrunePattern{};
  const size_t colon = s.find(':');
  PrunePattern p;
  auto num = [](std::string_view t, int* v) {
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return ec == std::errc() && end == t.data() + t.size();
  };
  if (colon == std::string_view::npos || !num(s.substr(0, colon), &p.n) || !num(s.substr(colon + 1), &p.m) ||
      !(p.n > 0 && p.n < p.m && p.m <= 64))
    return Status::errorf("pattern '{}' is not 'unstructured' or N:M with 0 < N < M <= 64 (e.g. 2:4, 4:8)", s);
  return p;
}

std::string prune_pattern_name(const PrunePattern& p) {
  return p.unstructured() ? "unstructured" : fmt::format("{}:{}", p.n, p.m);
}

namespace {

// Marks the k smallest of score[0..n) (ties: the lower index) in mask.
void mask_smallest(const std::vector<double>& score, int64_t k, uint8_t* mask) {
  const int64_t n = static_cast<int64_t>(score.size());
  if (k <= 0) return;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto less = [&](int64_t a, int64_t b) { return score[a] != score[b] ? score[a] < score[b] : a < b; };
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), less);
  for (int64_t i = 0; i < std::min(k, n); ++i) mask[order[i]] = 1;
}

// Scores [n_out, n_in] into masks: per matrix (unstructured, per_row false),
// per row, or per N:M group.
void mask_from_scores(const std::vector<double>& score, int64_t n_out, int64_t n_in, double sparsity,
                      const PrunePattern& p, bool per_row, uint8_t* mask) {
  std::fill(mask, mask + n_out * n_in, 0);
  if (!p.unstructured()) {
    std::vector<double> g(static_cast<size_t>(p.m));
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t c0 = 0; c0 + p.m <= n_in; c0 += p.m) {
        std::copy(score.begin() + r * n_in + c0, score.begin() + r * n_in + c0 + p.m, g.begin());
        mask_smallest(g, p.n, mask + r * n_in + c0);
      }
    return;
  }
  if (!per_row) {
    mask_smallest(score, static_cast<int64_t>(sparsity * static_cast<double>(n_out * n_in)), mask);
    return;
  }
  const int64_t k = static_cast<int64_t>(sparsity * static_cast<double>(n_in));
  std::vector<double> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    std::copy(score.begin() + r * n_in, score.begin() + (r + 1) * n_in, row.begin());
    mask_smallest(row, k, mask + r * n_in);
  }
}

}  // namespace

void magnitude_mask(const float* W, int64_t n_out, int64_t n_in, double sparsity, const PrunePattern& p,
                    uint8_t* mask, bool per_row) {
  std::vector<double> score(static_cast<size_t>(n_out * n_in));
  for (size_t i = 0; i < score.size(); ++i) score[i] = std::fabs(static_cast<double>(W[i]));
  mask_from_scores(score, n_out, n_in, sparsity, p, per_row, mask);
}

void wanda_mask(const float* W, int64_t n_out, int64_t n_in, const double* col_sq, double sparsity,
                const PrunePattern& p, uint8_t* mask) {
  std::vector<double> score(static_cast<size_t>(n_out * n_in));
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t c = 0; c < n_in; ++c)
      score[r * n_in + c] = std::fabs(static_cast<double>(W[r * n_in + c])) * std::sqrt(col_sq[c]);
  mask_from_scores(score, n_out, n_in, sparsity, p, true, mask);
}

double owl_outlier_ratio(const std::vector<OwlMatrix>& block, double m) {
  double sum = 0;
  int64_t n = 0;
  for (const OwlMatrix& x : block)
    for (int64_t r = 0; r < x.n_out; ++r)
      for (int64_t c = 0; c < x.n_in; ++c) sum += std::fabs(x.W[r * x.n_in + c]) * std::sqrt(x.col_sq[c]);
  for (const OwlMatrix& x : block) n += x.n_out * x.n_in;
  if (n == 0) return 0;
  const double thresh = m * sum / static_cast<double>(n);
  int64_t out = 0;
  for (const OwlMatrix& x : block)
    for (int64_t r = 0; r < x.n_out; ++r)
      for (int64_t c = 0; c < x.n_in; ++c) out += std::fabs(x.W[r * x.n_in + c]) * std::sqrt(x.col_sq[c]) > thresh;
  return static_cast<double>(out) / static_cast<double>(n);
}

std::vector<double> owl_layer_sparsity(const std::vector<double>& ratio, double sparsity, double lambda) {
  std::vector<double> s(ratio.size(), sparsity);
  if (ratio.empty()) return s;
  const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
  if (!(*hi > *lo)) return s;
  std::vector<double> d(ratio.size());
  double mean = 0;
  for (size_t i = 0; i < ratio.size(); ++i) mean += d[i] = (ratio[i] - *lo) / (*hi - *lo) * 2 * lambda;
  mean /= static_cast<double>(ratio.size());
  for (size_t i = 0; i < ratio.size(); ++i) s[i] = 1.0 - (d[i] - mean + (1.0 - sparsity));
  return s;
}

namespace {

constexpr const char* kRoles[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

bool is_block_matrix(const QuantPlanEntry& e) {
  if (e.layer < 0 || e.ne.size() != 2) return false;
  for (const char* r : kRoles)
    if (e.name == fmt::format("blk.{}.{}.weight", e.layer, r)) return true;
  return false;
}

// Statistics of one block (sum of squares per input column; Hessians when
// a matrix needs them), then its matrices pruned into the current file.
class PruneLayers final : public LayerwiseCallback {
 public:
  PruneLayers(std::map<int, std::vector<QuantPlanEntry*>> by_layer, const std::vector<double>& layer_sparsity,
              const PruneOptions& o, bool hessians, ThreadPool& pool, PruneReport* rep)
      : by_layer_(std::move(by_layer)), s_(layer_sparsity), o_(o), hessians_(hessians), pool_(pool), rep_(rep) {}

  ForwardObserver* observer(int layer) override {
    if (!by_layer_.count(layer)) return nullptr;
    if (hessians_) {
      hc_ = std::make_unique<HessianCollector>(layer, pool_);
      return hc_.get();
    }
    ic_ = std::make_unique<ImportanceCollector>(false, false);
    return ic_.get();
  }

  std::vector<QuantPlanEntry*> entries(int layer) const {
    auto it = by_layer_.find(layer);
    return it == by_layer_.end() ? std::vector<QuantPlanEntry*>{} : it->second;
  }

  Status transform(int layer, ModelFile* file) override {
    for (QuantPlanEntry* e : by_layer_.at(layer)) EMBER_RETURN_IF_ERROR(prune_one(layer, *e, file));
    hc_.reset();
    ic_.reset();
    return Status::ok();
  }

  // One matrix with its statistics (null: magnitude without calibration).
  Status prune_one(int layer, QuantPlanEntry& e, ModelFile* file) {
    const TensorView& t = *file->tensor(e.name);
    const int64_t n_in = t.ne[0], n_out = t.nrows();
    std::vector<float> w = read_f32_rows(t);
    const std::vector<double>* H = nullptr;
    std::vector<double> col_sq;
    if (hc_) {
      H = hc_->hessian(e.name);
      if (!H) return Status::errorf("tensor '{}': no calibration input reached it", e.name);
      for (int64_t c = 0; c < n_in; ++c) col_sq.push_back((*H)[c * n_in + c]);
    } else if (ic_) {
      auto it = ic_->result().entries.find(e.name);
      if (it == ic_->result().entries.end()) return Status::errorf("tensor '{}': no calibration input reached it", e.name);
      col_sq = it->second.sums;
    }
    if (!col_sq.empty() && static_cast<int64_t>(col_sq.size()) != n_in)
      return Status::errorf("tensor '{}': statistics of {} columns for rows of {}", e.name, col_sq.size(), n_in);
    if (!o_.pattern.unstructured() && n_in % o_.pattern.m != 0)
      return Status::errorf("tensor '{}': rows of {} are not a multiple of the N:M group {}", e.name, n_in,
                            o_.pattern.m);
    const double s = o_.pattern.unstructured() ? s_[layer] : o_.pattern.sparsity();
    std::vector<uint8_t> mask(static_cast<size_t>(n_out * n_in), 0);
    const bool joint = e.method == QuantMethod::kGptq;
    if (o_.method == PruneMethod::kMagnitude)
      magnitude_mask(w.data(), n_out, n_in, s, o_.pattern, mask.data(), o_.per_row);
    if (o_.method == PruneMethod::kWanda) wanda_mask(w.data(), n_out, n_in, col_sq.data(), s, o_.pattern, mask.data());
    if (joint || o_.method == PruneMethod::kSparseGpt) {
      SparseGptOptions so;
      so.sparsity = s;
      so.prune_n = o_.pattern.n, so.prune_m = o_.pattern.m;
      so.block_size = o_.block_size;
      so.damp = o_.damp;
      so.per_row = o_.per_row;
      const bool select = o_.method == PruneMethod::kSparseGpt;
      const DType type = joint ? e.target : DType::kF32;
      const size_t bytes = joint ? dtype_row_size(type, n_in) * n_out : 0;
      auto buf = joint ? std::shared_ptr<uint8_t[]>(new uint8_t[bytes]) : nullptr;
      std::vector<uint8_t> fixed = mask;
      Status st = sparsegpt_prune(w.data(), n_out, n_in, H->data(), so, select ? nullptr : fixed.data(), type,
                                  buf.get(), mask.data(), pool_);
      if (!st) return st.with_context(e.name);
      if (joint) {
        replace_tensor(file, e.name, type, std::move(buf), bytes);
        e.source = type;
        e.method = QuantMethod::kCopy;
        ++rep_->joint;
      }
    } else {
      for (size_t i = 0; i < w.size(); ++i)
        if (mask[i]) w[i] = 0.0f;
    }
    if (!joint) {
      replace_with_f32(file, e.name, std::move(w));
      e.source = DType::kF32;
      // A sparse source kept by keep_source_types: its dense export type
      // (`--format sparse` stores it sparse again).
      e.target = dtype_sparse_dense(e.target);
      if (e.method == QuantMethod::kCopy) e.method = method_from_f32(e.target);
    }
    for (uint8_t m : mask) rep_->pruned += m;
    rep_->weights += n_out * n_in;
    ++rep_->matrices;
    return Status::ok();
  }

 private:
  std::map<int, std::vector<QuantPlanEntry*>> by_layer_;
  const std::vector<double>& s_;
  const PruneOptions& o_;
  bool hessians_;
  ThreadPool& pool_;
  PruneReport* rep_;
  std::unique_ptr<HessianCollector> hc_;
  std::unique_ptr<ImportanceCollector> ic_;
};


// The `kl` layer rule's probe: per block l, the mean KL(dense || the model
// with only block l's matrices pruned at `sparsity` by Wanda's masks of the
// dense statistics `im`) over the first o.kl_windows windows of tokens.
// Block l's input is the dense model's (saved once), so each probe runs
// blocks l..L-1; the head runs once per window for the dense rows.
Result<std::vector<double>> block_prune_kl(const Model& base, const ModelFile& src, const Imatrix& im,
                                           const std::map<int, std::vector<QuantPlanEntry*>>& by_layer,
                                           const std::vector<int32_t>& tokens, double sparsity, const PruneOptions& o,
                                           ThreadPool& pool) {
  const ModelConfig& cfg = base.config();
  const int64_t W = o.window, E = cfg.n_embd, L = cfg.n_layer;
  const int64_t n_win = std::min<int64_t>(std::max(o.kl_windows, 1), static_cast<int64_t>(tokens.size()) / W);
  if (n_win < 1) return Status::errorf("the kl layer rule needs at least {} calibration tokens, got {}", W, tokens.size());
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::vector<float>> h0;
  std::vector<float> dense_in(static_cast<size_t>(n_win * L * W * E)), dense_out(static_cast<size_t>(n_win * W * E));
  std::vector<float> pruned_out(static_cast<size_t>(L * n_win * W * E));
  ContiguousKvCache cache(cfg, W);
  ForwardContext ctx(base, pool, static_cast<int>(W));
  EMBER_RETURN_IF_ERROR(embed_calibration_windows(ctx, cfg, tokens, n_win, W, o.bos_id, &cache, &seqs, &h0));
  for (int64_t c = 0; c < n_win; ++c) {
    EMBER_RETURN_IF_ERROR(run_window_layers(ctx, seqs[c], h0[c].data(), E, 0, 0, &cache));
    for (int64_t l = 0; l < L; ++l) {
      std::memcpy(dense_in.data() + (c * L + l) * W * E, ctx.hidden(), W * E * sizeof(float));
      ctx.run_layers(static_cast<int>(l), static_cast<int>(l) + 1);
    }
    std::memcpy(dense_out.data() + c * W * E, ctx.hidden(), W * E * sizeof(float));
  }
  EMBER_RETURN_IF_ERROR(ctx.finish());
  for (int64_t l = 0; l < L; ++l) {
    auto f = std::make_unique<ModelFile>(src);
    auto it = by_layer.find(static_cast<int>(l));
    if (it != by_layer.end())
      for (const QuantPlanEntry* e : it->second) {
        const TensorView& t = *src.tensor(e->name);
        const auto st = im.entries.find(e->name);
        if (st == im.entries.end()) return Status::errorf("tensor '{}': no calibration input reached it", e->name);
        std::vector<float> w = read_f32_rows(t);
        std::vector<uint8_t> mask(w.size(), 0);
        wanda_mask(w.data(), t.nrows(), t.ne[0], st->second.sums.data(), sparsity, PrunePattern{}, mask.data());
        for (size_t i = 0; i < w.size(); ++i)
          if (mask[i]) w[i] = 0.0f;
        replace_with_f32(f.get(), e->name, std::move(w));
      }
    auto m = Model::from_file(std::move(f));
    if (!m) return m.status().with_context(fmt::format("kl layer rule, block {}", l));
    ForwardContext pc(**m, pool, static_cast<int>(W));
    for (int64_t c = 0; c < n_win; ++c) {
      EMBER_RETURN_IF_ERROR(run_window_layers(pc, seqs[c], dense_in.data() + (c * L + l) * W * E, E,
                                              static_cast<int>(l), static_cast<int>(L), &cache));
      std::memcpy(pruned_out.data() + (l * n_win + c) * W * E, pc.hidden(), W * E * sizeof(float));
    }
    EMBER_RETURN_IF_ERROR(pc.finish());
  }
  // The head (not pruned: the dense context's) over rows of 32.
  constexpr int64_t kRows = 32;
  const int V = cfg.n_vocab;
  std::vector<float> ref(static_cast<size_t>(kRows * V)), mod(static_cast<size_t>(kRows * V));
  std::vector<int64_t> rows(kRows);
  std::vector<int32_t> next(kRows + 1, 0);
  std::vector<double> kl(static_cast<size_t>(L), 0.0);
  int64_t n = 0;
  for (int64_t c = 0; c < n_win; ++c) {
    EMBER_RETURN_IF_ERROR(prepare_window(ctx, seqs[c], &cache));
    for (int64_t r0 = 0; r0 < W; r0 += kRows) {
      const int64_t nr = std::min(kRows, W - r0);
      for (int64_t r = 0; r < nr; ++r) rows[r] = r0 + r, next[r + 1] = seqs[c][std::min(W - 1, r0 + r + 1)];
      std::memcpy(ctx.hidden(), dense_out.data() + c * W * E, W * E * sizeof(float));
      ctx.head(rows.data(), nr, ref.data());
      for (int64_t l = 0; l < L; ++l) {
        std::memcpy(ctx.hidden(), pruned_out.data() + (l * n_win + c) * W * E, W * E * sizeof(float));
        ctx.head(rows.data(), nr, mod.data());
        kl[l] += compare_logits(ref.data(), mod.data(), next.data(), nr + 1, V).kl_mean * static_cast<double>(nr);
      }
      n += nr;
    }
  }
  EMBER_RETURN_IF_ERROR(ctx.finish());
  for (double& k : kl) k /= static_cast<double>(n);
  return kl;
}

}  // namespace

Result<std::unique_ptr<ModelFile>> prune_model(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                               const std::vector<int32_t>& tokens, const PruneOptions& o,
                                               ThreadPool& pool, PruneReport* report) {
  if (o.pattern.unstructured() && !(o.sparsity >= 0 && o.sparsity < 1))
    return Status::errorf("sparsity {} is not in [0, 1)", o.sparsity);
  if (!o.pattern.unstructured() && o.layers != LayerSparsity::kUniform)
    return Status::error("OWL and kl set a sparsity per layer; an N:M pattern fixes it (use uniform layer sparsity)");
  if (o.owl_lambda < 0 || o.owl_lambda >= 1 || o.owl_m <= 0) return Status::error("OWL needs 0 <= lambda < 1 and M > 0");
  auto base = Model::from_file(std::make_unique<ModelFile>(*src));
  if (!base) return base.status();
  const int n_layer = (*base)->config().n_layer;
  std::map<int, std::vector<QuantPlanEntry*>> by_layer;
  bool joint = false;
  for (QuantPlanEntry& e : plan->entries) {
    if (!is_block_matrix(e)) {
      if (e.method == QuantMethod::kGptq) return Status::errorf("tensor '{}': GPTQ runs only on the block matrices", e.name);
      continue;
    }
    if (e.method == QuantMethod::kGptq) {
      if (!sparse_quant_supports(e.target))
        return Status::errorf("tensor '{}': pruning with GPTQ needs a type that stores zero exactly (q4_0, q5_0, "
                              "q8_0, q3_K, q6_K), not {}", e.name, dtype_name(e.target));
      if (e.transform != TensorTransform::kNone)
        return Status::errorf("tensor '{}': GPTQ of a permuted (Hugging Face) tensor is not supported; convert it "
                              "to GGUF first", e.name);
      joint = true;
    }
    by_layer[e.layer].push_back(&e);
  }
  PruneReport rep;
  rep.layer_sparsity.assign(static_cast<size_t>(n_layer), o.pattern.unstructured() ? o.sparsity : o.pattern.sparsity());
  if (o.layers != LayerSparsity::kUniform) {  // statistics of the unpruned model
    CalibrationOptions co;
    co.chunk_size = static_cast<int>(o.window);
    co.bos_id = o.bos_id;
    auto im = collect_importance(**base, tokens, co, pool);
    if (!im) return im.status().with_context("layer sparsity statistics");
    if (o.layers == LayerSparsity::kKl) {
      auto kl = block_prune_kl(**base, *src, *im, by_layer, tokens, o.sparsity, o, pool);
      if (!kl) return kl.status();
      rep.block_kl = *kl;
      std::vector<double> score;
      for (double k : rep.block_kl) score.push_back(std::log(std::max(k, 1e-12)));
      rep.layer_sparsity = owl_layer_sparsity(score, o.sparsity, o.owl_lambda);
    }
    for (int l = 0; o.layers == LayerSparsity::kOwl && l < n_layer; ++l) {
      std::vector<std::vector<float>> ws;
      std::vector<OwlMatrix> mats;
      ws.reserve(by_layer[l].size());
      for (QuantPlanEntry* e : by_layer[l]) {
        auto it = im->entries.find(e->name);
        if (it == im->entries.end()) return Status::errorf("tensor '{}': no calibration input reached it", e->name);
        const TensorView& t = *src->tensor(e->name);
        ws.push_back(read_f32_rows(t));
        mats.push_back({ws.back().data(), t.nrows(), t.ne[0], it->second.sums.data()});
      }
      rep.outlier_ratio.push_back(owl_outlier_ratio(mats, o.owl_m));
    }
    if (o.layers == LayerSparsity::kOwl) rep.layer_sparsity = owl_layer_sparsity(rep.outlier_ratio, o.sparsity, o.owl_lambda);
  }
  base.value().reset();
  const bool calibrate = o.method != PruneMethod::kMagnitude || joint;
  PruneLayers cb(std::move(by_layer), rep.layer_sparsity, o, o.method == PruneMethod::kSparseGpt || joint, pool, &rep);
  Result<std::unique_ptr<ModelFile>> out = Status::error("");
  if (calibrate) {
    LayerwiseOptions lo;
    lo.window = o.window;
    lo.bos_id = o.bos_id;
    lo.progress = o.progress;
    lo.what = "pruning calibration";
    out = run_layerwise(std::move(src), tokens, lo, cb, pool);
  } else {  // magnitude: the weights alone
    auto cur = std::make_unique<ModelFile>(*src);
    cur->owners.push_back(std::shared_ptr<ModelFile>(std::move(src)));
    for (int l = 0; l < n_layer; ++l) {
      for (QuantPlanEntry* e : cb.entries(l)) EMBER_RETURN_IF_ERROR(cb.prune_one(l, *e, cur.get()));
      if (o.progress) o.progress(l + 1, n_layer);
    }
    out = std::move(cur);
  }
  if (!out) return out.status();
  if (report) *report = std::move(rep);
  return out;
}

}  // namespace ember
