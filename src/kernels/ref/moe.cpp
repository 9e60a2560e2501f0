// Scalar Mixture-of-Experts ops: the router, the combine and the grouped
// matmul reference; see ref/moe.h and kernels/moe.h for the arithmetic.
#include "kernels/ref/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/interleave.h"
#include "kernels/registry.h"

namespace ember {

const char* moe_gating_name(MoeGating g) {
  switch (g) {
    case MoeGating::kSoftmax: return "softmax";
    case MoeGating::kSoftmaxTopK: return "softmax over the top k";
    case MoeGating::kSigmoid: return "sigmoid";
  }
  return "?";
}

namespace ref {

namespace {

// NaN ranks as -infinity.
float rank_value(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

}  // namespace

void moe_route_row(const float* logits, const MoeRouting& r, int32_t* ids, float* weights) {
  const int E = r.n_expert, k = r.k;
  EMBER_CHECK(k >= 1 && k <= E && k <= kMaxExpertsUsed);
  // Ranked values: a disallowed expert ranks as -infinity (after every
  // allowed one; its weight comes out 0).
  const uint8_t* allowed = r.allowed;
  auto val = [&](int i) {
    return allowed && !allowed[i] ? -std::numeric_limits<float>::infinity() : rank_value(logits[i]);
  };
  // The k largest in rank order: each logit, in index order, goes in after
  // every kept one that is >= it (equal values: lower index first).
  int n_kept = 0;
  for (int i = 0; i < E; ++i) {
    const float v = val(i);
    if (n_kept == k && !(v > val(ids[k - 1]))) continue;
    int p = n_kept < k ? n_kept++ : k - 1;
    while (p > 0 && v > val(ids[p - 1])) {
      ids[p] = ids[p - 1];
      --p;
    }
    ids[p] = i;
  }
  const double first = val(ids[0]);
  if (!std::isfinite(first)) {  // no finite logit: nothing to weigh by
    for (int j = 0; j < k; ++j) weights[j] = 0.f;
    return;
  }
  // Weights of the chosen ones before normalising (double).
  double w[kMaxExpertsUsed];
  if (r.gating == MoeGating::kSigmoid) {
    for (int j = 0; j < k; ++j) w[j] = 1.0 / (1.0 + std::exp(-static_cast<double>(val(ids[j]))));
  } else {
    double denom = 0, top = first;
    if (r.gating == MoeGating::kSoftmax) {
      // Over all experts, allowed or not (the largest is ids[0] when
      // nothing is masked: exact routing's arithmetic, bit for bit).
      if (allowed)
        for (int i = 0; i < E; ++i) top = std::max(top, static_cast<double>(rank_value(logits[i])));
      for (int i = 0; i < E; ++i) denom += std::exp(static_cast<double>(rank_value(logits[i])) - top);
    } else {
      for (int j = 0; j < k; ++j) denom += std::exp(static_cast<double>(val(ids[j])) - top);
    }
    for (int j = 0; j < k; ++j) w[j] = std::exp(static_cast<double>(val(ids[j])) - top) / denom;
  }
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += w[j];
  for (int j = 0; j < k; ++j)
    weights[j] = static_cast<float>((r.norm && sum > 0 ? w[j] / sum : w[j]) * static_cast<double>(r.scale));
}

int moe_share_select(const int32_t* ids, const float* weights, int64_t n, int k, int n_expert, int budget, int keep,
                     uint8_t* allowed) {
  EMBER_CHECK(k >= 1 && keep >= 1 && keep <= k && n_expert >= 1);
  std::fill(allowed, allowed + n_expert, uint8_t{0});
  std::vector<double> mass(static_cast<size_t>(n_expert), 0.0);
  int size = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = ids[t * k + j];
      mass[e] += static_cast<double>(weights[t * k + j]);
      if (j < keep && !allowed[e]) {
        allowed[e] = 1;
        ++size;
      }
    }
  // Then by mass, largest first (equal: lower index first; no mass: never).
  while (size < budget) {
    int best = -1;
    for (int e = 0; e < n_expert; ++e)
      if (!allowed[e] && mass[e] > 0 && (best < 0 || mass[e] > mass[best])) best = e;
    if (best < 0) break;
    allowed[best] = 1;
    ++size;
  }
  return size;
}

void moe_combine_row(const float* y, int64_t ldy, const float* w, int k, int64_t dim, float* out, bool accumulate) {
  for (int64_t i = 0; i < dim; ++i) {
    double acc = 0;
    for (int j = 0; j < k; ++j) acc += static_cast<double>(w[j]) * static_cast<double>(y[j * ldy + i]);
    const float s = static_cast<float>(acc);
    out[i] = accumulate ? out[i] + s : s;
  }
}

void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                const ExpertTarget* targets, int n_targets) {
  std::vector<uint8_t> xq, wrow;
  for (int i = 0; i < n_targets; ++i) {
    const ExpertTarget& tg = targets[i];
    for (int64_t s = 0; s < n_slots; ++s) {
      const TensorView& w = *tg.experts[expert[s]];
      const DType base = dtype_layout_base(w.type);
      const KernelSet& wk = kernels(base, Isa::kScalar);
      const DType at = vec_dot_type(base);
      const int64_t n = w.ne[0];
      const float* xr = x + (x_row ? x_row[s] : s) * ldx;
      const void* xa = xr;
      if (at != DType::kF32) {
        const KernelSet& ak = kernels(at, Isa::kScalar);
        xq.resize(dtype_row_size(at, n));
        (tg.act_bits == 4 ? ak.quantize_row_int4 : ak.quantize_row)(xr, xq.data(), n);
        xa = xq.data();
      }
      wrow.resize(dtype_row_size(base, n));
      for (int64_t o = 0; o < w.ne[1]; ++o) {
        copy_row_bytes(w, o, wrow.data());
        wk.vec_dot(n, tg.y + s * tg.ldy + o, wrow.data(), xa);
      }
    }
  }
}

}  // namespace ref
}  // namespace ember
