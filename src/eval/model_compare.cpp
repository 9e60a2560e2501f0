// Model-vs-reference comparison (KL divergence, top-1, perplexity); see
// model_compare.h.
#include "eval/model_compare.h"

#include <algorithm>
#include <cmath>

#include "kernels/hadamard.h"
#include "model/kv_cache.h"

namespace ember {
namespace {

// log-sum-exp of a row, in double.
double log_sum_exp(const float* x, int n) {
  double m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

double percentile_99(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// The statistics of one scored position: reference row r, model row q,
// the token that follows.
struct RowScore {
  double kl = 0, kl_reverse = 0, nll_r = 0, nll_m = 0;
  double lost = 0;           // reference mass on tokens the model cannot produce
  bool agree = false;
  bool unreachable = false;  // the model cannot produce the next token
};

// Tokens whose model logit is -inf (a trimmed output vocabulary) are outside
// the model's support: the KL is then that of the reference renormalized
// over the support, KL(P~ || Q) = sum_S P_i (lp_i - lq_i) / (1 - lost)
// - log(1 - lost), and `lost` says how much reference mass fell outside.
RowScore score_row(const float* r, const float* q, int32_t next, int n_vocab) {
  const double lse_r = log_sum_exp(r, n_vocab), lse_q = log_sum_exp(q, n_vocab);
  double kl = 0, lost = 0, kl_reverse = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const double lp = r[i] - lse_r;
    if (q[i] == -INFINITY) {
      lost += std::exp(lp);
      continue;
    }
    const double lq = q[i] - lse_q;
    kl += std::exp(lp) * (lp - lq);
  }
  if (lost > 0) {
    kl = lost < 1 ? kl / (1 - lost) - std::log1p(-lost) : 0.0;
    for (int i = 0; i < n_vocab; ++i)  // KL(Q || P) over the support (rows of a trimmed vocabulary only)
      if (q[i] != -INFINITY) {
        const double lq = q[i] - lse_q;
        kl_reverse += std::exp(lq) * (lq - (r[i] - lse_r));
      }
  }
  RowScore row;
  row.lost = lost;
  row.unreachable = q[next] == -INFINITY;
  row.kl = std::max(kl, 0.0);  // rounding can leave -1e-17 for identical rows
  row.kl_reverse = std::max(kl_reverse, 0.0);
  row.agree = (std::max_element(r, r + n_vocab) - r) == (std::max_element(q, q + n_vocab) - q);
  row.nll_r = -(r[next] - lse_r);
  row.nll_m = -(q[next] - lse_q);
  return row;
}

// Running sums of one side-by-side comparison over scored positions.
struct Tally {
  std::vector<double> kls;
  double nll_r = 0, nll_m = 0, agree = 0, kl_max = 0, lost = 0, kl_reverse = 0;
  int64_t unreachable = 0;

  void add(const RowScore& row) {
    kls.push_back(row.kl);
    kl_max = std::max(kl_max, row.kl);
    agree += row.agree;
    lost += row.lost;
    kl_reverse += row.kl_reverse;
    if (row.unreachable) {  // left out of both perplexities
      ++unreachable;
      return;
    }
    nll_r += row.nll_r;
    nll_m += row.nll_m;
  }

  ModelComparison result() {
    ModelComparison c;
    const int64_t n = static_cast<int64_t>(kls.size());
    c.n_positions = n;
    double kl_sum = 0;
    for (double k : kls) kl_sum += k;
    const double m = static_cast<double>(n);
    c.kl_mean = kl_sum / m;
    c.kl_max = kl_max;
    c.kl_p99 = percentile_99(std::move(kls));
    c.top1_agreement = agree / m;
    const double reachable = static_cast<double>(n - unreachable);
    c.ppl_reference = std::exp(nll_r / reachable);
    c.ppl_model = std::exp(nll_m / reachable);
    c.lost_mass = lost / m;
    c.kl_reverse_mean = kl_reverse / m;
    c.n_unreachable = unreachable;
    return c;
  }
};

// Scores rows [0, n_rows) of both logits blocks (row r predicts next[r]),
// rows in parallel, added to the tally in row order (the sums do not depend
// on the thread count).
// rows[p * stride] = the score of row p.
void score_rows_to(const float* reference, const float* model, const int32_t* next, int64_t n_rows, int n_vocab,
                   ThreadPool& pool, RowScore* rows, int64_t stride) {
  pool.parallel_for(n_rows, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t p = b; p < e; ++p)
      rows[p * stride] = score_row(reference + p * n_vocab, model + p * n_vocab, next[p], n_vocab);
  });
}

void score_rows(const float* reference, const float* model, const int32_t* next, int64_t n_rows, int n_vocab,
                ThreadPool& pool, Tally* t) {
  std::vector<RowScore> rows(static_cast<size_t>(n_rows));
  score_rows_to(reference, model, next, n_rows, n_vocab, pool, rows.data(), 1);
  for (const RowScore& row : rows) t->add(row);
}

Status check_pair(const Model& reference, const Model& model, const std::vector<int32_t>& tokens, int64_t n) {
  const int V = reference.config().n_vocab;
  if (model.config().n_vocab != V)
    return Status::errorf("vocabularies differ ({} vs {} tokens)", V, model.config().n_vocab);
  for (int32_t t : tokens)
    if (t < 0 || t >= V) return Status::errorf("token id {} outside the vocabulary", t);
  for (const Model* m : {&reference, &model})
    if (n > m->config().n_ctx_train && m->config().n_ctx_train > 0)
      return Status::errorf("{} tokens exceed the model's context ({})", n, m->config().n_ctx_train);
  return Status::ok();
}

Status check_rotation(KvTypes t, const ModelConfig& cfg) {
  if (t.rot_k == KvRotation::kHadamard) EMBER_RETURN_IF_ERROR(hadamard_check(cfg.head_dim));
  if (t.rot_v == KvRotation::kHadamard) EMBER_RETURN_IF_ERROR(hadamard_check(cfg.head_dim_v));
  return Status::ok();
}

// WindowedCompareOptions::concurrency: groups of B windows, each group one
// lockstep decode per side (one token of every window per step).
Result<std::vector<ModelComparison>> compare_lockstep(const std::vector<std::pair<const Model*, KvTypes>>& sides,
                                                      const std::vector<int32_t>& tokens,
                                                      const WindowedCompareOptions& o, int64_t n_win, int V,
                                                      ThreadPool& pool) {
  const int64_t W = o.n_ctx;
  const int B = o.concurrency;
  std::vector<std::unique_ptr<ForwardContext>> ctx;
  for (const auto& [m, t] : sides) ctx.push_back(std::make_unique<ForwardContext>(*m, pool, std::max(64, B)));
  std::vector<Tally> tally(sides.size() - 1);
  std::vector<float> lr(static_cast<size_t>(B) * V), lm(static_cast<size_t>(B) * V);
  std::vector<int32_t> next(static_cast<size_t>(B));
  for (int64_t w0 = 0; w0 < n_win; w0 += B) {
    const int nb = static_cast<int>(std::min<int64_t>(B, n_win - w0));
    std::vector<std::vector<int32_t>> seq(static_cast<size_t>(nb));
    for (int b = 0; b < nb; ++b) {
      seq[b].assign(tokens.begin() + (w0 + b) * W, tokens.begin() + (w0 + b + 1) * W);
      if (o.bos_id >= 0) seq[b][0] = o.bos_id;
    }
    std::vector<std::vector<std::unique_ptr<ContiguousKvCache>>> cache(sides.size());
    for (size_t s = 0; s < sides.size(); ++s)
      for (int b = 0; b < nb; ++b)
        cache[s].push_back(std::make_unique<ContiguousKvCache>(sides[s].first->config(), W, sides[s].second));
    std::vector<SeqBatch> batch(static_cast<size_t>(nb));
    // Scores [side][window][position], tallied window by window at the end:
    // the chunked run's order of summation, so exact routing gives its bits.
    std::vector<std::vector<RowScore>> rows(sides.size() - 1, std::vector<RowScore>(static_cast<size_t>(nb * W)));
    for (int64_t p = 0; p < W; ++p) {
      const bool scored = p >= o.score_from && p < W - 1;  // the last position predicts nothing
      for (int b = 0; b < nb; ++b) next[b] = scored ? seq[b][p + 1] : 0;
      for (size_t s = 0; s < sides.size(); ++s) {
        for (int b = 0; b < nb; ++b)
          batch[b] = SeqBatch{.tokens = seq[b].data() + p, .n = 1, .pos0 = p, .cache = cache[s][b].get(),
                              .want_logits = scored};
        EMBER_RETURN_IF_ERROR(ctx[s]->forward_ragged(batch.data(), nb, s == 0 ? lr.data() : lm.data()));
        if (scored && s > 0) score_rows_to(lr.data(), lm.data(), next.data(), nb, V, pool, &rows[s - 1][p], W);
      }
    }
    for (size_t s = 0; s < rows.size(); ++s)
      for (int b = 0; b < nb; ++b)
        for (int64_t p = std::max<int64_t>(o.score_from, 0); p < W - 1; ++p) tally[s].add(rows[s][b * W + p]);
  }
  std::vector<ModelComparison> out;
  for (size_t s = 0; s < tally.size(); ++s) {
    out.push_back(tally[s].result());
    out.back().experts_per_step_reference = ctx[0]->moe_stats().experts_per_layer_step();
    out.back().experts_per_step_model = ctx[s + 1]->moe_stats().experts_per_layer_step();
  }
  return out;
}

}  // namespace

ModelComparison compare_logits(const float* reference, const float* model, const int32_t* tokens, int64_t n,
                               int n_vocab) {
  Tally t;
  for (int64_t p = 0; p + 1 < n; ++p)
    t.add(score_row(reference + p * n_vocab, model + p * n_vocab, tokens[p + 1], n_vocab));
  return t.result();
}

Result<std::vector<ModelComparison>> compare_models_windows(const Model& reference, const Model& model,
                                                            const std::vector<int32_t>& tokens,
                                                            const WindowedCompareOptions& o,
                                                            const std::vector<KvTypes>& model_kvs, ThreadPool& pool) {
  const int64_t W = o.n_ctx;
  if (W < 2 || W > 4096) return Status::errorf("window of {} positions: need 2 to 4096", W);
  if (o.score_from < 0 || o.score_from >= W - 1)
    return Status::errorf("first scored position {}: need 0 to {}", o.score_from, W - 2);
  if (o.chunk < 1) return Status::errorf("chunk of {} positions: need >= 1", o.chunk);
  if (model_kvs.empty()) return Status::error("no KV format of the model to compare");
  int64_t n_win = static_cast<int64_t>(tokens.size()) / W;
  if (o.max_windows > 0) n_win = std::min(n_win, o.max_windows);
  if (n_win < 1) return Status::errorf("need at least {} tokens (one window), got {}", W, tokens.size());
  EMBER_RETURN_IF_ERROR(check_pair(reference, model, tokens, W));
  const int V = reference.config().n_vocab;
  std::vector<std::pair<const Model*, KvTypes>> sides{{&reference, o.reference_kv}};
  for (const KvTypes& t : model_kvs) sides.emplace_back(&model, t);
  std::vector<std::unique_ptr<ForwardContext>> ctx;
  std::vector<std::unique_ptr<ContiguousKvCache>> cache;
  for (const auto& [m, t] : sides) {
    EMBER_RETURN_IF_ERROR(kv_type_check(t.k, m->config().head_dim));
    EMBER_RETURN_IF_ERROR(kv_type_check(t.v, m->config().head_dim_v));
    EMBER_RETURN_IF_ERROR(check_rotation(t, m->config()));
    ctx.push_back(std::make_unique<ForwardContext>(*m, pool, 64));
    cache.push_back(std::make_unique<ContiguousKvCache>(m->config(), W, t));
  }
  if (o.concurrency < 0 || o.concurrency > 512)
    return Status::errorf("concurrency {}: need 0 to 512", o.concurrency);
  if (o.concurrency > 0) return compare_lockstep(sides, tokens, o, n_win, V, pool);
  const int64_t C = std::min(o.chunk, W);
  std::vector<float> lr(static_cast<size_t>(C) * V), lm(static_cast<size_t>(C) * V);
  std::vector<Tally> tally(model_kvs.size());
  for (int64_t w = 0; w < n_win; ++w) {
    std::vector<int32_t> seq(tokens.begin() + w * W, tokens.begin() + (w + 1) * W);
    if (o.bos_id >= 0) seq[0] = o.bos_id;
    // Context-only chunks [0, score_from), then scored ones [score_from, W).
    for (int64_t c0 = 0; c0 < W;) {
      const bool scored = c0 >= o.score_from;
      const int64_t c1 = std::min(c0 + C, scored ? W : o.score_from);
      const int64_t n = c1 - c0;
      for (size_t s = 0; s < sides.size(); ++s) {
        float* logits = !scored ? nullptr : s == 0 ? lr.data() : lm.data();
        EMBER_RETURN_IF_ERROR(ctx[s]->forward(seq.data() + c0, n, c0, *cache[s], nullptr, logits));
        if (scored && s > 0)  // row r predicts seq[c0 + r + 1]; the window's last row predicts nothing
          score_rows(lr.data(), lm.data(), seq.data() + c0 + 1, std::min(n, W - 1 - c0), V, pool, &tally[s - 1]);
      }
      c0 = c1;
    }
  }
  std::vector<ModelComparison> out;
  for (Tally& t : tally) out.push_back(t.result());
  const double ref_experts = ctx[0]->moe_stats().experts_per_layer_step();
  for (size_t s = 0; s < out.size(); ++s) {
    out[s].experts_per_step_reference = ref_experts;
    out[s].experts_per_step_model = ctx[s + 1]->moe_stats().experts_per_layer_step();
  }
  return out;
}

Result<ModelComparison> compare_models_windows(const Model& reference, const Model& model,
                                               const std::vector<int32_t>& tokens, const WindowedCompareOptions& o,
                                               ThreadPool& pool) {
  auto r = compare_models_windows(reference, model, tokens, o, {o.model_kv}, pool);
  if (!r) return r.status();
  return r->front();
}

Result<ModelComparison> compare_models(const Model& reference, const Model& model, const std::vector<int32_t>& tokens,
                                       ThreadPool& pool) {
  const int V = reference.config().n_vocab;
  if (model.config().n_vocab != V)
    return Status::errorf("vocabularies differ ({} vs {} tokens)", V, model.config().n_vocab);
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 || n > 4096) return Status::errorf("need 2 to 4096 tokens to compare, got {}", n);
  for (int32_t t : tokens)
    if (t < 0 || t >= V) return Status::errorf("token id {} outside the vocabulary", t);
  std::vector<float> logits[2];
  const Model* models[2] = {&reference, &model};
  for (int k = 0; k < 2; ++k) {
    const Model& m = *models[k];
    if (n > m.config().n_ctx_train && m.config().n_ctx_train > 0)
      return Status::errorf("{} tokens exceed the model's context ({})", n, m.config().n_ctx_train);
    ForwardContext ctx(m, pool, 64);
    ContiguousKvCache cache(m.config(), n);
    logits[k].resize(static_cast<size_t>(n) * V);
    EMBER_RETURN_IF_ERROR(ctx.forward(tokens.data(), n, 0, cache, nullptr, logits[k].data()));
  }
  return compare_logits(logits[0].data(), logits[1].data(), tokens.data(), n, V);
}

}  // namespace ember
