// AVX-512 (BW/VL + VNNI) vec_dot kernels for the k-quants Q2_K and Q3_K x
// Q8_K (Q4_K, Q5_K and Q6_K: avx512/kquants_lanes.cpp). Same scheme as the AVX2 kernels
// (maddubs u8 x s8 -> i16 pairs), but the sub-block scale multiply and the
// i32 accumulation fuse into one vpdpwssd (two accumulator chains hide its
// latency), scale vectors come from one vpermw instead of shuffle pairs, and
// high bits are merged with byte-mask adds.
#include <immintrin.h>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

namespace ember::avx512 {
namespace {

using simd::load_f16;

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Index vector for vpermw: lanes 0-7 pick i16 element a, lanes 8-15 element b.
inline __m256i pick2(int a, int b) {
  return _mm256_setr_epi16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
}

}  // namespace

// Q2_K: see the AVX2 kernel for the layout; scale multiply fused (vpdpwssd).
void q2_K_dot(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ2_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const int64_t nb = n / kQK_K;
  const __m256i m2 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = load_f16(w[i].d) * x[i].d;
    const float dmin = load_f16(w[i].dmin) * x[i].d;
    const __m128i sb = loadu128(w[i].scales);
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
    acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(loadu(x[i].bsums), m16)), _mm256_set1_ps(dmin), acc_m);
    __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = loadu(w[i].qs + 32 * h);
      const int8_t* y = x[i].qs + 128 * h;
      const int b = 8 * h;
      const __m256i u0 = _mm256_and_si256(qv, m2);
      const __m256i u1 = _mm256_and_si256(_mm256_srli_epi16(qv, 2), m2);
      const __m256i u2 = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m2);
      const __m256i u3 = _mm256_and_si256(_mm256_srli_epi16(qv, 6), m2);
      sum0 = _mm256_dpwssd_epi32(sum0, _mm256_maddubs_epi16(u0, loadu(y)), _mm256_permutexvar_epi16(pick2(b, b + 1), sc16));
      sum1 = _mm256_dpwssd_epi32(sum1, _mm256_maddubs_epi16(u1, loadu(y + 32)),
                                 _mm256_permutexvar_epi16(pick2(b + 2, b + 3), sc16));
      sum0 = _mm256_dpwssd_epi32(sum0, _mm256_maddubs_epi16(u2, loadu(y + 64)),
                                 _mm256_permutexvar_epi16(pick2(b + 4, b + 5), sc16));
      sum1 = _mm256_dpwssd_epi32(sum1, _mm256_maddubs_epi16(u3, loadu(y + 96)),
                                 _mm256_permutexvar_epi16(pick2(b + 6, b + 7), sc16));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), _mm256_set1_ps(d), acc);
  }
  *s = simd::hsum_f32x8(acc) - simd::hsum_f32x8(acc_m);
}

// Q3_K: value = sc * (lo2 + 4*hbit - 4); see the AVX2 kernel for the layout.
void q3_K_dot(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ3_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const int64_t nb = n / kQK_K;
  const __m256i m2 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = load_f16(w[i].d) * x[i].d;
    const __m256i sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(simd::unpack_q3_K_scales(w[i].scales)),
                                          _mm256_set1_epi16(32));
    const __m256i corr = _mm256_madd_epi16(loadu(x[i].bsums), sc16);
    const __m256i hm = loadu(w[i].hmask);
    __m256i sum0 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
    __m256i sum1 = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = loadu(w[i].qs + 32 * h);
      const int8_t* y = x[i].qs + 128 * h;
      const int b = 8 * h;
      __m256i u[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __mmask32 hb = _mm256_test_epi8_mask(hm, _mm256_set1_epi8(static_cast<char>(1 << (4 * h + j))));
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2);
        u[j] = _mm256_mask_add_epi8(lo, hb, lo, b2);
      }
      sum0 = _mm256_dpwssd_epi32(sum0, _mm256_maddubs_epi16(u[0], loadu(y)),
                                 _mm256_permutexvar_epi16(pick2(b, b + 1), sc16));
      sum1 = _mm256_dpwssd_epi32(sum1, _mm256_maddubs_epi16(u[1], loadu(y + 32)),
                                 _mm256_permutexvar_epi16(pick2(b + 2, b + 3), sc16));
      sum0 = _mm256_dpwssd_epi32(sum0, _mm256_maddubs_epi16(u[2], loadu(y + 64)),
                                 _mm256_permutexvar_epi16(pick2(b + 4, b + 5), sc16));
      sum1 = _mm256_dpwssd_epi32(sum1, _mm256_maddubs_epi16(u[3], loadu(y + 96)),
                                 _mm256_permutexvar_epi16(pick2(b + 6, b + 7), sc16));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), _mm256_set1_ps(d), acc);
  }
  *s = simd::hsum_f32x8(acc);
}

}  // namespace ember::avx512
