// Scalar reference training kernels; see train.h. Instantiated for float
// and double.
#include "kernels/ref/train.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

namespace ember::ref {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCoef = 0.044715;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// act(g) and act'(g).
void activation(TrainActivation a, double g, double* f, double* df) {
  if (a == TrainActivation::kSilu) {
    const double s = sigmoid(g);
    *f = g * s;
    *df = s * (1.0 + g * (1.0 - s));
  } else {
    const double inner = kSqrt2OverPi * (g + kGeluCoef * g * g * g);
    const double t = std::tanh(inner);
    *f = 0.5 * g * (1.0 + t);
    *df = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCoef * g * g);
  }
}

// The pair (a, b) of rotated dims i of a head.
void rope_pair(RopeStyle style, int i, int n_rot, int* a, int* b) {
  *a = style == RopeStyle::kNormal ? 2 * i : i;
  *b = style == RopeStyle::kNormal ? 2 * i + 1 : i + n_rot / 2;
}

template <typename T>
void rope_apply(T* x, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                const T* cos_t, const T* sin_t, double sign) {
  const int half = n_rot / 2;
  for (int64_t r = 0; r < n; ++r) {
    const T* c = cos_t + (r % period) * half;
    const T* s = sin_t + (r % period) * half;
    for (int h = 0; h < n_heads; ++h) {
      T* xh = x + (r * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        int a = 0, b = 0;
        rope_pair(style, i, n_rot, &a, &b);
        const double x0 = xh[a], x1 = xh[b], cc = c[i], ss = sign * static_cast<double>(s[i]);
        xh[a] = static_cast<T>(x0 * cc - x1 * ss);
        xh[b] = static_cast<T>(x0 * ss + x1 * cc);
      }
    }
  }
}

// Visible keys [lo, t] of query position t.
int64_t first_key(const TrainAttentionShape& s, int64_t t) {
  return s.window > 0 ? std::max<int64_t>(0, t - s.window + 1) : 0;
}

// Capped score of query row qh and key row kh.
template <typename T>
double score(const TrainAttentionShape& s, const T* qh, const T* kh) {
  double d = 0;
  for (int i = 0; i < s.head_dim; ++i) d += static_cast<double>(qh[i]) * kh[i];
  d *= s.scale;
  if (s.softcap > 0) d = s.softcap * std::tanh(d / s.softcap);
  return d;
}

double log_sum_exp(const std::vector<double>& a) {
  double mx = -INFINITY;
  for (double x : a) mx = std::max(mx, x);
  double sum = 0;
  for (double x : a) sum += std::exp(x - mx);
  return mx + std::log(sum);
}

}  // namespace

template <typename T>
void train_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, bool tb,
                T* C, int64_t ldc, bool accumulate) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + m] : A[m * lda + k];
        const double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
      }
      T& c = C[m * ldc + n];
      c = static_cast<T>(accumulate ? c + acc : acc);
    }
}

namespace {
double bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / nan as they are
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
}  // namespace

void train_gemm_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += bf16_round(ta ? A[k * lda + m] : A[m * lda + k]) * bf16_round(tb ? B[n * ldb + k] : B[k * ldb + n]);
      float& c = C[m * ldc + n];
      c = static_cast<float>(accumulate ? c + acc : acc);
    }
}

template <typename T>
void train_rms_norm_forward(const T* x, int64_t n, int64_t dim, const T* w, T offset, T eps, T* out, T* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double rs = 1.0 / std::sqrt(ss / static_cast<double>(dim) + static_cast<double>(eps));
    rstd[r] = static_cast<T>(rs);
    for (int64_t i = 0; i < dim; ++i) {
      const double wi = w ? static_cast<double>(offset) + static_cast<double>(w[i]) : 1.0;
      out[r * dim + i] = static_cast<T>(xr[i] * rs * wi);
    }
  }
}

template <typename T>
void train_rms_norm_backward(const T* x, const T* rstd, int64_t n, int64_t dim, const T* w, T offset, const T* dy,
                             T* dx, bool accumulate, T* dw) {
  std::vector<double> dw_acc(dw ? dim : 0, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * dim;
    const T* gr = dy + r * dim;
    const double rs = rstd[r];
    double c = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const double wi = w ? static_cast<double>(offset) + static_cast<double>(w[i]) : 1.0;
      c += gr[i] * wi * (xr[i] * rs);
    }
    c /= static_cast<double>(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const double wi = w ? static_cast<double>(offset) + static_cast<double>(w[i]) : 1.0;
      const double xhat = xr[i] * rs;
      const double g = rs * (gr[i] * wi - xhat * c);
      T& d = dx[r * dim + i];
      d = static_cast<T>(accumulate ? d + g : g);
      if (dw) dw_acc[i] += gr[i] * xhat;
    }
  }
  if (dw)
    for (int64_t i = 0; i < dim; ++i) dw[i] = static_cast<T>(dw[i] + dw_acc[i]);
}

template <typename T>
void train_rope_forward(T* x, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                        const T* cos_t, const T* sin_t) {
  rope_apply(x, n, period, n_heads, head_dim, n_rot, style, cos_t, sin_t, 1.0);
}

template <typename T>
void train_rope_backward(T* dx, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                         const T* cos_t, const T* sin_t) {
  rope_apply(dx, n, period, n_heads, head_dim, n_rot, style, cos_t, sin_t, -1.0);
}

template <typename T>
void train_gated_forward(TrainActivation a, const T* g, const T* u, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double f = 0, df = 0;
    activation(a, g[i], &f, &df);
    out[i] = static_cast<T>(f * u[i]);
  }
}

template <typename T>
void train_gated_backward(TrainActivation a, const T* g, const T* u, const T* dout, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double f = 0, df = 0;
    activation(a, g[i], &f, &df);
    const double d = dout[i], ui = u[i];
    dg[i] = static_cast<T>(d * ui * df);
    du[i] = static_cast<T>(d * f);
  }
}

template <typename T>
void train_softcap_forward(T* x, int64_t n, T cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

template <typename T>
void train_softcap_backward(const T* y, T* dy, int64_t n, T cap) {
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(y[i]) / cap;
    dy[i] = static_cast<T>(dy[i] * (1.0 - t * t));
  }
}

template <typename T>
void train_attention_forward(const TrainAttentionShape& s, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t L = s.seq_len, H = s.n_head, G = s.n_head / s.n_head_kv;
  const int64_t ldq = H * s.head_dim, ldk = s.n_head_kv * s.head_dim, ldv = s.n_head_kv * s.head_dim_v;
  const int64_t ldo = H * s.head_dim_v;
  std::vector<double> sc, acc(s.head_dim_v);
  for (int64_t b = 0; b < s.n_seq; ++b)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = b * L + t, kvh = h / G, lo = first_key(s, t);
        const T* qh = q + row * ldq + h * s.head_dim;
        sc.clear();
        for (int64_t j = lo; j <= t; ++j) sc.push_back(score(s, qh, k + (b * L + j) * ldk + kvh * s.head_dim));
        const double l = log_sum_exp(sc);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = lo; j <= t; ++j) {
          const double p = std::exp(sc[j - lo] - l);
          const T* vj = v + (b * L + j) * ldv + kvh * s.head_dim_v;
          for (int i = 0; i < s.head_dim_v; ++i) acc[i] += p * vj[i];
        }
        for (int i = 0; i < s.head_dim_v; ++i) out[row * ldo + h * s.head_dim_v + i] = static_cast<T>(acc[i]);
        lse[row * H + h] = static_cast<T>(l);
      }
}

template <typename T>
void train_attention_backward(const TrainAttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                              const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  const int64_t L = s.seq_len, H = s.n_head, G = s.n_head / s.n_head_kv, N = s.n_seq * L;
  const int hd = s.head_dim, hdv = s.head_dim_v;
  const int64_t ldq = H * hd, ldk = s.n_head_kv * hd, ldv = s.n_head_kv * hdv, ldo = H * hdv;
  std::vector<double> dk_acc(N * ldk, 0.0), dv_acc(N * ldv, 0.0), dq_acc(hd);
  for (int64_t b = 0; b < s.n_seq; ++b)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = b * L + t, kvh = h / G, lo = first_key(s, t);
        const T* qh = q + row * ldq + h * hd;
        const T* doh = dout + row * ldo + h * hdv;
        const T* oh = out + row * ldo + h * hdv;
        double D = 0;
        for (int i = 0; i < hdv; ++i) D += static_cast<double>(doh[i]) * oh[i];
        const double l = lse[row * H + h];
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (int64_t j = lo; j <= t; ++j) {
          const int64_t kr = b * L + j;
          const T* kj = k + kr * ldk + kvh * hd;
          const T* vj = v + kr * ldv + kvh * hdv;
          const double sc = score(s, qh, kj);
          const double p = std::exp(sc - l);
          double dp = 0;
          for (int i = 0; i < hdv; ++i) dp += static_cast<double>(doh[i]) * vj[i];
          double ds = p * (dp - D);
          if (s.softcap > 0) {
            const double c = sc / s.softcap;
            ds *= 1.0 - c * c;
          }
          ds *= s.scale;
          for (int i = 0; i < hd; ++i) {
            dq_acc[i] += ds * kj[i];
            dk_acc[kr * ldk + kvh * hd + i] += ds * qh[i];
          }
          for (int i = 0; i < hdv; ++i) dv_acc[kr * ldv + kvh * hdv + i] += p * doh[i];
        }
        for (int i = 0; i < hd; ++i) dq[row * ldq + h * hd + i] = static_cast<T>(dq_acc[i]);
      }
  for (int64_t i = 0; i < N * ldk; ++i) dk[i] = static_cast<T>(dk_acc[i]);
  for (int64_t i = 0; i < N * ldv; ++i) dv[i] = static_cast<T>(dv_acc[i]);
}

template <typename T>
void train_embedding_backward(const int32_t* ids, const T* dx, int64_t n, int64_t dim, T scale, T* dtable) {
  std::map<int32_t, std::vector<double>> acc;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double>& a = acc[ids[r]];
    a.resize(dim, 0.0);
    for (int64_t i = 0; i < dim; ++i) a[i] += static_cast<double>(scale) * dx[r * dim + i];
  }
  for (const auto& [id, a] : acc)
    for (int64_t i = 0; i < dim; ++i) dtable[id * dim + i] = static_cast<T>(dtable[id * dim + i] + a[i]);
}

template <typename T>
void train_bias_backward(const T* dy, int64_t n, int64_t dim, T* db) {
  for (int64_t i = 0; i < dim; ++i) {
    double a = 0;
    for (int64_t r = 0; r < n; ++r) a += dy[r * dim + i];
    db[i] = static_cast<T>(db[i] + a);
  }
}

template <typename T>
KdRowResult train_kd_row(T* z, int64_t V, const KdRowTeacherT<T>& teacher, T tau, T w_kl, int32_t target, T w_ce,
                         T grad_scale) {
  KdRowResult res;
  const double t = tau;
  std::vector<double> a(V), grad(V, 0.0);
  for (int64_t i = 0; i < V; ++i) a[i] = z[i] / t;
  const double lse_a = log_sum_exp(a);
  const bool dense = teacher.logits != nullptr, sparse = teacher.n_samples > 0;
  if (dense) {
    std::vector<double> bt(V);
    for (int64_t i = 0; i < V; ++i) bt[i] = teacher.logits[i] / t;
    const double lse_b = log_sum_exp(bt);
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double logp = bt[i] - lse_b, p = std::exp(logp), logq = a[i] - lse_a;
      if (p > 0) kl += p * (logp - logq);
      grad[i] += static_cast<double>(w_kl) * t * (std::exp(logq) - p);
    }
    res.kl = t * t * kl;
    const int64_t am = std::max_element(z, z + V) - z;
    const int64_t at = std::max_element(teacher.logits, teacher.logits + V) - teacher.logits;
    res.teacher_top1 = am == at;
  } else if (sparse) {
    double wsum = 0, kl = 0;
    for (int k = 0; k < teacher.n_samples; ++k) {
      const int32_t id = teacher.ids[k];
      const double w = teacher.weights[k];
      wsum += w;
      kl += w * (static_cast<double>(teacher.logp[k]) - (a[id] - lse_a));
      grad[id] -= static_cast<double>(w_kl) * t * w;
    }
    for (int64_t i = 0; i < V; ++i) grad[i] += static_cast<double>(w_kl) * t * wsum * std::exp(a[i] - lse_a);
    res.kl = t * t * kl;
  }
  if (target >= 0) {
    std::vector<double> zz(z, z + V);
    const double lse = log_sum_exp(zz);
    res.ce = lse - zz[target];
    for (int64_t i = 0; i < V; ++i) grad[i] += static_cast<double>(w_ce) * (std::exp(zz[i] - lse) - (i == target));
  }
  res.loss = ((dense || sparse) ? static_cast<double>(w_kl) * res.kl : 0.0) + (target >= 0 ? w_ce * res.ce : 0.0);
  for (int64_t i = 0; i < V; ++i) z[i] = static_cast<T>(grad_scale * grad[i]);
  return res;
}

template <typename T>
void train_adamw(T* p, const T* g, T* m, T* v, int64_t n, const AdamWParams& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]) * a.grad_scale;
    double pi = static_cast<double>(p[i]) * (1.0 - a.lr * a.weight_decay);
    const double mi = a.beta1 * m[i] + (1.0 - a.beta1) * gi;
    const double vi = a.beta2 * v[i] + (1.0 - a.beta2) * gi * gi;
    pi -= (a.lr / bc1) * mi / (std::sqrt(vi) / std::sqrt(bc2) + a.eps);
    p[i] = static_cast<T>(pi);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
  }
}

double train_sum_squares(const float* g, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

#define EMBER_TRAIN_REF_INSTANTIATE(T)                                                                               \
  template void train_gemm<T>(int64_t, int64_t, int64_t, const T*, int64_t, bool, const T*, int64_t, bool, T*,      \
                              int64_t, bool);                                                                        \
  template void train_rms_norm_forward<T>(const T*, int64_t, int64_t, const T*, T, T, T*, T*);                       \
  template void train_rms_norm_backward<T>(const T*, const T*, int64_t, int64_t, const T*, T, const T*, T*, bool,    \
                                           T*);                                                                      \
  template void train_rope_forward<T>(T*, int64_t, int64_t, int, int, int, RopeStyle, const T*, const T*);           \
  template void train_rope_backward<T>(T*, int64_t, int64_t, int, int, int, RopeStyle, const T*, const T*);          \
  template void train_gated_forward<T>(TrainActivation, const T*, const T*, T*, int64_t);                            \
  template void train_gated_backward<T>(TrainActivation, const T*, const T*, const T*, T*, T*, int64_t);             \
  template void train_softcap_forward<T>(T*, int64_t, T);                                                            \
  template void train_softcap_backward<T>(const T*, T*, int64_t, T);                                                 \
  template void train_attention_forward<T>(const TrainAttentionShape&, const T*, const T*, const T*, T*, T*);        \
  template void train_attention_backward<T>(const TrainAttentionShape&, const T*, const T*, const T*, const T*,      \
                                            const T*, const T*, T*, T*, T*);                                         \
  template void train_embedding_backward<T>(const int32_t*, const T*, int64_t, int64_t, T, T*);                      \
  template void train_bias_backward<T>(const T*, int64_t, int64_t, T*);                                              \
  template KdRowResult train_kd_row<T>(T*, int64_t, const KdRowTeacherT<T>&, T, T, int32_t, T, T);                   \
  template void train_adamw<T>(T*, const T*, T*, T*, int64_t, const AdamWParams&);

EMBER_TRAIN_REF_INSTANTIATE(float)
EMBER_TRAIN_REF_INSTANTIATE(double)

}  // namespace ember::ref
