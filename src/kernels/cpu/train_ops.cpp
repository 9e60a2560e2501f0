// The training kernels of kernels/train.h other than attention and the loss
// row (train_attention.cpp, train_loss.cpp): dispatch (the scalar level runs
// the reference twins of kernels/ref/train.h) and the AVX2 versions,
// which the AVX-512 level shares (the GEMM has its own micro-kernel per
// level, train_gemm.cpp). Reductions: per row in a fixed lane order; column
// sums over rows (dW of norms, biases, embeddings) give each thread whole
// columns and run the rows in order, so no result depends on the thread
// count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/train_simd.h"
#include "kernels/ref/train.h"
#include "kernels/train.h"

namespace ember {

void train_gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool);
void train_gemm_bf16_fast(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                          int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool);

namespace {

namespace ts = train_simd;

bool scalar() { return active_isa() == Isa::kScalar; }

// Rows per parallel_for chunk for rows of `dim` elements (about 16K elements).
int64_t row_grain(int64_t dim) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, dim)); }

// Column blocks of 64 for column sums over rows.
constexpr int64_t kColBlock = 64;

// Calls f(c0, c1) for column blocks of [0, dim) over the pool.
template <typename F>
void for_column_blocks(int64_t dim, ThreadPool& pool, F f) {
  const int64_t nb = (dim + kColBlock - 1) / kColBlock;
  pool.parallel_for(nb, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) f(i * kColBlock, std::min(dim, (i + 1) * kColBlock));
  });
}

void gated_forward_range(TrainActivation a, const float* g, const float* u, float* out, int64_t n) {
  const __m256 c0 = _mm256_set1_ps(0.79788456080286535588f), c1 = _mm256_set1_ps(0.044715f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    __m256 f;
    if (a == TrainActivation::kSilu) {
      f = _mm256_mul_ps(x, ts::sigmoid8(x));
    } else {  // 0.5 (1 + tanh(y)) = sigmoid(2y): no cancellation for large negative x
      const __m256 inner = _mm256_mul_ps(c0, _mm256_fmadd_ps(_mm256_mul_ps(c1, x), _mm256_mul_ps(x, x), x));
      f = _mm256_mul_ps(x, ts::sigmoid8(_mm256_add_ps(inner, inner)));
    }
    _mm256_storeu_ps(out + i, _mm256_mul_ps(f, _mm256_loadu_ps(u + i)));
  }
  if (i < n) ref::train_gated_forward<float>(a, g + i, u + i, out + i, n - i);
}

void gated_backward_range(TrainActivation a, const float* g, const float* u, const float* dout, float* dg, float* du,
                          int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 c0 = _mm256_set1_ps(0.79788456080286535588f), c1 = _mm256_set1_ps(0.044715f);
  const __m256 c3 = _mm256_set1_ps(3.0f * 0.044715f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i), ux = _mm256_loadu_ps(u + i), d = _mm256_loadu_ps(dout + i);
    __m256 f, df;
    if (a == TrainActivation::kSilu) {
      const __m256 s = ts::sigmoid8(x);
      f = _mm256_mul_ps(x, s);
      df = _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
    } else {
      // With s = sigmoid(2y) = 0.5 (1 + tanh(y)): f = x s, f' = s + 2 x s (1 - s) y'.
      const __m256 x2 = _mm256_mul_ps(x, x);
      const __m256 inner = _mm256_mul_ps(c0, _mm256_fmadd_ps(_mm256_mul_ps(c1, x), x2, x));
      const __m256 s = ts::sigmoid8(_mm256_add_ps(inner, inner));
      f = _mm256_mul_ps(x, s);
      const __m256 dinner = _mm256_mul_ps(c0, _mm256_fmadd_ps(c3, x2, one));
      const __m256 two_x = _mm256_add_ps(x, x);
      df = _mm256_fmadd_ps(_mm256_mul_ps(two_x, _mm256_mul_ps(s, _mm256_sub_ps(one, s))), dinner, s);
    }
    _mm256_storeu_ps(dg + i, _mm256_mul_ps(_mm256_mul_ps(d, ux), df));
    _mm256_storeu_ps(du + i, _mm256_mul_ps(d, f));
  }
  if (i < n) ref::train_gated_backward<float>(a, g + i, u + i, dout + i, dg + i, du + i, n - i);
}

}  // namespace

void train_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B, int64_t ldb,
                bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool) {
  if (scalar()) {
    // Row blocks of C over the pool (each element is the reference's).
    pool.parallel_for(M, 1, [&](int64_t b, int64_t e, int) {
      ref::train_gemm<float>(e - b, N, K, ta ? A + b : A + b * lda, lda, ta, B, ldb, tb, C + b * ldc, ldc,
                             accumulate);
    });
    return;
  }
  train_gemm_fast(M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, pool);
}

bool train_bf16_available() {
  return scalar() || (active_isa() >= Isa::kAvx512 && cpu_features().avx512bf16);
}

void train_gemm_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool) {
  EMBER_CHECK_MSG(train_bf16_available(), "train_gemm_bf16 without AVX512_BF16");
  if (scalar()) {
    pool.parallel_for(M, 1, [&](int64_t b, int64_t e, int) {
      ref::train_gemm_bf16(e - b, N, K, ta ? A + b : A + b * lda, lda, ta, B, ldb, tb, C + b * ldc, ldc, accumulate);
    });
    return;
  }
  train_gemm_bf16_fast(M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, pool);
}

void train_rms_norm_forward(const float* x, int64_t n, int64_t dim, const float* w, float offset, float eps,
                            float* out, float* rstd, ThreadPool& pool) {
  pool.parallel_for(n, row_grain(dim), [&](int64_t b, int64_t e, int) {
    if (scalar()) {
      ref::train_rms_norm_forward<float>(x + b * dim, e - b, dim, w, offset, eps, out + b * dim, rstd + b);
      return;
    }
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      const float rs = static_cast<float>(1.0 / std::sqrt(ts::sum_squares(xr, dim) / static_cast<double>(dim) + eps));
      rstd[r] = rs;
      if (w)
        for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * rs * (offset + w[i]);
      else
        for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * rs;
    }
  });
}

void train_rms_norm_backward(const float* x, const float* rstd, int64_t n, int64_t dim, const float* w, float offset,
                             const float* dy, float* dx, bool accumulate, float* dw, ThreadPool& pool) {
  if (scalar()) {
    pool.parallel_for(n, row_grain(dim), [&](int64_t b, int64_t e, int) {
      ref::train_rms_norm_backward<float>(x + b * dim, rstd + b, e - b, dim, w, offset, dy + b * dim, dx + b * dim,
                                          accumulate, nullptr);
    });
    if (dw) {
      // dw[i] += sum_r dy[r, i] * x[r, i] * rstd[r], per column in double.
      for_column_blocks(dim, pool, [&](int64_t c0, int64_t c1) {
        for (int64_t i = c0; i < c1; ++i) {
          double a = 0;
          for (int64_t r = 0; r < n; ++r) a += static_cast<double>(dy[r * dim + i]) * (x[r * dim + i] * static_cast<double>(rstd[r]));
          dw[i] = static_cast<float>(dw[i] + a);
        }
      });
    }
    return;
  }
  pool.parallel_for(n, row_grain(dim), [&](int64_t b, int64_t e, int) {
    std::vector<float> gw(static_cast<size_t>(dim));
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      const float* gr = dy + r * dim;
      float* d = dx + r * dim;
      const float rs = rstd[r];
      for (int64_t i = 0; i < dim; ++i) gw[i] = w ? gr[i] * (offset + w[i]) : gr[i];
      const float c = ts::dot(gw.data(), xr, dim) * rs / static_cast<float>(dim);
      const float k = c * rs;  // xhat * c = x * rs * c
      if (accumulate)
        for (int64_t i = 0; i < dim; ++i) d[i] += rs * (gw[i] - xr[i] * k);
      else
        for (int64_t i = 0; i < dim; ++i) d[i] = rs * (gw[i] - xr[i] * k);
    }
  });
  if (dw) {
    for_column_blocks(dim, pool, [&](int64_t c0, int64_t c1) {
      float acc[kColBlock] = {};
      const int64_t w_ = c1 - c0;
      for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * dim + c0;
        const float* gr = dy + r * dim + c0;
        const float rs = rstd[r];
        for (int64_t i = 0; i < w_; ++i) acc[i] += gr[i] * (xr[i] * rs);
      }
      for (int64_t i = 0; i < w_; ++i) dw[c0 + i] += acc[i];
    });
  }
}

void train_rope_forward(float* x, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot, RopeStyle style,
                        const float* cos_t, const float* sin_t, ThreadPool& pool) {
  const int half = n_rot / 2;
  pool.parallel_for(n, row_grain(static_cast<int64_t>(n_heads) * head_dim), [&](int64_t b, int64_t e, int) {
    if (scalar()) {
      // Token rows b.. start at table row b % period.
      for (int64_t r = b; r < e; ++r)
        ref::train_rope_forward<float>(x + r * n_heads * head_dim, 1, 1, n_heads, head_dim, n_rot, style,
                                       cos_t + (r % period) * half, sin_t + (r % period) * half);
      return;
    }
    for (int64_t r = b; r < e; ++r)
      for (int h = 0; h < n_heads; ++h)
        rope_head(x + (r * n_heads + h) * head_dim, n_rot, style, cos_t + (r % period) * half,
                  sin_t + (r % period) * half);
  });
}

void train_rope_backward(float* dx, int64_t n, int64_t period, int n_heads, int head_dim, int n_rot,
                         RopeStyle style, const float* cos_t, const float* sin_t, ThreadPool& pool) {
  const int half = n_rot / 2;
  pool.parallel_for(n, row_grain(static_cast<int64_t>(n_heads) * head_dim), [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const float* c = cos_t + (r % period) * half;
      const float* s = sin_t + (r % period) * half;
      if (scalar()) {
        ref::train_rope_backward<float>(dx + r * n_heads * head_dim, 1, 1, n_heads, head_dim, n_rot, style, c, s);
        continue;
      }
      for (int h = 0; h < n_heads; ++h) {
        float* d = dx + (r * n_heads + h) * head_dim;
        const int stride = style == RopeStyle::kNormal ? 2 : 1;
        const int off = style == RopeStyle::kNormal ? 1 : half;
        for (int i = 0; i < half; ++i) {
          float& d0 = d[i * stride];
          float& d1 = d[i * stride + off];
          const float a = d0, bb = d1;
          d0 = a * c[i] + bb * s[i];
          d1 = bb * c[i] - a * s[i];
        }
      }
    }
  });
}

void train_gated_forward(TrainActivation a, const float* g, const float* u, float* out, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, 16384, [&](int64_t b, int64_t e, int) {
    if (scalar())
      ref::train_gated_forward<float>(a, g + b, u + b, out + b, e - b);
    else
      gated_forward_range(a, g + b, u + b, out + b, e - b);
  });
}

void train_gated_backward(TrainActivation a, const float* g, const float* u, const float* dout, float* dg, float* du,
                          int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, 16384, [&](int64_t b, int64_t e, int) {
    if (scalar())
      ref::train_gated_backward<float>(a, g + b, u + b, dout + b, dg + b, du + b, e - b);
    else
      gated_backward_range(a, g + b, u + b, dout + b, dg + b, du + b, e - b);
  });
}

void train_softcap_forward(float* x, int64_t n, float cap, ThreadPool& pool) {
  pool.parallel_for(n, 16384, [&](int64_t b, int64_t e, int) {
    if (scalar()) {
      ref::train_softcap_forward<float>(x + b, e - b, cap);
      return;
    }
    const __m256 vc = _mm256_set1_ps(cap), vi = _mm256_set1_ps(1.0f / cap);
    int64_t i = b;
    for (; i + 8 <= e; i += 8)
      _mm256_storeu_ps(x + i, _mm256_mul_ps(vc, ts::tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi))));
    if (i < e) ref::train_softcap_forward<float>(x + i, e - i, cap);
  });
}

void train_softcap_backward(const float* y, float* dy, int64_t n, float cap, ThreadPool& pool) {
  pool.parallel_for(n, 16384, [&](int64_t b, int64_t e, int) {
    if (scalar()) {
      ref::train_softcap_backward<float>(y + b, dy + b, e - b, cap);
      return;
    }
    for (int64_t i = b; i < e; ++i) {
      const float t = y[i] / cap;
      dy[i] *= (1.0f - t) * (1.0f + t);
    }
  });
}

void train_embedding_backward(const int32_t* ids, const float* dx, int64_t n, int64_t dim, float scale, float* dtable,
                              ThreadPool& pool) {
  if (scalar()) {
    ref::train_embedding_backward<float>(ids, dx, n, dim, scale, dtable);
    return;
  }
  for_column_blocks(dim, pool, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < n; ++r) {
      const float* s = dx + r * dim;
      float* d = dtable + static_cast<int64_t>(ids[r]) * dim;
      for (int64_t i = c0; i < c1; ++i) d[i] += scale * s[i];
    }
  });
}

void train_bias_backward(const float* dy, int64_t n, int64_t dim, float* db, ThreadPool& pool) {
  if (scalar()) {
    ref::train_bias_backward<float>(dy, n, dim, db);
    return;
  }
  for_column_blocks(dim, pool, [&](int64_t c0, int64_t c1) {
    float acc[kColBlock] = {};
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = c0; i < c1; ++i) acc[i - c0] += dy[r * dim + i];
    for (int64_t i = c0; i < c1; ++i) db[i] += acc[i - c0];
  });
}

void train_adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a, ThreadPool& pool) {
  pool.parallel_for(n, 65536, [&](int64_t b, int64_t e, int) {
    if (scalar()) {
      ref::train_adamw<float>(p + b, g + b, m + b, v + b, e - b, a);
      return;
    }
    const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
    const float decay = static_cast<float>(1.0 - a.lr * a.weight_decay);
    const float step_size = static_cast<float>(a.lr / bc1), inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const float b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
    const float ob1 = static_cast<float>(1.0 - a.beta1), ob2 = static_cast<float>(1.0 - a.beta2);
    const float eps = static_cast<float>(a.eps), gs = a.grad_scale;
    for (int64_t i = b; i < e; ++i) {
      const float gi = g[i] * gs;
      const float mi = b1 * m[i] + ob1 * gi;
      const float vi = b2 * v[i] + ob2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
  });
}

double train_sum_squares(const float* g, int64_t n, ThreadPool& pool) {
  if (scalar()) return ref::train_sum_squares(g, n);
  constexpr int64_t kChunk = 65536;
  const int64_t nc = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(nc));
  pool.parallel_for(nc, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t c = b; c < e; ++c) part[c] = ts::sum_squares(g + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  double s = 0;
  for (double x : part) s += x;
  return s;
}

}  // namespace ember
