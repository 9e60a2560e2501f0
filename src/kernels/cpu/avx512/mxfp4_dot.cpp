// AVX-512 VNNI kernels for MXFP4 weights x Q8_0 activations: vec_dot and
// decode over many rows (each row one vec_dot, so the two forms agree bit for
// bit).
//
// Arithmetic (this level's contract): two blocks per zmm (block 2k in the
// low 256 bits, 2k + 1 in the high; a last odd block with zero weights and
// scale above it): vpdpbusd of |w| (the doubled E2M1 values, pshufb lookup)
// and sign(x, w) gives 16 exact i32 sums (8 per block); they are converted
// and fma'd into one 16-lane f32 accumulator with the blocks' scales
// mxfp4_half_scale(e) * d_x; the result is its horizontal sum. Differs from
// the AVX2 level only by float rounding.
#include <immintrin.h>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

inline __m256i mxfp4_weights(const uint8_t* qs, __m128i table) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(t, m4));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(t, 4), m4));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

inline __m256i load_x(const BlockQ8_0& x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)); }

inline float dot_row(int64_t nb, const BlockMXFP4* w, const BlockQ8_0* x, __m128i table) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i < nb; i += 2) {
    const bool pair = i + 1 < nb;
    const __m256i w0 = mxfp4_weights(w[i].qs, table);
    const __m256i w1 = pair ? mxfp4_weights(w[i + 1].qs, table) : _mm256_setzero_si256();
    const __m256i x1 = pair ? load_x(x[i + 1]) : _mm256_setzero_si256();
    const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    const __m512i xq = _mm512_inserti64x4(_mm512_castsi256_si512(load_x(x[i])), x1, 1);
    // sign(x, w) for bytes: negate where w < 0, zero where w == 0.
    const __mmask64 neg = _mm512_movepi8_mask(wq);
    const __mmask64 zero = _mm512_testn_epi8_mask(wq, wq);
    __m512i xs = _mm512_mask_sub_epi8(xq, neg, _mm512_setzero_si512(), xq);
    xs = _mm512_maskz_mov_epi8(~zero, xs);
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wq), xs);
    const float s0 = mxfp4_half_scale(w[i].e) * simd::load_f16(x[i].d);
    const float s1 = pair ? mxfp4_half_scale(w[i + 1].e) * simd::load_f16(x[i + 1].d) : 0.0f;
    const __m512 sc = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(s0)), _mm256_set1_ps(s1), 1);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), sc, acc);
  }
  return _mm512_reduce_add_ps(acc);
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

}  // namespace ember::avx512
