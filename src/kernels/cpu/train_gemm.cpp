// The training GEMM (kernels/train.h train_gemm) at the AVX2 and AVX-512
// levels: Goto-style blocking around the micro-kernels of train_gemm.h.
//
// For each slab of kKc values of k (in order): the slab of op(B) is packed
// once into NR-wide panels shared by all threads, then the output is cut
// into blocks of kMc x kNc, handed out dynamically; each block packs its slab
// of op(A) into MR-high panels and runs the micro-kernel over its tiles.
// When op(B) is the wider operand (N > M) the driver computes C^T =
// op(B)^T op(A)^T instead, so the shared slab is always the narrower one.
//
// Bits: every element of C is, per slab, an f32 fma chain over its k in
// order started at 0, then added to C (or stored, for the first slab
// without accumulate). Neither the thread count, the block a tile falls in,
// the swap, nor the micro-kernel's shape (6 x 16 at AVX2, 12 x 32 at
// AVX-512) changes that, so both levels give the same bits with any threads.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/train_gemm.h"
#include "kernels/train.h"

namespace ember {
namespace {

constexpr int64_t kKc = 256;  // k per slab
constexpr int64_t kMc = 192;  // rows of C per block (a multiple of every MR)
constexpr int64_t kNc = 512;  // columns of C per block (a multiple of every NR)

// A matrix read as op(X)[r, c].
struct Operand {
  const float* p;
  int64_t ld;
  bool t;  // element (r, c) at p[c * ld + r]
};

struct FloatBuf {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  size_t n = 0;
  float* get(size_t want) {
    if (want > n) {
      const size_t bytes = (want * sizeof(float) + 63) / 64 * 64;
      p.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      n = want;
    }
    return p.get();
  }
};

// Rows [r0, r0 + rows) x cols [c0, c0 + cols) of op(X), packed into panels
// of `w` rows: dst[(i / w) * cols * w + c * w + i % w], zero-padded to a
// multiple of w rows. (op(A) packs its rows m; op(B) packs B^T, its columns n.)
void pack_panels(const Operand& x, bool by_rows, int64_t r0, int64_t rows, int64_t c0, int64_t cols, int w,
                 float* dst) {
  // by_rows: panels run along r (op(A)); else along c, with (r, c) of op(B)
  // read as (c, r) (its panels run along n).
  for (int64_t p0 = 0; p0 < rows; p0 += w) {
    float* d = dst + p0 * cols;
    const int64_t pr = std::min<int64_t>(w, rows - p0);
    // Element (i, c) of this panel: op(X)[r0 + p0 + i, c0 + c] (by_rows) or
    // op(X)[c0 + c, r0 + p0 + i].
    const bool contiguous_in_i = by_rows ? x.t : !x.t;
    if (contiguous_in_i) {
      for (int64_t c = 0; c < cols; ++c) {
        const float* s = x.p + (c0 + c) * x.ld + r0 + p0;
        float* dc = d + c * w;
        for (int64_t i = 0; i < pr; ++i) dc[i] = s[i];
        for (int64_t i = pr; i < w; ++i) dc[i] = 0.f;
      }
    } else {
      for (int64_t i = 0; i < pr; ++i) {
        const float* s = x.p + (r0 + p0 + i) * x.ld + c0;
        for (int64_t c = 0; c < cols; ++c) d[c * w + i] = s[c];
      }
      for (int64_t i = pr; i < w; ++i)
        for (int64_t c = 0; c < cols; ++c) d[c * w + i] = 0.f;
    }
  }
}

struct Problem {
  int64_t M, N, K;
  Operand a, b;  // op(A)[m, k], op(B)[k, n]
  float* c;
  int64_t ldc;
  bool tc;  // C element (m, n) at c[n * ldc + m]
  bool accumulate;
};

// One thread, the caller (attention's tiles run inside a parallel region).
struct Serial {
  int size() const { return 1; }
  template <typename F>
  void parallel_for(int64_t n, int64_t, F&& f) {
    if (n > 0) f(int64_t{0}, n, 0);
  }
};

template <typename Pool>
void gemm_blocked(const TrainGemmKernel& kr, const Problem& pr, Pool& pool) {
  const int mr = kr.mr, nr = kr.nr;
  const int64_t M = pr.M, N = pr.N, K = pr.K;
  const int64_t n_pad = (N + nr - 1) / nr * nr;
  const int nth = pool.size();
  thread_local FloatBuf b_buf, a_bufs;
  float* bp = b_buf.get(static_cast<size_t>(kKc * n_pad));
  const size_t a_stride = static_cast<size_t>(kMc * kKc + mr * nr);
  float* ap_all = a_bufs.get(a_stride * nth);
  const int64_t n_ib = (M + kMc - 1) / kMc, n_jb = (N + kNc - 1) / kNc;
  const int64_t n_panels = n_pad / nr;
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    pool.parallel_for(n_panels, std::max<int64_t>(1, n_panels / (4 * nth)), [&](int64_t b, int64_t e, int) {
      const int64_t c1 = std::min(N, e * nr);
      pack_panels(pr.b, false, b * nr, c1 - b * nr, k0, kc, nr, bp + b * nr * kc);
    });
    const bool add = pr.accumulate || k0 > 0;
    pool.parallel_for(n_ib * n_jb, 1, [&](int64_t ub, int64_t ue, int ith) {
      float* ap = ap_all + a_stride * ith;
      float* tile = ap + kMc * kKc;
      for (int64_t u = ub; u < ue; ++u) {
        const int64_t m0 = (u / n_jb) * kMc, n0 = (u % n_jb) * kNc;
        const int64_t mc = std::min(kMc, M - m0), nc = std::min(kNc, N - n0);
        pack_panels(pr.a, true, m0, mc, k0, kc, mr, ap);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const float* b = bp + (n0 + jr) * kc;
          const int64_t cols = std::min<int64_t>(nr, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const float* a = ap + ir * kc;
            const int64_t rows = std::min<int64_t>(mr, mc - ir);
            if (!pr.tc && rows == mr && cols == nr) {
              kr.fn(kc, a, b, pr.c + (m0 + ir) * pr.ldc + n0 + jr, pr.ldc, add);
              continue;
            }
            kr.fn(kc, a, b, tile, nr, false);
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = 0; j < cols; ++j) {
                const int64_t m = m0 + ir + i, n = n0 + jr + j;
                float& c = pr.tc ? pr.c[n * pr.ldc + m] : pr.c[m * pr.ldc + n];
                c = add ? c + tile[i * nr + j] : tile[i * nr + j];
              }
          }
        }
      }
    });
  }
}

template <typename Pool>
void gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B, int64_t ldb,
               bool tb, float* C, int64_t ldc, bool accumulate, Pool& pool) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.f);
    return;
  }
  const TrainGemmKernel kr = active_isa() >= Isa::kAvx512 ? avx512::train_gemm_kernel() : avx2::train_gemm_kernel();
  Problem pr{M, N, K, {A, lda, ta}, {B, ldb, tb}, C, ldc, false, accumulate};
  if (N > M) {  // C^T = op(B)^T op(A)^T: the shared slab is op(A)'s
    pr = Problem{N, M, K, {B, ldb, !tb}, {A, lda, !ta}, C, ldc, true, accumulate};
  }
  gemm_blocked(kr, pr, pool);
}

}  // namespace

// The fast GEMM of the AVX2 / AVX-512 levels (train_ops.cpp dispatches), on
// the pool or on the calling thread alone (same bits).
void train_gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool) {
  gemm_fast(M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, pool);
}
void train_gemm_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                       int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate) {
  Serial serial;
  gemm_fast(M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, serial);
}

}  // namespace ember
