// The Q4_K / Q6_K quant unpacking and the 16 x 16 dword transpose shared by
// the AVX-512 row-lane kernels (avx512/lanes_kquants.cpp) and token-lane
// kernels (avx512/lanes_kquants_tokens.cpp). Include only from avx512/ files
// (compiled with the AVX-512 flags). Pure register functions, no state.
#pragma once

#include <immintrin.h>

#include "quant/blocks.h"

// GCC 12 warns about the intrinsics' deliberately undefined inputs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512::kq {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// u[j] = [low nibbles | high nibbles] of qs[32j .. 32j + 32]: elements
// 64j .. 64j + 63 in order, so dword k of u[j] is elements 64j + 4k .. + 3.
inline void unpack_nibbles(const BlockQ4_K& b, __m512i u[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
    u[j] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(loadu(b.qs + 32 * j)), shifts), m4);
}

// u[m] = the unsigned quants (0..63) of Q6_K elements 64m .. 64m + 63 in
// order (element e: low 4 bits from ql, 2 high bits from qh).
inline void unpack_q6(const BlockQ6_K& b, __m512i u[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  // qh shifts: [<< 4 | << 2] for the first 64, [>> 0 | >> 2] for the second.
  const __m512i sl = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
  const __m512i sr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(loadu(b.qh + 32 * h));
    u[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, m4), _mm512_sllv_epi16(qh, sl), m2, 0xf8);
    u[2 * h + 1] =
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_srlv_epi16(qh, sr), m2, 0xf8);
  }
}

// Out[k] lane r = in[r] dword k (16 x 16 dword transpose).
__attribute__((always_inline)) inline void transpose16(const __m512i in[16], __m512i out[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int r = 0; r < 16; r += 2) {
    t[r] = _mm512_unpacklo_epi32(in[r], in[r + 1]);
    t[r + 1] = _mm512_unpackhi_epi32(in[r], in[r + 1]);
  }
  // u[4g + c], 128-bit chunk L: rows 4g .. 4g + 3 of dword 4L + c.
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i p0 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i p1 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i q0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i q1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
    out[c] = _mm512_shuffle_i32x4(p0, q0, _MM_SHUFFLE(2, 0, 2, 0));
    out[4 + c] = _mm512_shuffle_i32x4(p0, q0, _MM_SHUFFLE(3, 1, 3, 1));
    out[8 + c] = _mm512_shuffle_i32x4(p1, q1, _MM_SHUFFLE(2, 0, 2, 0));
    out[12 + c] = _mm512_shuffle_i32x4(p1, q1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

}  // namespace ember::avx512::kq

#pragma GCC diagnostic pop
