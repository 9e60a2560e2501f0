// AVX-512 tile kernels (VecDotTileFn) for float weights x f32 activations:
// F32, F16 and BF16, kFloatTileRows rows x up to kFloatTileCols tokens per
// call in register blocks of kTileR rows x kTileC tokens (24 fma chains, so
// the FMA units stay busy and each converted weight vector serves kTileC
// tokens).
//
// Arithmetic (the contract of vec_dot, vec_dot_rows and the tile at this
// level, hence batch invariance): one 16-lane accumulator per (row, token),
//   acc = 0;  for each 16-element chunk c in order:  acc = fma(w_c, x_c, acc)
// with the last partial chunk loaded masked (zeros), then
//   result = hsum_f32x8(low 8 lanes + high 8 lanes)
// (f512::reduce in kernels/cpu/simd.h).
// Every output is then bit-identical to float_dot.cpp's vec_dot.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized inside
// _mm512_cvtph_ps and the 512->256 extracts (their "undefined" passthrough
// operands); false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

using f512::reduce;
using f512::tail_mask;

constexpr int kTileR = 4;      // tile micro-kernel: weight rows ...
constexpr int kTileC = 6;      // ... x tokens (24 accumulators)

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

void f32_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int nr, int nc) {
  tile<f512::F32W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void f16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int nr, int nc) {
  tile<f512::F16W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}
void bf16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  tile<f512::BF16W>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
