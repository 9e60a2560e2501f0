// Training attention (kernels/train.h) at the AVX2 and AVX-512 levels, in
// tiles through the training GEMM on each worker (train_gemm.cpp, one
// thread per tile):
//   forward   per (sequence, head, block of kQb queries): S = Q K^T over the
//             block's visible keys, masked / scaled / capped, P = softmax(S)
//             (its row log-sum-exp saved), O = P V;
//   backward  D = rowsum(dO * O); per (sequence, head, query block): P
//             recomputed from the saved lse, dP = dO V^T, dS = P (dP - D)
//             (times the cap's derivative and the scale), dQ = dS K; per
//             (sequence, KV head, block of kKb keys): the same over the
//             queries that see those keys, for each query head of the group
//             in order, dV += P^T dO and dK += dS^T Q.
// Memory: a tile's score rows (block x visible keys) per worker, never the
// whole score matrix. Each output element is reduced in a fixed order
// (its tile's GEMMs; heads of a group in order), whatever the threads.
// The scalar level runs the reference (kernels/ref/train.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/train_simd.h"
#include "kernels/ref/train.h"
#include "kernels/train.h"

namespace ember {

void train_gemm_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                       int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate);

namespace {

namespace ts = train_simd;

constexpr int64_t kQb = 64;  // queries per forward / dQ tile
constexpr int64_t kKb = 64;  // keys per dK / dV tile

struct Dims {
  int64_t L, H, Hkv, G, hd, hdv, ldq, ldk, ldv, ldo;
  explicit Dims(const TrainAttentionShape& s)
      : L(s.seq_len), H(s.n_head), Hkv(s.n_head_kv), G(s.n_head / s.n_head_kv), hd(s.head_dim),
        hdv(s.head_dim_v), ldq(H * hd), ldk(Hkv * hd), ldv(Hkv * hdv), ldo(H * hdv) {}
};

int64_t first_key(const TrainAttentionShape& s, int64_t t) {
  return s.window > 0 ? std::max<int64_t>(0, t - s.window + 1) : 0;
}

// Row i of a tile (query position t0 + i) over keys k0 .. k0 + nk - 1: the
// raw dot products in `row` become the probabilities exp(s - lse) (0 for
// keys the query does not see), s the scaled, capped score; with `cap_grad`
// the cap's derivative 1 - (s / cap)^2 goes there.
void probs_row(const TrainAttentionShape& s, float* row, int64_t nk, int64_t t, int64_t k0, float lse,
               float* cap_grad) {
  const int64_t lo = std::max<int64_t>(first_key(s, t) - k0, 0), hi = std::min<int64_t>(t - k0 + 1, nk);
  const __m256 vs = _mm256_set1_ps(s.scale), vl = _mm256_set1_ps(lse);
  const __m256 vc = _mm256_set1_ps(s.softcap), vic = _mm256_set1_ps(s.softcap > 0 ? 1.0f / s.softcap : 0.f);
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + j), vs);
    if (s.softcap > 0) {
      const __m256 th = ts::tanh8(_mm256_mul_ps(x, vic));
      x = _mm256_mul_ps(vc, th);
      if (cap_grad) _mm256_storeu_ps(cap_grad + j, _mm256_fnmadd_ps(th, th, _mm256_set1_ps(1.0f)));
    }
    _mm256_storeu_ps(row + j, ts::exp8(_mm256_sub_ps(x, vl)));
  }
  for (; j < hi; ++j) {
    float x = row[j] * s.scale;
    if (s.softcap > 0) {
      const float th = std::tanh(x / s.softcap);
      x = s.softcap * th;
      if (cap_grad) cap_grad[j] = 1.0f - th * th;
    }
    row[j] = std::exp(x - lse);
  }
  for (int64_t i = 0; i < lo; ++i) row[i] = 0.f;
  for (int64_t i = std::max<int64_t>(hi, 0); i < nk; ++i) row[i] = 0.f;
}

// The forward's row: raw dots -> probabilities (normalised), returns lse.
float softmax_row(const TrainAttentionShape& s, float* row, int64_t nk, int64_t t, int64_t k0) {
  const int64_t lo = std::max<int64_t>(first_key(s, t) - k0, 0), hi = std::min<int64_t>(t - k0 + 1, nk);
  float mx = -INFINITY;
  for (int64_t j = lo; j < hi; ++j) {
    float x = row[j] * s.scale;
    if (s.softcap > 0) x = s.softcap * std::tanh(x / s.softcap);
    row[j] = x;
    mx = std::max(mx, x);
  }
  double sum = 0;
  const __m256 vm = _mm256_set1_ps(mx);
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8) {
    const __m256 e = ts::exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
    _mm256_storeu_ps(row + j, e);
    sum += ts::hsum8(e);
  }
  for (; j < hi; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (j = lo; j < hi; ++j) row[j] *= inv;
  for (int64_t i = 0; i < lo; ++i) row[i] = 0.f;
  for (int64_t i = std::max<int64_t>(hi, 0); i < nk; ++i) row[i] = 0.f;
  return mx + static_cast<float>(std::log(sum));
}

// dS = P (dP - D) * cap_grad * scale, in place on dp.
void ds_row(const TrainAttentionShape& s, const float* p, float* dp, const float* cap_grad, int64_t nk, float D) {
  for (int64_t j = 0; j < nk; ++j) {
    float g = p[j] * (dp[j] - D) * s.scale;
    if (cap_grad) g *= cap_grad[j];
    dp[j] = g;
  }
}

// A backward tile of query head h: queries at positions t0 .. t0 + nq - 1
// (rows r0 ..) against keys k0 .. k0 + nk - 1 (rows kr0 ..): P (the
// probabilities, recomputed from the saved lse) and dS (in dP), [nq, nk];
// cap: the soft-cap's derivatives (scratch, when capped).
void tile_grads(const TrainAttentionShape& s, const Dims& d, const float* q, const float* k, const float* v,
                const float* dout, const float* lse, const float* D, int64_t r0, int64_t t0, int64_t nq, int64_t kr0,
                int64_t k0, int64_t nk, int64_t h, float* P, float* dP, float* cap) {
  const int64_t kvh = h / d.G;
  train_gemm_serial(nq, nk, d.hd, q + r0 * d.ldq + h * d.hd, d.ldq, false, k + kr0 * d.ldk + kvh * d.hd, d.ldk, true,
                    P, nk, false);
  train_gemm_serial(nq, nk, d.hdv, dout + r0 * d.ldo + h * d.hdv, d.ldo, false, v + kr0 * d.ldv + kvh * d.hdv, d.ldv,
                    true, dP, nk, false);
  for (int64_t i = 0; i < nq; ++i) {
    float* cg = cap ? cap + i * nk : nullptr;
    probs_row(s, P + i * nk, nk, t0 + i, k0, lse[(r0 + i) * d.H + h], cg);
    ds_row(s, P + i * nk, dP + i * nk, cg, nk, D[(r0 + i) * d.H + h]);
  }
}

}  // namespace

void train_attention_forward(const TrainAttentionShape& s, const float* q, const float* k, const float* v, float* out,
                             float* lse, ThreadPool& pool) {
  if (active_isa() == Isa::kScalar) {
    // Sequences over the pool (each the reference's).
    const Dims d(s);
    pool.parallel_for(s.n_seq, 1, [&](int64_t b, int64_t e, int) {
      TrainAttentionShape one = s;
      one.n_seq = e - b;
      ref::train_attention_forward<float>(one, q + b * d.L * d.ldq, k + b * d.L * d.ldk, v + b * d.L * d.ldv,
                                          out + b * d.L * d.ldo, lse + b * d.L * d.H);
    });
    return;
  }
  const Dims d(s);
  const int64_t n_qb = (d.L + kQb - 1) / kQb;
  pool.parallel_for(s.n_seq * d.H * n_qb, 1, [&](int64_t ub, int64_t ue, int) {
    std::vector<float> S;
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t b = u / (d.H * n_qb), h = u / n_qb % d.H, t0 = u % n_qb * kQb;
      const int64_t t1 = std::min(d.L, t0 + kQb), nq = t1 - t0, kvh = h / d.G;
      const int64_t k0 = first_key(s, t0), nk = t1 - k0;
      S.resize(static_cast<size_t>(nq * nk));
      train_gemm_serial(nq, nk, d.hd, q + (b * d.L + t0) * d.ldq + h * d.hd, d.ldq, false,
                        k + (b * d.L + k0) * d.ldk + kvh * d.hd, d.ldk, true, S.data(), nk, false);
      for (int64_t i = 0; i < nq; ++i)
        lse[(b * d.L + t0 + i) * d.H + h] = softmax_row(s, S.data() + i * nk, nk, t0 + i, k0);
      train_gemm_serial(nq, d.hdv, nk, S.data(), nk, false, v + (b * d.L + k0) * d.ldv + kvh * d.hdv, d.ldv, false,
                        out + (b * d.L + t0) * d.ldo + h * d.hdv, d.ldo, false);
    }
  });
}

void train_attention_backward(const TrainAttentionShape& s, const float* q, const float* k, const float* v,
                              const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv,
                              ThreadPool& pool) {
  const Dims d(s);
  if (active_isa() == Isa::kScalar) {
    pool.parallel_for(s.n_seq, 1, [&](int64_t b, int64_t e, int) {
      TrainAttentionShape one = s;
      one.n_seq = e - b;
      const int64_t r = b * d.L;
      ref::train_attention_backward<float>(one, q + r * d.ldq, k + r * d.ldk, v + r * d.ldv, out + r * d.ldo,
                                           lse + r * d.H, dout + r * d.ldo, dq + r * d.ldq, dk + r * d.ldk,
                                           dv + r * d.ldv);
    });
    return;
  }
  const int64_t N = s.n_seq * d.L;
  std::vector<float> D(static_cast<size_t>(N * d.H));
  pool.parallel_for(N, 64, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t h = 0; h < d.H; ++h)
        D[r * d.H + h] = ts::dot(dout + r * d.ldo + h * d.hdv, out + r * d.ldo + h * d.hdv, d.hdv);
  });
  const bool capped = s.softcap > 0;

  // dQ per query tile.
  const int64_t n_qb = (d.L + kQb - 1) / kQb;
  pool.parallel_for(s.n_seq * d.H * n_qb, 1, [&](int64_t ub, int64_t ue, int) {
    std::vector<float> P, dP, C;
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t b = u / (d.H * n_qb), h = u / n_qb % d.H, t0 = u % n_qb * kQb;
      const int64_t t1 = std::min(d.L, t0 + kQb), nq = t1 - t0, kvh = h / d.G;
      const int64_t k0 = first_key(s, t0), nk = t1 - k0;
      P.resize(static_cast<size_t>(nq * nk));
      dP.resize(P.size());
      if (capped) C.resize(P.size());
      const int64_t r0 = b * d.L + t0, kr0 = b * d.L + k0;
      tile_grads(s, d, q, k, v, dout, lse, D.data(), r0, t0, nq, kr0, k0, nk, h, P.data(), dP.data(),
                 capped ? C.data() : nullptr);
      train_gemm_serial(nq, d.hd, nk, dP.data(), nk, false, k + kr0 * d.ldk + kvh * d.hd, d.ldk, false,
                        dq + r0 * d.ldq + h * d.hd, d.ldq, false);
    }
  });

  // dK, dV per key tile, over the query heads of its group in order.
  const int64_t n_kb = (d.L + kKb - 1) / kKb;
  pool.parallel_for(s.n_seq * d.Hkv * n_kb, 1, [&](int64_t ub, int64_t ue, int) {
    std::vector<float> P, dP, C;
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t b = u / (d.Hkv * n_kb), kvh = u / n_kb % d.Hkv, j0 = u % n_kb * kKb;
      const int64_t j1 = std::min(d.L, j0 + kKb), nk = j1 - j0;
      const int64_t t1 = s.window > 0 ? std::min<int64_t>(d.L, j1 - 1 + s.window) : d.L, nq = t1 - j0;
      P.resize(static_cast<size_t>(nq * nk));
      dP.resize(P.size());
      if (capped) C.resize(P.size());
      const int64_t r0 = b * d.L + j0;  // first query row = first key row
      for (int64_t g = 0; g < d.G; ++g) {
        const int64_t h = kvh * d.G + g;
        tile_grads(s, d, q, k, v, dout, lse, D.data(), r0, j0, nq, r0, j0, nk, h, P.data(), dP.data(),
                   capped ? C.data() : nullptr);
        train_gemm_serial(nk, d.hdv, nq, P.data(), nk, true, dout + r0 * d.ldo + h * d.hdv, d.ldo, false,
                          dv + r0 * d.ldv + kvh * d.hdv, d.ldv, g > 0);
        train_gemm_serial(nk, d.hd, nq, dP.data(), nk, true, q + r0 * d.ldq + h * d.hd, d.ldq, false,
                          dk + r0 * d.ldk + kvh * d.hd, d.ldk, g > 0);
      }
    }
  });
}

}  // namespace ember
