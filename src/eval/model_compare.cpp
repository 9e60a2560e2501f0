// Model-vs-reference comparison (KL divergence, top-1, perplexity); see
// model_compare.h.
#include "eval/model_compare.h"

#include <algorithm>
#include <cmath>

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

// Statistics of one window plus its per-position KL values (appended).
ModelComparison compare_window(const float* reference, const float* model, const int32_t* tokens, int64_t n,
                               int n_vocab, std::vector<double>* kls) {
  ModelComparison c;
  c.n_positions = n - 1;
  double nll_ref = 0, nll_model = 0, kl_sum = 0;
  int64_t agree = 0;
  for (int64_t p = 0; p + 1 < n; ++p) {
    const float* r = reference + p * n_vocab;
    const float* q = model + p * n_vocab;
    const double lse_r = log_sum_exp(r, n_vocab), lse_q = log_sum_exp(q, n_vocab);
    double kl = 0;
    for (int i = 0; i < n_vocab; ++i) {
      const double lp = r[i] - lse_r, lq = q[i] - lse_q;
      kl += std::exp(lp) * (lp - lq);
    }
    kl = std::max(kl, 0.0);  // rounding can leave -1e-17 for identical rows
    kl_sum += kl;
    kls->push_back(kl);
    c.kl_max = std::max(c.kl_max, kl);
    agree += (std::max_element(r, r + n_vocab) - r) == (std::max_element(q, q + n_vocab) - q);
    const int32_t next = tokens[p + 1];
    nll_ref -= r[next] - lse_r;
    nll_model -= q[next] - lse_q;
  }
  const double m = static_cast<double>(c.n_positions);
  c.kl_mean = kl_sum / m;
  c.top1_agreement = static_cast<double>(agree) / m;
  c.ppl_reference = std::exp(nll_ref / m);
  c.ppl_model = std::exp(nll_model / m);
  return c;
}

double percentile_99(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
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

}  // namespace

ModelComparison compare_logits(const float* reference, const float* model, const int32_t* tokens, int64_t n,
                               int n_vocab) {
  std::vector<double> kls;
  ModelComparison c = compare_window(reference, model, tokens, n, n_vocab, &kls);
  c.kl_p99 = percentile_99(std::move(kls));
  return c;
}

Result<ModelComparison> compare_models_windows(const Model& reference, const Model& model,
                                               const std::vector<int32_t>& tokens, const WindowedCompareOptions& o,
                                               ThreadPool& pool) {
  const int64_t W = o.n_ctx;
  if (W < 2 || W > 4096) return Status::errorf("window of {} positions: need 2 to 4096", W);
  int64_t n_win = static_cast<int64_t>(tokens.size()) / W;
  if (o.max_windows > 0) n_win = std::min(n_win, o.max_windows);
  if (n_win < 1) return Status::errorf("need at least {} tokens (one window), got {}", W, tokens.size());
  EMBER_RETURN_IF_ERROR(check_pair(reference, model, tokens, W));
  const int V = reference.config().n_vocab;
  ForwardContext ctx_r(reference, pool, 64), ctx_m(model, pool, 64);
  for (const auto& [m, t] : {std::pair{&reference, o.reference_kv}, std::pair{&model, o.model_kv}}) {
    EMBER_RETURN_IF_ERROR(kv_type_check(t.k, m->config().head_dim));
    EMBER_RETURN_IF_ERROR(kv_type_check(t.v, m->config().head_dim_v));
  }
  ContiguousKvCache cache_r(reference.config(), W, o.reference_kv), cache_m(model.config(), W, o.model_kv);
  std::vector<float> lr(static_cast<size_t>(W) * V), lm(static_cast<size_t>(W) * V), last(V);
  std::vector<double> kls;
  double nll_r = 0, nll_m = 0, agree = 0, kl_max = 0;
  int64_t n_pos = 0;
  for (int64_t w = 0; w < n_win; ++w) {
    std::vector<int32_t> seq(tokens.begin() + w * W, tokens.begin() + (w + 1) * W);
    if (o.bos_id >= 0) seq[0] = o.bos_id;
    EMBER_RETURN_IF_ERROR(ctx_r.forward(seq.data(), W, 0, cache_r, last.data(), lr.data()));
    EMBER_RETURN_IF_ERROR(ctx_m.forward(seq.data(), W, 0, cache_m, last.data(), lm.data()));
    const ModelComparison c = compare_window(lr.data(), lm.data(), seq.data(), W, V, &kls);
    const double np = static_cast<double>(c.n_positions);
    nll_r += std::log(c.ppl_reference) * np;
    nll_m += std::log(c.ppl_model) * np;
    agree += c.top1_agreement * np;
    kl_max = std::max(kl_max, c.kl_max);
    n_pos += c.n_positions;
  }
  ModelComparison c;
  c.n_positions = n_pos;
  double kl_sum = 0;
  for (double k : kls) kl_sum += k;
  c.kl_mean = kl_sum / static_cast<double>(n_pos);
  c.kl_max = kl_max;
  c.kl_p99 = percentile_99(std::move(kls));
  c.top1_agreement = agree / static_cast<double>(n_pos);
  c.ppl_reference = std::exp(nll_r / static_cast<double>(n_pos));
  c.ppl_model = std::exp(nll_m / static_cast<double>(n_pos));
  return c;
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
