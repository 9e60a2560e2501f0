// The Q4_K / Q5_K / Q6_K quant unpacking and the 16 x 16 dword transpose shared by
// the AVX-512 row-lane kernels (avx512/kquants_lanes.cpp) and token-lane
// kernels (avx512/kquants_tokens.cpp). Include only from avx512/ files
// (compiled with the AVX-512 flags) and amx/ files. Pure register functions, no state.
#pragma once

#include <immintrin.h>

#include "quant/blocks.h"

// GCC 12 warns about the intrinsics' deliberately undefined inputs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512::kq {
// Internal linkage: included by TUs with different ISA flags (avx512/, amx/),
// whose copies of an inline function the linker must not merge.
namespace {

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

// The same for Q5_K (quants 0..31): the nibbles as Q4_K, bit 4 of element
// 64j + l (l < 32) from bit 2j of qh[l], of 64j + 32 + l from bit 2j + 1.
// One variable shift per half moves that bit to position 4 of its byte (no
// bit reaches position 4 of a neighbouring byte), then a | (b & 0x10).
inline void unpack_q5(const BlockQ5_K& b, __m512i u[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  const __m512i qh = _mm512_broadcast_i64x4(loadu(b.qh));
  auto halves = [](int lo, int hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(lo))),
                              _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
  };
  const __m512i hb[4] = {_mm512_sllv_epi16(qh, halves(4, 3)), _mm512_sllv_epi16(qh, halves(2, 1)),
                         _mm512_srlv_epi16(qh, halves(0, 1)), _mm512_srlv_epi16(qh, halves(2, 3))};
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(loadu(b.qs + 32 * j)), shifts), m4);
    u[j] = _mm512_ternarylogic_epi32(nib, hb[j], m10, 0xF8);
  }
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

// ---- interleaved layouts (kernels/interleave.h): 16 rows per vector ----

// vpshufb indices: pair_index(j) makes dword r of each 128-bit lane the i16
// pair (b, b) of byte 4 (r % 4) + j of that lane (dword r's byte j).
inline __m512i pair_index(int j) {
  const __m512i q = _mm512_set_epi32(0xC000C, 0x80008, 0x40004, 0, 0xC000C, 0x80008, 0x40004, 0, 0xC000C, 0x80008,
                                     0x40004, 0, 0xC000C, 0x80008, 0x40004, 0);
  return _mm512_add_epi32(q, _mm512_set1_epi32(static_cast<int>(0x80008000u | (static_cast<unsigned>(j) << 16) |
                                                                  static_cast<unsigned>(j))));
}

// Q4_K_R16 super-block at p: its 6-bit scales and mins unpacked, dword r of
// each vector = row r's four values (sc: sub-blocks 0..3 | 4..7; m: same).
struct R16Q4KScales {
  __m512i sc_lo, sc_hi, m_lo, m_hi;
};
inline R16Q4KScales r16_q4k_scales(const uint8_t* p) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(63), m30 = _mm512_set1_epi8(0x30);
  const __m512i z0 = _mm512_loadu_si512(p + 64), z1 = _mm512_loadu_si512(p + 128), z2 = _mm512_loadu_si512(p + 192);
  R16Q4KScales r;
  r.sc_lo = _mm512_and_si512(z0, m6);
  r.m_lo = _mm512_and_si512(z1, m6);
  r.sc_hi = _mm512_or_si512(_mm512_and_si512(z2, m4), _mm512_and_si512(_mm512_srli_epi16(z0, 2), m30));
  r.m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z2, 4), m4), _mm512_and_si512(_mm512_srli_epi16(z1, 2), m30));
  return r;
}
// The mins operand of the Q4_K_R16 passes: dword r = row r's i16 pairs
// (m_0, m_2), (m_1, m_3), (m_4, m_6), (m_5, m_7) (dword r of m_lo holds m_0 .. m_3).
inline void r16_q4k_min_pairs(const R16Q4KScales& sc, __m512i mp[4]) {
  const __m512i m00ff = _mm512_set1_epi32(0x00FF00FF);
  mp[0] = _mm512_and_si512(sc.m_lo, m00ff);
  mp[1] = _mm512_srli_epi16(sc.m_lo, 8);
  mp[2] = _mm512_and_si512(sc.m_hi, m00ff);
  mp[3] = _mm512_srli_epi16(sc.m_hi, 8);
}
// ... and the activation side: a token's sub-block sums S_s = bsums[2s] +
// bsums[2s + 1] of one super-block (|S_s| <= 32 * 128) as the i16 pairs
// (S_0, S_2), (S_1, S_3), (S_4, S_6), (S_5, S_7) that meet mp[0 .. 3].
inline void q4k_bsum_pairs(const BlockQ8_K& x, int32_t out[4]) {
  const __m128i ones = _mm_set1_epi16(1);
  const __m128i s03 = _mm_madd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums)), ones);
  const __m128i s47 = _mm_madd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums + 8)), ones);
  // i16 S_0 .. S_7 -> (S_0, S_2), (S_1, S_3), (S_4, S_6), (S_5, S_7).
  const __m128i order = _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_shuffle_epi8(_mm_packs_epi32(s03, s47), order));
}
constexpr int kR16Q4KQuants = 256;  // byte offset of the qs vectors in a Q4_K_R16 super-block
constexpr int kR16Q6KScales = 32, kR16Q6KQl = 288, kR16Q6KQh = 2336;  // Q6_K_R16 field offsets

// Q6_K_R16: the unsigned quants of elements 128h + 32e + 4k .. + 3 (e = 0..3)
// of the 16 rows, from ql vectors 16h + k, 16h + 8 + k and qh vector 8h + k.
inline void r16_q6k_quants(const uint8_t* p, int h, int k, __m512i e[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i l0 = _mm512_loadu_si512(p + kR16Q6KQl + 64 * (16 * h + k));
  const __m512i l1 = _mm512_loadu_si512(p + kR16Q6KQl + 64 * (16 * h + 8 + k));
  const __m512i qh = _mm512_loadu_si512(p + kR16Q6KQh + 64 * (8 * h + k));
  // a | (b & 0x30): one vpternlogd (0xF8) per vector.
  e[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(l0, m4), _mm512_slli_epi16(qh, 4), m30, 0xF8);
  e[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(l1, m4), _mm512_slli_epi16(qh, 2), m30, 0xF8);
  e[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), qh, m30, 0xF8);
  e[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), _mm512_srli_epi16(qh, 2), m30, 0xF8);
}

// Q6_K_R16: lane r of the result = row r's signed scale of group g (i32).
inline __m512i r16_q6k_scale(const uint8_t* p, int g) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kR16Q6KScales + 16 * g)));
}
// ... and dword r = the i16 pair (scale 2k, scale 2k + 1) of row r.
inline __m512i r16_q6k_scale_pair(const uint8_t* p, int k) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                       20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i v =
      _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kR16Q6KScales + 32 * k)));
  return _mm512_permutexvar_epi16(idx, v);
}

}  // namespace
}  // namespace ember::avx512::kq

#pragma GCC diagnostic pop
