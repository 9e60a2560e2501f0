// AVX2 kernels for the legacy 32-element block types: vec_dot for Q4_1 /
// Q5_1 x Q8_1, the Q8_0 / Q8_1 activation quantizers and the Q4_0 / Q5_0 /
// Q8_0 dequantizers. (Q4_0 / Q5_0 / Q8_0 x Q8_0 dots: avx2/legacy_lanes.cpp.)
//
// Integer dot products use maddubs (u8 x s8 -> i16 pairs) + madd (-> i32) on
// the unsigned quants; the mins enter as m * s per block. Each block's i32
// sums are converted once and accumulated in f32 with FMA (driver shared with
// the AVX-512 file: simd::legacy_blocks_dot, 8 blocks per step).
#include <immintrin.h>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

namespace ember::avx2 {
namespace {

using simd::dot_u8s8_avx2;
using simd::load_f16;

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline __m256i q5_quants(const uint8_t* qs, const uint8_t* qh) {
  const __m256i hb = _mm256_and_si256(simd::bits_to_bytes_mask(simd::load_u32(qh)), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(simd::unpack_nibbles_16(qs), hb);
}

}  // namespace

// Q4_1 / Q5_1: w = d*q + m with unsigned q; x = dx*qx with s = dx*sum(qx):
// dot = d*dx*(q . qx) + m*s.
void q4_1_dot(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  const int64_t nb = n / kQK;
  *s = simd::legacy_blocks_dot(
           nb, w, sizeof(*w), x, sizeof(*x),
           [&](int64_t i) { return dot_u8s8_avx2(simd::unpack_nibbles_16(w[i].qs), loadu(x[i].qs)); }) +
       simd::legacy_blocks_min_term(nb, w, sizeof(*w), x, sizeof(*x), 2);
}

void q5_1_dot(int64_t n, float* s, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  const int64_t nb = n / kQK;
  *s = simd::legacy_blocks_dot(
           nb, w, sizeof(*w), x, sizeof(*x),
           [&](int64_t i) { return dot_u8s8_avx2(q5_quants(w[i].qs, w[i].qh), loadu(x[i].qs)); }) +
       simd::legacy_blocks_min_term(nb, w, sizeof(*w), x, sizeof(*x), 2);
}

// ---- activation quantizers (bit-identical to quantize_row_q8_{0,1}_ref) ----

namespace {

// Quantizes one 32-float block with round-half-away-from-zero; returns d
// (amax / 127) and writes the 32 quants. *qsum gets sum(q).
inline float quantize_block_q8(const float* x, int8_t* q, int* qsum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs_mask), _mm256_and_ps(v1, abs_mask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, abs_mask), _mm256_and_ps(v3, abs_mask)));
  const float amax = simd::hmax_f32x8(m);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i i0 = simd::round_away_epi32(_mm256_mul_ps(v0, vid));
  const __m256i i1 = simd::round_away_epi32(_mm256_mul_ps(v1, vid));
  const __m256i i2 = simd::round_away_epi32(_mm256_mul_ps(v2, vid));
  const __m256i i3 = simd::round_away_epi32(_mm256_mul_ps(v3, vid));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), simd::pack_i32x32_to_i8(i0, i1, i2, i3));
  if (qsum) *qsum = simd::hsum_i32x8(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
  return d;
}

}  // namespace

void q8_0_quantize(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = quantize_block_q8(x + i * kQK, y[i].qs, nullptr);
    y[i].d = f32_to_f16(d);
  }
}

// 4-bit levels in Q8_0 blocks (quant/quantize.h quantize_row_q8_0_int4_ref):
// d = amax / 7, q = round-half-away(x / d) clamped to [-7, 7].
void q8_0_quantize_int4(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i lo = _mm256_set1_epi32(-7), hi = _mm256_set1_epi32(7);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + 8 * k);
    const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                                   _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    const float d = simd::hmax_f32x8(m) / 7.0f;
    const __m256 vid = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = _mm256_min_epi32(hi, _mm256_max_epi32(lo, simd::round_away_epi32(_mm256_mul_ps(v[k], vid))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), simd::pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
    y[i].d = f32_to_f16(d);
  }
}

void q8_1_quantize(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(vy);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i) {
    int sum = 0;
    const float d = quantize_block_q8(x + i * kQK, y[i].qs, &sum);
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

// ---- dequantizers (bit-identical to the reference: (float)q * d) ----

namespace {

// Converts 32 int8 (as __m256i) times d into 32 floats at y.
inline void store_scaled_i8x32(__m256i q, float d, float* y) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(y + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vd));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vd));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vd));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vd));
}

}  // namespace

void q8_0_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i) store_scaled_i8x32(loadu(x[i].qs), load_f16(x[i].d), y + i * kQK);
}

void q4_0_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = _mm256_sub_epi8(simd::unpack_nibbles_16(x[i].qs), _mm256_set1_epi8(8));
    store_scaled_i8x32(q, load_f16(x[i].d), y + i * kQK);
  }
}

void q5_0_dequantize(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = _mm256_sub_epi8(q5_quants(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
    store_scaled_i8x32(q, load_f16(x[i].d), y + i * kQK);
  }
}

}  // namespace ember::avx2
