// The training GEMM (kernels/train.h train_gemm) at the AVX2 and AVX-512
// levels: Goto-style blocking around the micro-kernels of train_gemm.h.
//
// Loops (outermost first): column panels of kNo columns of C; slabs of kKc
// values of k, in order: the slab of op(B) for the panel is packed once into
// NR-wide panels shared by all threads; then the panel's output is cut into
// blocks of kMc x kNc handed out dynamically, each packing its slab of op(A)
// into MR-high panels and running the micro-kernel over its tiles. Packed
// memory: kKc x kNo floats shared plus kMc x kKc per thread, whatever the
// shape (a 262144-wide output head included).
//
// A small output over a long k (at most 2 row blocks, k >= 4 kSplitK) is
// split into fixed blocks of kSplitK values of k, one product per block
// (into a partial) spread over the threads, the partials added to C in
// block order.
//
// Bits: every element of C is, per slab (kKc, or kKcLong for one block of
// rows over a long k: a function of the shape), an f32 fma chain over its k
// in order started at 0, then added to C (or stored, for the first slab
// without accumulate); split products add their fixed blocks' results in
// order (the same split with any number of threads). Neither the thread count, the block a tile falls in
// nor the micro-kernel's shape (6 x 16 at AVX2, 12 x 32 at AVX-512) changes
// that, so both levels give the same bits with any threads.
#include <immintrin.h>

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
constexpr int64_t kKcLong = 1024;  // k per slab of a long, narrow product (fewer barriers)
constexpr int64_t kSplitK = 16384; // k per block of a small output over a long k (split over threads)
constexpr int64_t kMc = 192;  // rows of C per block (a multiple of every MR)
constexpr int64_t kNc = 512;  // columns of C per block (a multiple of every NR)
constexpr int64_t kNo = 4096; // columns of C per shared slab of op(B) (a multiple of kNc)

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

// dst[j * ldd + i] = src[i * lds + j] for an 8 x 8 block.
inline void transpose8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// The same for a 4 x 4 block.
inline void transpose4(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + lds), r2 = _mm_loadu_ps(src + 2 * lds),
         r3 = _mm_loadu_ps(src + 3 * lds);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + ldd, r1);
  _mm_storeu_ps(dst + 2 * ldd, r2);
  _mm_storeu_ps(dst + 3 * ldd, r3);
}

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
      // Source rows are contiguous in c: transpose 8 x 8 blocks.
      int64_t i = 0;
      for (; i + 8 <= pr; i += 8) {
        const float* s = x.p + (r0 + p0 + i) * x.ld + c0;
        int64_t c = 0;
        for (; c + 8 <= cols; c += 8) transpose8(s + c, x.ld, d + c * w + i, w);
        for (; c < cols; ++c)
          for (int64_t j = 0; j < 8; ++j) d[c * w + i + j] = s[j * x.ld + c];
      }
      for (; i + 4 <= pr; i += 4) {
        const float* s = x.p + (r0 + p0 + i) * x.ld + c0;
        int64_t c = 0;
        for (; c + 4 <= cols; c += 4) transpose4(s + c, x.ld, d + c * w + i, w);
        for (; c < cols; ++c)
          for (int64_t j = 0; j < 4; ++j) d[c * w + i + j] = s[j * x.ld + c];
      }
      for (; i < pr; ++i) {
        const float* s = x.p + (r0 + p0 + i) * x.ld + c0;
        for (int64_t c = 0; c < cols; ++c) d[c * w + i] = s[c];
      }
      for (i = pr; i < w; ++i)
        for (int64_t c = 0; c < cols; ++c) d[c * w + i] = 0.f;
    }
  }
}

struct Problem {
  int64_t M, N, K;
  Operand a, b;  // op(A)[m, k], op(B)[k, n]
  float* c;
  int64_t ldc;
  bool accumulate;
};

// The f32 products: panels of floats, kc values of k each.
struct F32Format {
  using Elem = float;
  TrainGemmKernel kr;
  int mr() const { return kr.mr; }
  int nr() const { return kr.nr; }
  static int64_t kstride(int64_t kc) { return kc; }  // elements per panel row of the slab
  void pack(const Operand& x, bool by_rows, int64_t r0, int64_t rows, int64_t c0, int64_t cols, int w, float* dst,
            float*) const {
    pack_panels(x, by_rows, r0, rows, c0, cols, w, dst);
  }
  void kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool add) const {
    kr.fn(kc, a, b, c, ldc, add);
  }
};

// The bf16 products: the f32 panel rounded to bf16 pairs of consecutive k
// (avx512/train_gemm.cpp), kc rounded up to even (a zero pads).
struct Bf16Format {
  using Elem = uint16_t;
  TrainGemmKernelBf16 kr;
  int mr() const { return kr.mr; }
  int nr() const { return kr.nr; }
  static int64_t kstride(int64_t kc) { return (kc + 1) / 2 * 2; }
  void pack(const Operand& x, bool by_rows, int64_t r0, int64_t rows, int64_t c0, int64_t cols, int w, uint16_t* dst,
            float* scratch) const {
    for (int64_t p0 = 0; p0 < rows; p0 += w) {
      pack_panels(x, by_rows, r0 + p0, std::min<int64_t>(w, rows - p0), c0, cols, w, scratch);
      kr.pack_pairs(scratch, cols, w, dst + p0 * kstride(cols));
    }
  }
  void kernel(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, bool add) const {
    kr.fn(kstride(kc) / 2, a, b, c, ldc, add);
  }
};

// The tiles of C rows [m0, m0 + mc) x columns [n0, n0 + nc) from packed
// panels of op(A) (ap: rows m0..) and op(B) (bp: columns n0..), one slab of
// kc: C = (add ? C : 0) + the slab's products.
template <typename Fmt>
void run_tiles(const Fmt& f, const Problem& pr, const typename Fmt::Elem* ap, const typename Fmt::Elem* bp, int64_t kc,
               int64_t m0, int64_t mc, int64_t n0, int64_t nc, bool add, float* tile) {
  const int mr = f.mr(), nr = f.nr();
  const int64_t ks = Fmt::kstride(kc);
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const typename Fmt::Elem* b = bp + jr * ks;
    const int64_t cols = std::min<int64_t>(nr, nc - jr);
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const typename Fmt::Elem* a = ap + ir * ks;
      const int64_t rows = std::min<int64_t>(mr, mc - ir);
      float* c = pr.c + (m0 + ir) * pr.ldc + n0 + jr;
      if (rows == mr && cols == nr) {
        f.kernel(kc, a, b, c, pr.ldc, add);
        continue;
      }
      f.kernel(kc, a, b, tile, nr, false);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          float& x = c[i * pr.ldc + j];
          x = add ? x + tile[i * nr + j] : tile[i * nr + j];
        }
    }
  }
}

// One thread, the caller (attention's tiles run inside a parallel region).
struct Serial {
  int size() const { return 1; }
  template <typename F>
  void parallel_for(int64_t n, int64_t, F&& f) {
    if (n > 0) f(int64_t{0}, n, 0);
  }
};

// Per-thread scratch of a product: the op(A) block, a tile, and (bf16) an
// f32 panel to round from. Sized in floats (bf16 panels use half).
constexpr size_t kScratchPanel = static_cast<size_t>(kKcLong * 32);

template <typename Pool, typename Fmt>
void gemm_blocked(const Fmt& f, const Problem& pr, Pool& pool) {
  using E = typename Fmt::Elem;
  const int mr = f.mr(), nr = f.nr();
  const int64_t M = pr.M, N = pr.N, K = pr.K;
  const int nth = pool.size();
  thread_local FloatBuf b_buf, a_bufs;
  E* bp = reinterpret_cast<E*>(b_buf.get(static_cast<size_t>(kKcLong * std::min(kNo, (N + nr - 1) / nr * nr))));
  const size_t a_stride = static_cast<size_t>(kMc * kKcLong + mr * nr) + kScratchPanel;
  float* ap_all = a_bufs.get(a_stride * nth);
  const int64_t n_ib = (M + kMc - 1) / kMc;
  // One block of rows over a long k (the head's dX: 256 x 640 over k =
  // 262144 within a split block): slabs of kKcLong, a quarter of the
  // synchronisations.
  const int64_t ks = n_ib == 1 && K > 16 * kKc ? kKcLong : kKc;
  if (n_ib == 1 && K <= 8 * kKc) {
    // One block of rows and a short k: nothing to share. Each column block
    // runs every slab on its own (its own packing of op(A), which is small,
    // no barrier per slab): the output head's forward (rows x 262144
    // columns). Narrow blocks when there are few, so every thread has work.
    int64_t nc_blk = kNc;
    while (nc_blk > nr && (N + nc_blk - 1) / nc_blk < 4 * nth) nc_blk /= 2;
    nc_blk = std::max<int64_t>(nr, nc_blk / nr * nr);
    thread_local FloatBuf priv;
    const size_t b_stride = static_cast<size_t>(kKc * nc_blk);
    float* all = priv.get((a_stride + b_stride) * nth);
    pool.parallel_for((N + nc_blk - 1) / nc_blk, 1, [&](int64_t ub, int64_t ue, int ith) {
      float* base = all + (a_stride + b_stride) * ith;
      E* ap = reinterpret_cast<E*>(base);
      float* tile = base + kMc * kKcLong;
      float* scratch = tile + mr * nr;
      E* bpr = reinterpret_cast<E*>(base + a_stride);
      for (int64_t u = ub; u < ue; ++u) {
        const int64_t n0 = u * nc_blk, nc = std::min(nc_blk, N - n0);
        for (int64_t k0 = 0; k0 < K; k0 += kKc) {
          const int64_t kc = std::min(kKc, K - k0);
          const bool add = pr.accumulate || k0 > 0;
          f.pack(pr.b, false, n0, nc, k0, kc, nr, bpr, scratch);
          f.pack(pr.a, true, 0, M, k0, kc, mr, ap, scratch);
          run_tiles(f, pr, ap, bpr, kc, 0, M, n0, nc, add, tile);
        }
      }
    });
    return;
  }
  thread_local FloatBuf b_scratch;
  float* bscr_all = b_scratch.get(kScratchPanel * static_cast<size_t>(nth));
  for (int64_t no = 0; no < N; no += kNo) {
    const int64_t nw = std::min(kNo, N - no);  // columns of this panel
    // Blocks of kNc columns, narrower when that leaves threads idle (the
    // head's dX: 128 x 640 outputs over k = 262144).
    int64_t nc_blk = kNc;
    if (n_ib * ((nw + nc_blk - 1) / nc_blk) < 2 * nth) {
      const int64_t want = (2 * nth + n_ib - 1) / n_ib;
      nc_blk = std::max<int64_t>(nr, ((nw + want - 1) / want + nr - 1) / nr * nr);
    }
    const int64_t n_panels = (nw + nr - 1) / nr, n_jb = (nw + nc_blk - 1) / nc_blk;
    for (int64_t k0 = 0; k0 < K; k0 += ks) {
      const int64_t kc = std::min(ks, K - k0), kst = Fmt::kstride(kc);
      pool.parallel_for(n_panels, std::max<int64_t>(1, n_panels / (4 * nth)), [&](int64_t b, int64_t e, int ith) {
        const int64_t c1 = std::min(nw, e * nr);
        f.pack(pr.b, false, no + b * nr, c1 - b * nr, k0, kc, nr, bp + b * nr * kst,
               bscr_all + kScratchPanel * static_cast<size_t>(ith));
      });
      const bool add = pr.accumulate || k0 > 0;
      pool.parallel_for(n_ib * n_jb, 1, [&](int64_t ub, int64_t ue, int ith) {
        float* base = ap_all + a_stride * ith;
        E* ap = reinterpret_cast<E*>(base);
        float* tile = base + kMc * kKcLong;
        float* scratch = tile + mr * nr;
        for (int64_t u = ub; u < ue; ++u) {
          const int64_t m0 = (u / n_jb) * kMc, n0 = (u % n_jb) * nc_blk;  // n0 within the panel
          const int64_t mc = std::min(kMc, M - m0), nc = std::min(nc_blk, nw - n0);
          f.pack(pr.a, true, m0, mc, k0, kc, mr, ap, scratch);
          run_tiles(f, pr, ap, bp + n0 * kst, kc, m0, mc, no + n0, nc, add, tile);
        }
      });
    }
  }
}

template <typename Pool, typename Fmt>
void gemm_fast(const Fmt& f, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
               int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, Pool& pool) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.f);
    return;
  }
  if (M <= 2 * kMc && K >= 4 * kSplitK) {
    // A small output over a long k (the head's dX: 256 x 640 over k =
    // 262144): blocks of kSplitK values of k over the threads, each product
    // into a partial of its own, the partials then added in block order.
    const int64_t nb = (K + kSplitK - 1) / kSplitK;
    std::vector<float> part(static_cast<size_t>(nb * M * N));
    pool.parallel_for(nb, 1, [&](int64_t b0, int64_t b1, int) {
      Serial serial;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t k0 = b * kSplitK, kb = std::min(kSplitK, K - k0);
        const Problem p{M, N, kb, {ta ? A + k0 * lda : A + k0, lda, ta}, {tb ? B + k0 : B + k0 * ldb, ldb, tb},
                        part.data() + b * M * N, N, false};
        gemm_blocked(f, p, serial);
      }
    });
    pool.parallel_for(M, 1, [&](int64_t m0, int64_t m1, int) {
      for (int64_t m = m0; m < m1; ++m) {
        float* c = C + m * ldc;
        if (!accumulate) std::fill(c, c + N, 0.f);
        for (int64_t b = 0; b < nb; ++b) {
          const float* pb = part.data() + b * M * N + m * N;
          for (int64_t n = 0; n < N; ++n) c[n] += pb[n];
        }
      }
    });
    return;
  }
  const Problem pr{M, N, K, {A, lda, ta}, {B, ldb, tb}, C, ldc, accumulate};
  gemm_blocked(f, pr, pool);
}

F32Format f32_format() {
  return F32Format{active_isa() >= Isa::kAvx512 ? avx512::train_gemm_kernel() : avx2::train_gemm_kernel()};
}

}  // namespace

// The fast GEMMs of the AVX2 / AVX-512 levels (train_ops.cpp dispatches), on
// the pool or on the calling thread alone (same bits).
void train_gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                     int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool) {
  gemm_fast(f32_format(), M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, pool);
}
void train_gemm_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                       int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate) {
  Serial serial;
  gemm_fast(f32_format(), M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, serial);
}
void train_gemm_bf16_fast(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B,
                          int64_t ldb, bool tb, float* C, int64_t ldc, bool accumulate, ThreadPool& pool) {
  gemm_fast(Bf16Format{avx512::train_gemm_kernel_bf16()}, M, N, K, A, lda, ta, B, ldb, tb, C, ldc, accumulate, pool);
}

}  // namespace ember
