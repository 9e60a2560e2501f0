// AVX2 kernels for MXFP4 weights x Q8_0 activations: vec_dot, decode over
// many rows (each row one vec_dot) and the tile (prefill: each block pair of
// a row decoded once for up to 4 tokens, each token's sums in the very order
// vec_dot takes), so every form agrees with vec_dot bit for bit.
//
// Arithmetic (this level's contract): per block the 32 doubled E2M1 values
// (kMxfp4Values, looked up with pshufb) times the activation quants give 8
// exact i32 lane sums (maddubs on |w| and sign(x, w), then madd; pairs stay
// within i16: 2 * 12 * 127); they are converted and fma'd into one of two
// 8-lane f32 accumulators (even blocks the first, odd the second) with the
// block scale mxfp4_half_scale(e) * d_x; the result is hsum(acc0 + acc1).
#include <immintrin.h>

#include <algorithm>

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

// The 8 lane sums of one block: |w| (abs_w) times sign(x, w).
inline __m256i decoded_sums(__m256i abs_w, __m256i wq, const BlockQ8_0& x) {
  const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  return simd::dot_u8s8_avx2(abs_w, _mm256_sign_epi8(xq, wq));
}

inline __m256i block_sums(const BlockMXFP4& w, const BlockQ8_0& x, __m128i table) {
  const __m256i wq = mxfp4_weights(w.qs, table);
  return decoded_sums(_mm256_sign_epi8(wq, wq), wq, x);
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

// The tile's token group: NT tokens share each decoded block pair.
constexpr int kGroup = 4;

// One row x NT tokens (xc[c], c < NT; nt <= NT of them written, to s[c * lds]):
// dot_row's arithmetic per token (even blocks into acc0, odd into acc1, a
// last odd block into acc0, hsum(acc0 + acc1)), the weights decoded once.
template <int NT>
void row_tokens(int64_t nb, const BlockMXFP4* w, const BlockQ8_0* const xc[kGroup], int nt, float* s, int64_t lds,
                __m128i table) {
  __m256 acc0[NT], acc1[NT];
  for (int c = 0; c < NT; ++c) acc0[c] = acc1[c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i w0 = mxfp4_weights(w[i].qs, table), w1 = mxfp4_weights(w[i + 1].qs, table);
    const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
    const float h0 = mxfp4_half_scale(w[i].e), h1 = mxfp4_half_scale(w[i + 1].e);
    for (int c = 0; c < NT; ++c) {
      const BlockQ8_0* x = xc[c];
      const __m256 s0 = _mm256_set1_ps(h0 * simd::load_f16(x[i].d));
      const __m256 s1 = _mm256_set1_ps(h1 * simd::load_f16(x[i + 1].d));
      acc0[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(decoded_sums(a0, w0, x[i])), s0, acc0[c]);
      acc1[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(decoded_sums(a1, w1, x[i + 1])), s1, acc1[c]);
    }
  }
  if (i < nb) {
    const __m256i w0 = mxfp4_weights(w[i].qs, table);
    const __m256i a0 = _mm256_sign_epi8(w0, w0);
    const float h0 = mxfp4_half_scale(w[i].e);
    for (int c = 0; c < NT; ++c) {
      const BlockQ8_0* x = xc[c];
      const __m256 s0 = _mm256_set1_ps(h0 * simd::load_f16(x[i].d));
      acc0[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(decoded_sums(a0, w0, x[i])), s0, acc0[c]);
    }
  }
  for (int c = 0; c < nt; ++c) s[c * lds] = simd::hsum_f32x8(_mm256_add_ps(acc0[c], acc1[c]));
}

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
  for (int g = 0; g < nc; g += kGroup) {
    const int nt = std::min(kGroup, nc - g);
    // A partial group runs the next instantiated size on a repeated token.
    const BlockQ8_0* xc[kGroup];
    for (int c = 0; c < kGroup; ++c)
      xc[c] = reinterpret_cast<const BlockQ8_0*>(xb + static_cast<size_t>(g + std::min(c, nt - 1)) * x_row_bytes);
    for (int r = 0; r < nr; ++r) {
      const auto* wr = reinterpret_cast<const BlockMXFP4*>(wb + static_cast<size_t>(r) * w_row_bytes);
      float* sg = s + g * lds + r;
      if (nt > 2)
        row_tokens<4>(nb, wr, xc, nt, sg, lds, table);
      else if (nt == 2)
        row_tokens<2>(nb, wr, xc, nt, sg, lds, table);
      else
        row_tokens<1>(nb, wr, xc, nt, sg, lds, table);
    }
  }
}

}  // namespace ember::avx2
