// AVX-512 VNNI kernels for MXFP4 weights x Q8_0 activations: vec_dot,
// decode over many rows (each row one vec_dot) and the tile (prefill: each
// block pair of a row decoded once for up to kMxfp4TileCols tokens, each
// token's sums in the very order vec_dot takes), so every form agrees with
// vec_dot bit for bit.
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

// One block pair of a row, decoded: |w| and the masks sign(x, w) needs.
struct PairW {
  __m512i abs_w;
  __mmask64 neg, nonzero;
  float sw0, sw1;  // the blocks' half scales (0 for a missing second block)
};

inline PairW decode_pair(const BlockMXFP4* w, int64_t i, int64_t nb, __m128i table) {
  const bool pair = i + 1 < nb;
  const __m256i w0 = mxfp4_weights(w[i].qs, table);
  const __m256i w1 = pair ? mxfp4_weights(w[i + 1].qs, table) : _mm256_setzero_si256();
  const __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
  return {_mm512_abs_epi8(wq), _mm512_movepi8_mask(wq), _mm512_test_epi8_mask(wq, wq), mxfp4_half_scale(w[i].e),
          pair ? mxfp4_half_scale(w[i + 1].e) : 0.0f};
}

// acc += one block pair's products with the activation blocks x[i], x[i + 1].
inline __m512 pair_step(const PairW& p, const BlockQ8_0* x, int64_t i, int64_t nb, __m512 acc) {
  const bool pair = i + 1 < nb;
  const __m256i x1 = pair ? load_x(x[i + 1]) : _mm256_setzero_si256();
  const __m512i xq = _mm512_inserti64x4(_mm512_castsi256_si512(load_x(x[i])), x1, 1);
  // sign(x, w) for bytes: negate where w < 0, zero where w == 0.
  __m512i xs = _mm512_mask_sub_epi8(xq, p.neg, _mm512_setzero_si512(), xq);
  xs = _mm512_maskz_mov_epi8(p.nonzero, xs);
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), p.abs_w, xs);
  const float s0 = p.sw0 * simd::load_f16(x[i].d);
  const float s1 = pair ? p.sw1 * simd::load_f16(x[i + 1].d) : 0.0f;
  const __m512 sc = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(s0)), _mm256_set1_ps(s1), 1);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), sc, acc);
}

inline float dot_row(int64_t nb, const BlockMXFP4* w, const BlockQ8_0* x, __m128i table) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i += 2) acc = pair_step(decode_pair(w, i, nb, table), x, i, nb, acc);
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

void mxfp4_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                size_t x_row_bytes, int nr, int nc) {
  const __m128i table = value_table();
  const int64_t nb = n / kQK;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int r = 0; r < nr; ++r) {
    const auto* wr = reinterpret_cast<const BlockMXFP4*>(wb + r * w_row_bytes);
    __m512 acc[kMxfp4TileCols];
    for (int c = 0; c < nc; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 2) {
      const PairW p = decode_pair(wr, i, nb, table);
      for (int c = 0; c < nc; ++c)
        acc[c] = pair_step(p, reinterpret_cast<const BlockQ8_0*>(xb + c * x_row_bytes), i, nb, acc[c]);
    }
    for (int c = 0; c < nc; ++c) s[c * lds + r] = _mm512_reduce_add_ps(acc[c]);
  }
}

}  // namespace ember::avx512
