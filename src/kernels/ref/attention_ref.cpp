// Scalar reference attention; see attention_ref.h.
#include "kernels/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  int64_t lo, hi;
  attention_visible_range(s, pos, &lo, &hi);
  double mx = -INFINITY;
  for (int64_t j = lo; j < hi; ++j) {
    const float* kr = kv_key_row(kv, j, hkv, dk);
    double d = 0;
    for (int i = 0; i < dk; ++i) d += static_cast<double>(q_head[i]) * kr[i];
    d *= s.scale;
    if (s.softcap > 0.f) d = s.softcap * std::tanh(d / s.softcap);
    scores[j - lo] = d;
    mx = std::max(mx, d);
  }
  double sum = 0;
  for (int64_t j = lo; j < hi; ++j) sum += (scores[j - lo] = std::exp(scores[j - lo] - mx));
  for (int i = 0; i < dv; ++i) {
    double a = 0;
    for (int64_t j = lo; j < hi; ++j) a += scores[j - lo] * kv_value_row(kv, j, hkv, dv)[i];
    out[i] = static_cast<float>(a / sum);
  }
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
