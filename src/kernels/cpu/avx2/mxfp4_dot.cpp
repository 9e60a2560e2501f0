// AVX2 kernels for MXFP4 weights x Q8_0 activations: vec_dot and decode over
// many rows (each row one vec_dot, so the two forms agree bit for bit).
//
// Arithmetic (this level's contract): per block the 32 doubled E2M1 values
// (kMxfp4Values, looked up with pshufb) times the activation quants give 8
// exact i32 lane sums (maddubs on |w| and sign(x, w), then madd; pairs stay
// within i16: 2 * 12 * 127); they are converted and fma'd into one of two
// 8-lane f32 accumulators (even blocks the first, odd the second) with the
// block scale mxfp4_half_scale(e) * d_x; the result is hsum(acc0 + acc1).
#include <immintrin.h>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

namespace ember::avx2 {
namespace {

// The 32 signed weight bytes of a block: low nibbles then high nibbles.
inline __m256i mxfp4_weights(const uint8_t* qs, __m128i table) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(t, m4));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(t, 4), m4));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

inline __m256i block_sums(const BlockMXFP4& w, const BlockQ8_0& x, __m128i table) {
  const __m256i wq = mxfp4_weights(w.qs, table);
  const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  return simd::dot_u8s8_avx2(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xq, wq));
}

inline float dot_row(int64_t nb, const BlockMXFP4* w, const BlockQ8_0* x, __m128i table) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256 s0 = _mm256_set1_ps(mxfp4_half_scale(w[i].e) * simd::load_f16(x[i].d));
    const __m256 s1 = _mm256_set1_ps(mxfp4_half_scale(w[i + 1].e) * simd::load_f16(x[i + 1].d));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums(w[i], x[i], table)), s0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums(w[i + 1], x[i + 1], table)), s1, acc1);
  }
  if (i < nb) {
    const __m256 s0 = _mm256_set1_ps(mxfp4_half_scale(w[i].e) * simd::load_f16(x[i].d));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums(w[i], x[i], table)), s0, acc0);
  }
  return simd::hsum_f32x8(_mm256_add_ps(acc0, acc1));
}

inline __m128i value_table() { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)); }

}  // namespace

void mxfp4_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_row(n / kQK, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(x), value_table());
}

void mxfp4_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const __m128i table = value_table();
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < nr; ++r) {
    if (r + 1 < nr) _mm_prefetch(reinterpret_cast<const char*>(wb + (r + 1) * w_row_bytes), _MM_HINT_T0);
    s[r] = dot_row(n / kQK, reinterpret_cast<const BlockMXFP4*>(wb + r * w_row_bytes),
                   static_cast<const BlockQ8_0*>(x), table);
  }
}

}  // namespace ember::avx2
