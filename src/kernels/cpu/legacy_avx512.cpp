// AVX-512 (F/BW/VL + VNNI) vec_dot kernels for the legacy 32-element block
// types: Q4_0 x Q8_0 and Q4_1/Q5_1 x Q8_1 (Q8_0 / Q5_0 x Q8_0 live in
// gemm_lanes_avx512.cpp with their tile kernels). Compiled with -mavx512*
// flags; only reached through the registry when the CPU has AVX-512 VNNI.
//
// vpdpbusd multiplies u8 x s8 in groups of 4 into i32, replacing AVX2's
// maddubs + madd pair. Offset types (Q4_0 = q - 8) multiply the
// unsigned quants and subtract offset * sum(y), computed by a second
// vpdpbusd. 256-bit vectors: one block per vector (blocks are 34/18/22 bytes
// apart, so 512-bit loads would need extra shuffles; on Zen 4 512-bit ops
// cost two 256-bit ones anyway).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_util.h"
#include "quant/blocks.h"

namespace ember::avx512 {
namespace {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// (u - offset) . y for unsigned quants u.
inline __m256i dot_offset(__m256i u, __m256i y, __m256i offset) {
  const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y);
  const __m256i c = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, y);
  return _mm256_sub_epi32(p, c);
}

// Q5 quants (0..31): nibbles plus 16 where the qh bit is set (mask add).
inline __m256i q5_quants(const uint8_t* qs, const uint8_t* qh) {
  const __mmask32 hb = simd::load_u32(qh);
  const __m256i nib = simd::unpack_nibbles_16(qs);
  return _mm256_mask_add_epi8(nib, hb, nib, _mm256_set1_epi8(16));
}

}  // namespace

void vec_dot_q4_0_q8_0(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  const __m256i off = _mm256_set1_epi8(8);
  *s = simd::legacy_blocks_dot(n / kQK, w, sizeof(*w), x, sizeof(*x), [&](int64_t i) {
    return dot_offset(simd::unpack_nibbles_16(w[i].qs), loadu(x[i].qs), off);
  });
}

void vec_dot_q4_1_q8_1(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  const int64_t nb = n / kQK;
  *s = simd::legacy_blocks_dot(nb, w, sizeof(*w), x, sizeof(*x),
                               [&](int64_t i) {
                                 return _mm256_dpbusd_epi32(_mm256_setzero_si256(), simd::unpack_nibbles_16(w[i].qs),
                                                            loadu(x[i].qs));
                               }) +
       simd::legacy_blocks_min_term(nb, w, sizeof(*w), x, sizeof(*x), 2);
}

void vec_dot_q5_1_q8_1(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  const int64_t nb = n / kQK;
  *s = simd::legacy_blocks_dot(nb, w, sizeof(*w), x, sizeof(*x),
                               [&](int64_t i) {
                                 return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q5_quants(w[i].qs, w[i].qh),
                                                            loadu(x[i].qs));
                               }) +
       simd::legacy_blocks_min_term(nb, w, sizeof(*w), x, sizeof(*x), 2);
}

}  // namespace ember::avx512
