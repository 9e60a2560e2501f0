// AVX-512 helpers shared by the tile kernels (gemm_*_avx512.cpp only: the
// code needs AVX-512 F/DQ). Internal linkage, like simd_util.h.
//
// The main helper reduces 16 eight-lane f32 vectors at once with exactly the
// additions simd::hsum_f32x8 performs on each, in the same operand order:
//   s4 = v[0:4] + v[4:8];  s2 = {s4[0] + s4[2], s4[1] + s4[3]};  h = s2[0] + s2[1]
// so every sum is bit-identical to hsum_f32x8 of its vector, at ~1/4 of the
// instructions of 16 separate reductions.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ember::tile512 {

// in[m] = [v(2m) | v(2m+1)] (two 8-lane vectors per zmm, m = 0..7) ->
// out[4 * L + e] = hsum_f32x8(v(4 * e + L)).
static inline __m512 hsum16(const __m512 in[8]) {
  __m512 s[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 lo = _mm512_shuffle_f32x4(in[2 * j], in[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(in[2 * j], in[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1));
    s[j] = _mm512_add_ps(lo, hi);  // 128-bit lane L: v(4j + L)[0:4] + v(4j + L)[4:8]
  }
  __m512 t[2];
#pragma GCC unroll 2
  for (int a = 0; a < 2; ++a) {
    const __m512 x = _mm512_shuffle_ps(s[2 * a], s[2 * a + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 y = _mm512_shuffle_ps(s[2 * a], s[2 * a + 1], _MM_SHUFFLE(3, 2, 3, 2));
    t[a] = _mm512_add_ps(x, y);  // lane L: [s2 of s[2a] lane L (2 values), s2 of s[2a+1] lane L]
  }
  const __m512 x = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 y = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_add_ps(x, y);
}

// [a.lo | b.lo] and [a.hi | b.hi] (256-bit halves).
static inline __m512 lo_halves(__m512 a, __m512 b) { return _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)); }
static inline __m512 hi_halves(__m512 a, __m512 b) { return _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)); }

// Writes a 4 x 4 tile of sums: r[4 * c + row] -> s[c * lds + row] for
// row < nr, c < nc.
static inline void store_tile4x4(__m512 r, float* s, int64_t lds, int nr, int nc) {
  alignas(64) float t[16];
  _mm512_store_ps(t, r);
  for (int c = 0; c < nc; ++c)
    for (int row = 0; row < nr; ++row) s[c * lds + row] = t[4 * c + row];
}

}  // namespace ember::tile512
