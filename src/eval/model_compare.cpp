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

}  // namespace

ModelComparison compare_logits(const float* reference, const float* model, const int32_t* tokens, int64_t n,
                               int n_vocab) {
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
