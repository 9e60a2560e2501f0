// AVX2 row ops (the op table's entries at the AVX2 and AVX-512 levels; see
// kernels/ops.h for what each computes): RMSNorm with f32 lane sums, the
// 8-lane exp polynomial behind softmax / log-sum-exp / SiLU / GELU, and the
// dot / axpy helpers of the attention kernel. RoPE, add, scale and softcap
// are plain loops (vectorised by the compiler where it can). The reduction
// order within a row is fixed, so results never depend on how rows are
// batched or threaded.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"

namespace ember::avx2 {


float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = simd::hsum_f32x8(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float* y, float a, const float* x, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  // Sum of squares: four 8-lane f32 accumulators, lanes added in double.
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    const __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  double ss = 0.0;
  for (float l : lanes) ss += l;
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  if (w) {
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale * w[j];
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale;
  }
}

void rope_angles(float pos, const float* inv_freq, int n_rot, float* cos_t, float* sin_t) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const float theta = pos * inv_freq[i];
    cos_t[i] = std::cos(theta);
    sin_t[i] = std::sin(theta);
  }
}

void rope_head(float* x, int n_rot, RopeStyle style, const float* cos_t, const float* sin_t) {
  const int half = n_rot / 2;
  if (style == RopeStyle::kNormal) {
    for (int i = 0; i < half; ++i) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
      x[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  } else {
    for (int i = 0; i < half; ++i) {
      const float x0 = x[i], x1 = x[i + half];
      x[i] = x0 * cos_t[i] - x1 * sin_t[i];
      x[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

namespace {

// exp(x) for 8 lanes: range reduction to r in [-ln2/2, ln2/2] and a degree-6
// polynomial (about 1 ulp); inputs are clamped to the finite float range.
inline __m256 exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504f);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // Scale by 2^n in two steps so n = 128 (x near the top of the range) works.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// x * sigmoid(k * x) with k a vector (SiLU: k = 1).
inline __m256 x_sigmoid(__m256 x, __m256 kx) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), kx));
  return _mm256_div_ps(x, _mm256_add_ps(one, e));
}

// sum_i exp(x[i] - mx), accumulated in double; writes the terms to out when
// out is non-null. Terms below exp(-87) (and -inf, NaN) count as 0.
double sum_exp_shifted(const float* x, int64_t n, float mx, float* out) {
  const __m256 vmx = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-87.0f);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vmx);
    const __m256 e = _mm256_and_ps(exp256(d), _mm256_cmp_ps(d, lo, _CMP_GE_OQ));
    if (out) _mm256_storeu_ps(out + i, e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) {
    const float d = x[i] - mx;
    const float e = d >= -87.0f ? std::exp(d) : 0.0f;
    if (out) out[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace

void exp_shifted_row(float* x, int64_t n, float mx) {
  const __m256 vmx = _mm256_set1_ps(mx);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)));
  if (i < n) {
    alignas(32) float t[8];
    for (int j = 0; j < 8; ++j) t[j] = i + j < n ? x[i + j] : mx;
    _mm256_store_ps(t, exp256(_mm256_sub_ps(_mm256_load_ps(t), vmx)));
    for (int64_t j = 0; i + j < n; ++j) x[i + j] = t[j];
  }
}

namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoef = 0.044715f;

// GELU-tanh as x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3): the same
// function as 0.5 x (1 + tanh z), computed with one exp.
inline __m256 gelu256(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(x2, _mm256_set1_ps(kGeluCoef)), x, x);
  return x_sigmoid(x, _mm256_mul_ps(inner, _mm256_set1_ps(2.0f * kSqrt2OverPi)));
}

inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kGeluCoef * x * x)));
}
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void silu_row(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, x_sigmoid(v, v));
  }
  for (; i < n; ++i) x[i] = silu(x[i]);
}

void gelu_tanh_row(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu256(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] = gelu_tanh(x[i]);
}

void swiglu_row(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(x_sigmoid(g, g), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}

void swiglu_oai_row(float* gate, const float* up, int64_t n) {
  const __m256 lim = _mm256_set1_ps(kSwiGluOaiLimit), nlim = _mm256_set1_ps(-kSwiGluOaiLimit);
  const __m256 alpha = _mm256_set1_ps(kSwiGluOaiAlpha), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_min_ps(_mm256_loadu_ps(gate + i), lim);
    const __m256 y = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(up + i), nlim), lim);
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(x_sigmoid(x, _mm256_mul_ps(alpha, x)), _mm256_add_ps(y, one)));
  }
  for (; i < n; ++i) {
    const float x = std::min(gate[i], kSwiGluOaiLimit);
    const float y = std::min(std::max(up[i], -kSwiGluOaiLimit), kSwiGluOaiLimit);
    gate[i] = x / (1.0f + std::exp(-kSwiGluOaiAlpha * x)) * (y + 1.0f);
  }
}

void geglu_tanh_row(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(gelu256(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  for (; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
}

void add_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_row(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void softcap_row(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

float softmax_row(float* x, int64_t n) {
  const float mx = max_row(x, n);
  const double sum = sum_exp_shifted(x, n, mx, x);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return mx;
}

double log_sum_exp_row(const float* x, int64_t n) {
  const float mx = max_row(x, n);
  return mx + std::log(sum_exp_shifted(x, n, mx, nullptr));
}

float max_row(const float* x, int64_t n) {
  float mx = -INFINITY;
  int64_t i = 0;
  if (n >= 8) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    for (float v : lanes) mx = v > mx ? v : mx;
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

}  // namespace ember::avx2
