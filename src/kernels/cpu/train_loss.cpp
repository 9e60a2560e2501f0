// The loss row of kernels/train.h (train_kd_row) at the AVX2 and AVX-512
// levels: three passes over the vocabulary (maxima; shifted exponentials
// and their sums, with the KL's cross term sum e_b (b - a); the gradient),
// two exponentials per element (three with cross-entropy at tau != 1).
// Sums accumulate 8 f32 lanes per block of 8, widened to double per block,
// in index order. The scalar level runs the reference.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/train_simd.h"
#include "kernels/ref/train.h"
#include "kernels/train.h"

namespace ember {
namespace {

namespace ts = train_simd;

float max_of(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  float r = -INFINITY;
  for (float v : l) r = std::max(r, v);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

int64_t first_index_of(const float* x, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == v) return i;
  return 0;
}

double widen_sum(__m256 v) {
  const __m256d s = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  alignas(32) double l[4];
  _mm256_store_pd(l, s);
  return (l[0] + l[1]) + (l[2] + l[3]);
}

// out[i] = exp((x[i] - mx) * k) (k = 1 / tau); returns the sum in double.
double exp_shift(const float* x, int64_t n, float mx, float k, float* out) {
  const __m256 vm = _mm256_set1_ps(mx), vk = _mm256_set1_ps(k);
  double s = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ts::exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vk));
    _mm256_storeu_ps(out + i, e);
    s += widen_sum(e);
  }
  for (; i < n; ++i) {
    out[i] = std::exp((x[i] - mx) * k);
    s += out[i];
  }
  return s;
}

}  // namespace

KdRowResult train_kd_row(float* z, int64_t V, const KdRowTeacher& teacher, float tau, float w_kl, int32_t target,
                         float w_ce, float grad_scale) {
  if (active_isa() == Isa::kScalar) {
    ref::KdRowTeacherT<float> t{teacher.logits, teacher.ids, teacher.weights, teacher.logp, teacher.n_samples};
    return ref::train_kd_row<float>(z, V, t, tau, w_kl, target, w_ce, grad_scale);
  }
  KdRowResult res;
  const bool dense = teacher.logits != nullptr, sparse = !dense && teacher.n_samples > 0, ce = target >= 0;
  const bool kd = dense || sparse;
  const float k = 1.0f / tau;
  thread_local std::vector<float> eb_buf, ez_buf;
  // Maxima and the values read before z is overwritten.
  const float mz = max_of(z, V);
  const float ma = mz * k;  // max of a = z / tau
  const int64_t am = first_index_of(z, V, mz);
  const double z_target = ce ? z[target] : 0.0;
  std::vector<double> a_samples;
  if (sparse)
    for (int s = 0; s < teacher.n_samples; ++s) a_samples.push_back(static_cast<double>(z[teacher.ids[s]]) * k);
  // Cross-entropy at tau != 1 needs softmax(z) besides softmax(z / tau).
  const bool separate_ce = ce && tau != 1.0f;
  double sz = 0;
  if (separate_ce) {
    ez_buf.resize(static_cast<size_t>(V));
    sz = exp_shift(z, V, mz, 1.0f, ez_buf.data());
  }
  double sb = 0, cross = 0, mb = 0;
  if (dense) {
    const float* zt = teacher.logits;
    const float mt = max_of(zt, V);
    res.teacher_top1 = am == first_index_of(zt, V, mt);
    mb = static_cast<double>(mt) * k;
    eb_buf.resize(static_cast<size_t>(V));
    sb = exp_shift(zt, V, mt, k, eb_buf.data());
    // sum e_b (b - a), b - a = (zt - z) / tau.
    const __m256 vk = _mm256_set1_ps(k);
    int64_t i = 0;
    for (; i + 8 <= V; i += 8) {
      const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(zt + i), _mm256_loadu_ps(z + i)), vk);
      cross += widen_sum(_mm256_mul_ps(_mm256_loadu_ps(eb_buf.data() + i), d));
    }
    for (; i < V; ++i) cross += static_cast<double>(eb_buf[i]) * (zt[i] - z[i]) * k;
  }
  const double sa = exp_shift(z, V, mz, k, z);  // z now holds e_a
  const double lse_a = ma + std::log(sa);
  if (dense) {
    const double lse_b = mb + std::log(sb);
    res.kl = static_cast<double>(tau) * tau * (cross / sb - lse_b + lse_a);
  } else if (sparse) {
    double kl = 0;
    for (int s = 0; s < teacher.n_samples; ++s)
      kl += static_cast<double>(teacher.weights[s]) * (teacher.logp[s] - (a_samples[s] - lse_a));
    res.kl = static_cast<double>(tau) * tau * kl;
  }
  if (ce) res.ce = (separate_ce ? mz + std::log(sz) : lse_a) - z_target;
  res.loss = (kd ? w_kl * res.kl : 0.0) + (ce ? w_ce * res.ce : 0.0);

  // Gradient: gs * (w_kl tau (wsum q - p) + w_ce (s - onehot)).
  double wsum = 0;
  if (sparse)
    for (int s = 0; s < teacher.n_samples; ++s) wsum += teacher.weights[s];
  const float cq = kd ? static_cast<float>(grad_scale * w_kl * tau * (dense ? 1.0 : wsum) / sa) : 0.f;
  const float cp = dense ? static_cast<float>(grad_scale * w_kl * tau / sb) : 0.f;
  const float cs = ce ? static_cast<float>(grad_scale * w_ce / (separate_ce ? sz : sa)) : 0.f;
  const float* ez = separate_ce ? ez_buf.data() : z;
  {
    const __m256 vq = _mm256_set1_ps(cq), vp = _mm256_set1_ps(cp), vs = _mm256_set1_ps(cs);
    int64_t i = 0;
    for (; i + 8 <= V; i += 8) {
      const __m256 ea = _mm256_loadu_ps(z + i);
      __m256 g = _mm256_fmadd_ps(vs, _mm256_loadu_ps(ez + i), _mm256_mul_ps(vq, ea));
      if (dense) g = _mm256_fnmadd_ps(vp, _mm256_loadu_ps(eb_buf.data() + i), g);
      _mm256_storeu_ps(z + i, g);
    }
    for (; i < V; ++i) {
      float g = cq * z[i] + cs * ez[i];
      if (dense) g -= cp * eb_buf[i];
      z[i] = g;
    }
  }
  if (sparse)
    for (int s = 0; s < teacher.n_samples; ++s)
      z[teacher.ids[s]] -= static_cast<float>(grad_scale * w_kl * tau * teacher.weights[s]);
  if (ce) z[target] -= static_cast<float>(grad_scale * w_ce);
  return res;
}

}  // namespace ember
