// Shared pieces of the AVX2 "row lanes" kernels (avx2/kquants_lanes.cpp,
// avx2/legacy_lanes.cpp): 8-row groups with row r of the group in 32-bit
// lane r of a ymm. Only included by files compiled for AVX2 (the avx2/
// directory); everything here is a stateless inline helper.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace ember::avx2::lanes8 {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i bcast32(const void* p) { return _mm256_set1_epi32(static_cast<int>(simd::load_u32(p))); }
// An opaque register copy: keeps GCC from re-associating a chain of integer
// adds into a tree that holds every product live (it spilled them all).
inline __m256i chain(__m256i v) {
  asm("" : "+x"(v));
  return v;
}

// Word pairs (v, v) of each dword lane's low 16 bits (sign kept).
inline __m256i dup_words(__m256i v) {
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

// Out[k] lane r = in[r] dword k (8 x 8 dword transpose).
inline void transpose8(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int r = 0; r < 8; r += 2) {
    t[r] = _mm256_unpacklo_epi32(in[r], in[r + 1]);      // r0 r1 (0,1 | 4,5)
    t[r + 1] = _mm256_unpackhi_epi32(in[r], in[r + 1]);  // (2,3 | 6,7)
  }
#pragma GCC unroll 2
  for (int g = 0; g < 8; g += 4) {
    u[g] = _mm256_unpacklo_epi64(t[g], t[g + 2]);          // rows g..g+3, dword 0 | 4
    u[g + 1] = _mm256_unpackhi_epi64(t[g], t[g + 2]);      // dword 1 | 5
    u[g + 2] = _mm256_unpacklo_epi64(t[g + 1], t[g + 3]);  // dword 2 | 6
    u[g + 3] = _mm256_unpackhi_epi64(t[g + 1], t[g + 3]);  // dword 3 | 7
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    out[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
    out[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
  }
}

// Lane r of the result = the total of v[r]'s 8 lanes (exact).
inline __m256i reduce8(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Byte offsets of the 8 rows (rows past nr repeat the last one).
inline __m256i row_offsets(size_t w_row_bytes, int nr) {
  alignas(32) int32_t off[8];
  for (int r = 0; r < 8; ++r) off[r] = static_cast<int32_t>(static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(off));
}

// Byte offsets of the 8 rows at w_row_bytes apart (rows past nr repeat the
// last one); the f16 at base + offsets[r] of the 8 rows, as f32 (lane r =
// row r). Reads a dword at each address: base + offset + 4 must be readable
// (the f16 scale leads a larger block in every caller).
inline __m256 gather_f16(const uint8_t* base, __m256i offsets) {
  const __m256i dd = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), offsets, 1);
  const __m256i w = _mm256_permute4x64_epi64(
      _mm256_packus_epi32(_mm256_and_si256(dd, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256()),
      _MM_SHUFFLE(3, 1, 2, 0));
  return _mm256_cvtph_ps(_mm256_castsi256_si128(w));
}

}  // namespace ember::avx2::lanes8
