// AVX-512 kernels for float weights x f32 activations: F32, F16 (vcvtph2ps)
// and BF16 (widen + shift; vdpbf16ps would need bf16 activations and lose
// precision): vec_dot, vec_dot_rows (decode) and the tile (prefill).
//
// Arithmetic (the contract of all three at this level, hence batch
// invariance): one 16-lane accumulator per (row, token),
//   acc = 0;  for each 16-element chunk c in order:  acc = fma(w_c, x_c, acc)
// with the last partial chunk loaded masked (zeros), then
//   result = hsum_f32x8(low 8 lanes + high 8 lanes).
// A single dot is then one dependent fma chain: latency-bound, but decode
// (memory-bound) is the only hot path that uses it. The tile runs kTileR rows
// x kTileC tokens = 24 chains, so the FMA units stay busy and each converted
// weight vector serves kTileC tokens.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_util.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside
// _mm512_cvtph_ps and the 512->256 extracts (their "undefined" passthrough
// operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

constexpr int kTileR = 4;      // tile micro-kernel: weight rows ...
constexpr int kTileC = 6;      // ... x tokens (24 accumulators)

// Weight formats: 16 elements (full or masked) as f32 lanes.
struct F32W {
  using T = float;
  static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16W {
  using T = uint16_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct BF16W {
  using T = uint16_t;
  static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  static __m512 load(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

inline float reduce(__m512 acc) {
  return simd::hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
}

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << (n & 15)) - 1); }

template <class W>
float dot(int64_t n, const typename W::T* w, const float* x) {
  __m512 acc = _mm512_setzero_ps();
  const int64_t full = n & ~int64_t{15};
  for (int64_t i = 0; i < full; i += 16) acc = _mm512_fmadd_ps(W::load(w + i), _mm512_loadu_ps(x + i), acc);
  if (full < n) {
    const __mmask16 m = tail_mask(n);
    acc = _mm512_fmadd_ps(W::load(w + full, m), _mm512_maskz_loadu_ps(m, x + full), acc);
  }
  return reduce(acc);
}

// Decode: rows one after another, each one fma chain. Sequential rows stream
// from memory at the prefetchers' best; interleaving even two rows' chains
// (more FMA overlap) measured ~2x slower on a DRAM-resident 262144 x 640 F16
// head, and the chain's latency (4 cycles per 16 elements) still allows
// ~28 GB/s of F16 weights per core, above what one core draws from DRAM.
template <class W>
void rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xf = static_cast<const float*>(x);
  for (int64_t r = 0; r < nr; ++r) s[r] = dot<W>(n, reinterpret_cast<const typename W::T*>(wb + r * w_row_bytes), xf);
}

// kTileR x kTileC block; rows / tokens past nr / nc repeat the last valid
// one (computed, not stored).
template <class W>
void micro(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
           size_t x_row_bytes, int nr, int nc) {
  using T = typename W::T;
  const T* wr[kTileR];
  const float* xc[kTileC];
  #pragma GCC unroll 8
  for (int r = 0; r < kTileR; ++r) wr[r] = reinterpret_cast<const T*>(w + std::min(r, nr - 1) * w_row_bytes);
  #pragma GCC unroll 8
  for (int c = 0; c < kTileC; ++c) xc[c] = reinterpret_cast<const float*>(x + std::min(c, nc - 1) * x_row_bytes);
  __m512 acc[kTileR][kTileC];
  #pragma GCC unroll 8
  for (int r = 0; r < kTileR; ++r)
    #pragma GCC unroll 8
    for (int c = 0; c < kTileC; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t full = n & ~int64_t{15};
  for (int64_t i = 0; i < full; i += 16) {
    __m512 wv[kTileR];
    #pragma GCC unroll 8
    for (int r = 0; r < kTileR; ++r) wv[r] = W::load(wr[r] + i);
    #pragma GCC unroll 8
    for (int c = 0; c < kTileC; ++c) {
      const __m512 xv = _mm512_loadu_ps(xc[c] + i);
      #pragma GCC unroll 8
      for (int r = 0; r < kTileR; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
  if (full < n) {
    const __mmask16 m = tail_mask(n);
    __m512 wv[kTileR];
    #pragma GCC unroll 8
    for (int r = 0; r < kTileR; ++r) wv[r] = W::load(wr[r] + full, m);
    #pragma GCC unroll 8
    for (int c = 0; c < kTileC; ++c) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xc[c] + full);
      #pragma GCC unroll 8
      for (int r = 0; r < kTileR; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
  for (int c = 0; c < nc; ++c)
    for (int r = 0; r < nr; ++r) s[c * lds + r] = reduce(acc[r][c]);
}

template <class W>
void tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x, size_t x_row_bytes,
          int nr, int nc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int r0 = 0; r0 < nr; r0 += kTileR) {
    const int tr = std::min(kTileR, nr - r0);
    for (int c0 = 0; c0 < nc; c0 += kTileC) {
      micro<W>(n, s + c0 * lds + r0, lds, wb + r0 * w_row_bytes, w_row_bytes, xb + c0 * x_row_bytes, x_row_bytes, tr,
               std::min(kTileC, nc - c0));
    }
  }
}

}  // namespace

void vec_dot_f32(int64_t n, float* s, const void* w, const void* x) {
  *s = dot<F32W>(n, static_cast<const float*>(w), static_cast<const float*>(x));
}
void vec_dot_f16(int64_t n, float* s, const void* w, const void* x) {
  *s = dot<F16W>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}
void vec_dot_bf16(int64_t n, float* s, const void* w, const void* x) {
  *s = dot<BF16W>(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
}

void vec_dot_rows_f32(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<F32W>(n, s, w, w_row_bytes, x, nr);
}
void vec_dot_rows_f16(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<F16W>(n, s, w, w_row_bytes, x, nr);
}
void vec_dot_rows_bf16(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  rows<BF16W>(n, s, w, w_row_bytes, x, nr);
}

void vec_dot_tile_f32(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                      size_t x_row_bytes, int nr, int nc) {
  tile<F32W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void vec_dot_tile_f16(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                      size_t x_row_bytes, int nr, int nc) {
  tile<F16W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void vec_dot_tile_bf16(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                       size_t x_row_bytes, int nr, int nc) {
  tile<BF16W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
