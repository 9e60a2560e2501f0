// AVX2 kernels for the k-quant types (256-element super-blocks): vec_dot of
// Q2_K, Q3_K x Q8_K (Q4_K, Q5_K and Q6_K: the row lanes of
// avx2/kquants_lanes.cpp), the Q8_K activation quantizer and dequantizers.
//
// Scheme (all types): unsigned quants u (offset removed later) x Q8_K quants
// via maddubs -> i16 pairs, times the 16-bit sub-block scale via madd -> i32,
// summed over the whole super-block in i32 (bounded: < 2^31 for every type),
// then one cvt + FMA with d * dx per super-block. Offsets / mins are applied
// with the Q8_K bsums (sums of 16 activations) in a single madd.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

namespace ember::avx2 {
namespace {

using simd::load_f16;

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// i16 vector whose 16 lanes all hold lane k of an 8 x i16 vector duplicated in
// both 128-bit halves.
inline __m256i splat_i16(__m256i v8x2, int k) {
  return _mm256_shuffle_epi8(v8x2, _mm256_set1_epi16(static_cast<short>(((2 * k + 1) << 8) | (2 * k))));
}

// From 16 x i16 scales s[0..15]: lanes 0-7 = s[2p], lanes 8-15 = s[2p+1].
inline __m256i scale_pair_i16(__m256i s16, int p) {
  const __m256i t = _mm256_permutevar8x32_epi32(s16, _mm256_set1_epi32(p));
  const __m256i ctrl = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                        2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  return _mm256_shuffle_epi8(t, ctrl);
}

// m[0..7] bytes -> 16 x i16 [m0 m0 m1 m1 ... m7 m7] (pairs with bsums).
inline __m256i mins_for_bsums(const uint8_t* m) {
  const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m));
  const __m128i dup = _mm_shuffle_epi8(m8, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
  return _mm256_cvtepu8_epi16(dup);
}

}  // namespace

// Q2_K: 16 sub-blocks of 16, value = d*sc*q - dmin*m with q in 0..3; scales
// byte = sc | m << 4. Element 128h + 32j + l is bits 2j..2j+1 of qs[32h + l].
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
    const __m256i pm = _mm256_madd_epi16(loadu(x[i].bsums), m16);
    acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(dmin), acc_m);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = loadu(w[i].qs + 32 * h);
      const int8_t* y = x[i].qs + 128 * h;
      for (int j = 0; j < 4; ++j) {
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2);
        const __m256i p = _mm256_maddubs_epi16(u, loadu(y + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair_i16(sc16, 4 * h + j)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
  }
  *s = simd::hsum_f32x8(acc) - simd::hsum_f32x8(acc_m);
}

// Q3_K: value = sc * (lo2 + 4*hbit - 4), sc = 6-bit scale - 32. Element
// 128h + 32j + l: bits 2j of qs[32h + l], hbit = bit 4h + j of hmask[l].
// sum (lo2 + 4*hbit) * y via maddubs, minus 4 * sum_s sc[s] * bsum[s].
void q3_K_dot(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ3_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const int64_t nb = n / kQK_K;
  const __m256i m2 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = load_f16(w[i].d) * x[i].d;
    const __m256i sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(simd::unpack_q3_K_scales(w[i].scales)), _mm256_set1_epi16(32));
    const __m256i corr = _mm256_madd_epi16(loadu(x[i].bsums), sc16);
    __m256i hm = loadu(w[i].hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = loadu(w[i].qs + 32 * h);
      const int8_t* y = x[i].qs + 128 * h;
      for (int j = 0; j < 4; ++j) {
        // hmask bit (4h + j) -> bit 2 (value 4): shift the running copy.
        const __m256i hbit = _mm256_and_si256(_mm256_slli_epi16(hm, 2), b2);
        hm = _mm256_srli_epi16(hm, 1);
        const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2), hbit);
        const __m256i p = _mm256_maddubs_epi16(u, loadu(y + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair_i16(sc16, 4 * h + j)));
      }
    }
    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 2));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
  }
  *s = simd::hsum_f32x8(acc);
}

// ---- Q8_K activation quantizer (bit-identical to quantize_row_q8_K_ref) ----
//
// Reference: max = the first element with the largest |x|; iscale = -127/max;
// q = min(127, round-half-even(iscale * x)); d = 1/iscale; bsums = sums of 16.
// _mm256_cvtps_epi32 rounds half to even under the default MXCSR mode, like
// the reference's nearest_int.
void q8_K_quantize(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  const int64_t nb = n / kQK_K;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
    const float amax = simd::hmax_f32x8(m);
    if (amax == 0.0f) {
      y[i].d = 0.0f;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    int first = 0;
    while (std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.0f / x[first];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < kQK_K; j += 32) {
      const __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), vs)), cap);
      const __m256i b = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), vs)), cap);
      const __m256i c = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 16), vs)), cap);
      const __m256i e = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 24), vs)), cap);
      const __m256i q = simd::pack_i32x32_to_i8(a, b, c, e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), q);
      // Sums of 16: maddubs(1, q) -> pairs, madd -> quads; lanes 0-3 / 4-7
      // are the two groups of this 32-quant chunk.
      const __m256i quads = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
      const __m128i lo = _mm256_castsi256_si128(quads), hi = _mm256_extracti128_si256(quads, 1);
      const __m128i h = _mm_hadd_epi32(lo, hi);  // [l0+l1, l2+l3, h0+h1, h2+h3]
      const __m128i g = _mm_hadd_epi32(h, h);    // [group0, group1, ...]
      y[i].bsums[j / 16] = static_cast<int16_t>(_mm_cvtsi128_si32(g));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(_mm_extract_epi32(g, 1));
    }
    y[i].d = 1.0f / iscale;
  }
}

// ---- dequantizers (bit-identical to the reference: products rounded
// separately, dl = d * sc and ml = dmin * m computed in scalar first) ----

namespace {

// 32 unsigned bytes (values < 128) -> 32 floats dl * q - ml at y.
inline void store_affine_u8x32(__m256i q, float dl, float ml, float* y) {
  const __m256 vd = _mm256_set1_ps(dl), vm = _mm256_set1_ps(ml);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
    _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(vd, f), vm));
  }
}

// 16 signed bytes -> 16 floats dl * q at y.
inline void store_scaled_i8x16(__m128i q, float dl, float* y) {
  const __m256 vd = _mm256_set1_ps(dl);
  _mm256_storeu_ps(y, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))));
}

}  // namespace

void q4_K_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = load_f16(x[i].d), dmin = load_f16(x[i].dmin);
    alignas(16) uint8_t sc[8], m[8];
    simd::unpack_k4_scales(x[i].scales, sc, m);
    for (int j = 0; j < 4; ++j) {
      const __m256i qv = loadu(x[i].qs + 32 * j);
      store_affine_u8x32(_mm256_and_si256(qv, m4), d * static_cast<float>(sc[2 * j]),
                         dmin * static_cast<float>(m[2 * j]), y + 64 * j);
      store_affine_u8x32(_mm256_and_si256(_mm256_srli_epi16(qv, 4), m4), d * static_cast<float>(sc[2 * j + 1]),
                         dmin * static_cast<float>(m[2 * j + 1]), y + 64 * j + 32);
    }
  }
}

void q6_K_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = load_f16(x[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const __m256i qh = loadu(x[i].qh + 32 * h);
      const __m256i ql0 = loadu(ql), ql1 = loadu(ql + 32);
      __m256i u[4];
      u[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
      u[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
      u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
      u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_sub_epi8(u[c], off);
        const int e = 128 * h + 32 * c;
        store_scaled_i8x16(_mm256_castsi256_si128(q), d * static_cast<float>(x[i].scales[e / 16]), y + e);
        store_scaled_i8x16(_mm256_extracti128_si256(q, 1), d * static_cast<float>(x[i].scales[e / 16 + 1]),
                           y + e + 16);
      }
    }
  }
}

}  // namespace ember::avx2
