// Scalar reference attention; see attention.h.
#include "kernels/ref/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace ember::ref {

int64_t attention_row_scratch(const AttentionShape& s, int32_t pos) {
  int64_t lo, hi;
  attention_visible_range(s, pos, &lo, &hi);
  return hi - lo;
}

void attention_row(const AttentionShape& s, const float* q_head, int32_t pos, int head, const KvView& kv,
                   float* out, double* scores) {
  const int hkv = head / (s.n_head / s.n_head_kv);
  const int dk = s.head_dim, dv = s.head_dim_v;
  EMBER_CHECK_MSG(dk <= kMaxRefHeadDim && dv <= kMaxRefHeadDim, "head dim above the reference's bound");
  float row[kMaxRefHeadDim];  // one decoded K / V head row (never a page)
  double acc[kMaxRefHeadDim];
  int64_t lo, hi;
  attention_visible_range(s, pos, &lo, &hi);
  double mx = -INFINITY;
  for (int64_t j = lo; j < hi; ++j) {
    kv_load_key(kv, j, pos, hkv, dk, row);
    double d = 0;
    for (int i = 0; i < dk; ++i) d += static_cast<double>(q_head[i]) * row[i];
    d *= s.scale;
    if (s.softcap > 0.f) d = s.softcap * std::tanh(d / s.softcap);
    scores[j - lo] = d;
    mx = std::max(mx, d);
  }
  const double sink = s.sinks ? static_cast<double>(s.sinks[head]) : -INFINITY;
  mx = std::max(mx, sink);
  double sum = 0;
  for (int64_t j = lo; j < hi; ++j) sum += (scores[j - lo] = std::exp(scores[j - lo] - mx));
  if (s.sinks) sum += std::exp(sink - mx);
  std::fill(acc, acc + dv, 0.0);
  for (int64_t j = lo; j < hi; ++j) {  // per output element: the sum over j in order, as a plain loop
    kv_load_row(kv.v_type, kv_value_row(kv, j, hkv, dv), dv, row);
    for (int i = 0; i < dv; ++i) acc[i] += scores[j - lo] * row[i];
  }
  for (int i = 0; i < dv; ++i) out[i] = static_cast<float>(acc[i] / sum);
}

void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n, const KvView* views,
               const int32_t* view_of_token, float* out) {
  std::vector<double> scores;
  for (int64_t t = 0; t < n; ++t) {
    const KvView& kv = views[view_of_token ? view_of_token[t] : 0];
    scores.resize(attention_row_scratch(s, pos[t]));
    for (int h = 0; h < s.n_head; ++h)
      attention_row(s, q + (t * s.n_head + h) * s.head_dim, pos[t], h, kv,
                    out + (t * s.n_head + h) * s.head_dim_v, scores.data());
  }
}

}  // namespace ember::ref
