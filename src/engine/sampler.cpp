// Token sampling; see sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/ops.h"

namespace ember {

Status SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.f || temperature > 100.f)
    return Status::errorf("temperature must be in [0, 100], got {}", temperature);
  if (!std::isfinite(top_p) || top_p <= 0.f || top_p > 1.f) return Status::errorf("top_p must be in (0, 1], got {}", top_p);
  if (!std::isfinite(min_p) || min_p < 0.f || min_p > 1.f) return Status::errorf("min_p must be in [0, 1], got {}", min_p);
  if (top_k < 0) return Status::errorf("top_k must be >= 0, got {}", top_k);
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.f || repetition_penalty > 10.f)
    return Status::errorf("repetition_penalty must be in (0, 10], got {}", repetition_penalty);
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.f)
    return Status::errorf("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.f)
    return Status::errorf("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (penalty_last_n < -1) return Status::errorf("penalty_last_n must be >= -1, got {}", penalty_last_n);
  return Status::ok();
}

int32_t argmax(const float* logits, int n) {
  if (n <= 0) return 0;
  // The maximum (vectorized), then the lowest index holding it: the scalar
  // rule "first strict maximum".
  const float mx = max_row(logits, n);
  for (int j = 0; j < n; ++j)
    if (logits[j] == mx) return j;
  return 0;  // every logit is NaN
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
  rng_.seed(p_.seed);
  history_.clear();
}

void Sampler::accept(int32_t token) { history_.push_back(token); }

void Sampler::apply_penalties(float* logits, int n_vocab) {
  const bool rep = p_.repetition_penalty != 1.f;
  if (!rep && p_.presence_penalty == 0.f && p_.frequency_penalty == 0.f) return;
  size_t begin = 0;
  if (p_.penalty_last_n >= 0 && history_.size() > static_cast<size_t>(p_.penalty_last_n))
    begin = history_.size() - p_.penalty_last_n;
  counts_.clear();
  for (size_t i = begin; i < history_.size(); ++i) counts_[history_[i]]++;
  for (const auto& [tok, cnt] : counts_) {
    if (tok < 0 || tok >= n_vocab) continue;
    float& l = logits[tok];
    if (rep) l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    l -= static_cast<float>(cnt) * p_.frequency_penalty + (cnt > 0 ? p_.presence_penalty : 0.f);
  }
}

int32_t Sampler::sample(float* logits, int n_vocab) {
  apply_penalties(logits, n_vocab);
  if (p_.temperature <= 0.f) return argmax(logits, n_vocab);
  const float inv_t = 1.0f / p_.temperature;
  if (p_.top_k <= 0 && p_.top_p >= 1.f) return sample_unsorted(logits, n_vocab, inv_t);
  double kept = 0.0;
  const size_t keep = candidates(logits, n_vocab, inv_t, &kept);
  std::uniform_real_distribution<double> uni(0.0, kept);
  const double r = uni(rng_);
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += sc_->probs[i];
    if (r < cum) return sc_->idx[i];
  }
  return sc_->idx[keep - 1];
}

// Top-k / top-p / min-p candidates, best first, in sc_->idx / sc_->probs
// (unnormalized); returns how many are kept, *kept their total weight.
size_t Sampler::candidates(const float* logits, int n_vocab, float inv_t, double* kept_out) {
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t n_cand;
  if (p_.top_k > 0) {
    // Top-k in one pass with a heap whose front is the worst kept candidate.
    const size_t k = std::min<size_t>(p_.top_k, n_vocab);
    sc_->idx.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
      if (sc_->idx.size() < k) {
        sc_->idx.push_back(i);
        std::push_heap(sc_->idx.begin(), sc_->idx.end(), better);
      } else if (better(i, sc_->idx.front())) {
        std::pop_heap(sc_->idx.begin(), sc_->idx.end(), better);
        sc_->idx.back() = i;
        std::push_heap(sc_->idx.begin(), sc_->idx.end(), better);
      }
    }
    std::sort(sc_->idx.begin(), sc_->idx.end(), better);
    n_cand = k;
  } else {
    // No top-k: a sorted prefix that grows until it covers top_p of the
    // full distribution (or everything when top-p and min-p are off).
    sc_->idx.resize(n_vocab);
    std::iota(sc_->idx.begin(), sc_->idx.end(), 0);
    const float max_l = logits[argmax(logits, n_vocab)];
    double denom = 0.0;
    for (int i = 0; i < n_vocab; ++i) denom += std::exp(static_cast<double>((logits[i] - max_l) * inv_t));
    n_cand = (p_.top_p >= 1.f && p_.min_p <= 0.f) ? static_cast<size_t>(n_vocab) : std::min<size_t>(1024, n_vocab);
    for (;;) {
      std::partial_sort(sc_->idx.begin(), sc_->idx.begin() + n_cand, sc_->idx.end(), better);
      if (n_cand == static_cast<size_t>(n_vocab)) break;
      double mass = 0.0;
      for (size_t i = 0; i < n_cand; ++i) mass += std::exp(static_cast<double>((logits[sc_->idx[i]] - max_l) * inv_t));
      if (mass / denom >= p_.top_p) break;
      n_cand = std::min<size_t>(n_cand * 4, n_vocab);
    }
    top_p_total_ = denom;
  }
  const float max_l = logits[sc_->idx[0]];

  // Probabilities over candidates (renormalised after each filter).
  sc_->probs.resize(n_cand);
  double sum = 0.0;
  for (size_t i = 0; i < n_cand; ++i) {
    sc_->probs[i] = static_cast<float>(std::exp(static_cast<double>((logits[sc_->idx[i]] - max_l) * inv_t)));
    sum += sc_->probs[i];
  }
  size_t keep = n_cand;
  if (p_.top_p < 1.f) {
    // Relative to the full distribution when no top-k, else to the top-k set.
    const double total = p_.top_k > 0 ? sum : top_p_total_;
    double cum = 0.0;
    for (size_t i = 0; i < n_cand; ++i) {
      cum += sc_->probs[i];
      if (cum / total >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.f) {
    const float thresh = sc_->probs[0] * p_.min_p;
    size_t k = 1;
    while (k < keep && sc_->probs[k] >= thresh) ++k;
    keep = k;
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += sc_->probs[i];
  *kept_out = kept;
  return keep;
}

// Softmax over the whole vocabulary (sc_->probs) and the min-p threshold;
// *kept: the total weight of the tokens at or above it.
float Sampler::dense_probs(const float* logits, int n_vocab, float inv_t, double* kept_out) {
  sc_->probs.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) sc_->probs[i] = logits[i] * inv_t;
  softmax_row(sc_->probs.data(), n_vocab);
  float pmax = 0.f;
  for (int i = 0; i < n_vocab; ++i) pmax = std::max(pmax, sc_->probs[i]);
  const float thresh = p_.min_p > 0.f ? pmax * p_.min_p : 0.f;
  double kept = 0.0;
  for (int i = 0; i < n_vocab; ++i)
    if (sc_->probs[i] >= thresh) kept += sc_->probs[i];
  *kept_out = kept;
  return thresh;
}

// No top-k / top-p: nothing needs an order, so sample straight from the
// softmax over the whole vocabulary (min-p is a threshold on it): O(V), no
// sort. The draw walks the vocabulary in id order.
int32_t Sampler::sample_unsorted(const float* logits, int n_vocab, float inv_t) {
  double kept = 0.0;
  const float thresh = dense_probs(logits, n_vocab, inv_t, &kept);
  std::uniform_real_distribution<double> uni(0.0, kept);
  const double r = uni(rng_);
  double cum = 0.0;
  int32_t last = 0;
  for (int i = 0; i < n_vocab; ++i) {
    if (sc_->probs[i] < thresh || sc_->probs[i] <= 0.f) continue;
    cum += sc_->probs[i];
    last = i;
    if (r < cum) return i;
  }
  return last;
}

void Sampler::distribution(float* logits, int n_vocab, float* p) {
  apply_penalties(logits, n_vocab);
  std::fill(p, p + n_vocab, 0.f);
  if (p_.temperature <= 0.f) {
    p[argmax(logits, n_vocab)] = 1.f;
    return;
  }
  const float inv_t = 1.0f / p_.temperature;
  double kept = 0.0;
  if (p_.top_k <= 0 && p_.top_p >= 1.f) {
    const float thresh = dense_probs(logits, n_vocab, inv_t, &kept);
    for (int i = 0; i < n_vocab; ++i)
      if (sc_->probs[i] >= thresh && sc_->probs[i] > 0.f) p[i] = static_cast<float>(sc_->probs[i] / kept);
    return;
  }
  const size_t keep = candidates(logits, n_vocab, inv_t, &kept);
  for (size_t i = 0; i < keep; ++i) p[sc_->idx[i]] = static_cast<float>(sc_->probs[i] / kept);
}

double Sampler::uniform() {
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  return uni(rng_);
}

}  // namespace ember
