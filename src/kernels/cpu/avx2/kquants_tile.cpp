// AVX2 tile kernels (VecDotTileFn, kernels/registry.h) for the k-quant
// weight types Q2_K and Q3_K x Q8_K activations (Q4_K, Q5_K and Q6_K have
// the row-lane kernels of avx2/kquants_lanes.cpp): up to
// kKquantsTileRows weight rows x kKquantsTileCols tokens per call, in register
// blocks of one row x kGroup (8) tokens. (Single tokens go to the row
// kernels: kernels/matmul.cpp.)
//
// Batch invariance: every output is bit-identical to this level's vec_dot
// (avx2/kquants_dot.cpp). Per super-block that kernel forms exact 8 x i32 lane
// sums (lane l covers bytes 4l..4l+3 of each 32-byte chunk, weighted by the
// sub-block scales; integer sums are exact, so any grouping gives the same
// values) and then rounds only in these steps, which we replicate in order:
//   Q2_K: acc   = fma(float(sumi), f16(d) * x.d,    acc)
//         acc_m = fma(float(pm),   f16(dmin) * x.d, acc_m),  pm = bsums . mins
//         result = hsum_f32x8(acc) - hsum_f32x8(acc_m)
//         (its mins pair with bsums one to one)
//   Q3_K: acc = fma(float(sumi -  4 * bsums . sc), f16(d) * x.d, acc)
//         result = hsum_f32x8(acc)
// A weight row's super-block is unpacked (nibbles, high bits, scale splats)
// once per token group and each unpacked 32-byte chunk serves the group's 8
// tokens from registers (8 tokens measured ~8% faster than 4 on Zen 4: the
// unpacking is amortized over more tokens).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/registry.h"
#include "quant/blocks.h"

namespace ember::avx2 {
namespace {

constexpr int kR = kKquantsTileRows;
constexpr int kGroup = 8;  // tokens per register block

using simd::load_f16;

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

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

// ---- the float steps of the vec_dot contract, per token of a group ----

struct AccQ4K {
  __m256 a, m;  // acc, acc_m of the vec_dot contract
};

// Types with mins (Q2_K): acc_m += (bsums . mins) * f16(dmin) * x.d,
// acc += sumi * f16(d) * x.d.
template <int NT>
inline void finish_with_mins(const __m256i sumi[], __m256i mins, f16_t d16, f16_t dmin16,
                             const BlockQ8_K* const xb[kGroup], AccQ4K acc[kGroup]) {
  const float d = load_f16(d16), dmin = load_f16(dmin16);
#pragma GCC unroll 8
  for (int c = 0; c < NT; ++c) {
    const __m256i pm = _mm256_madd_epi16(loadu(xb[c]->bsums), mins);
    acc[c].m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(dmin * xb[c]->d), acc[c].m);
    acc[c].a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_set1_ps(d * xb[c]->d), acc[c].a);
  }
}

// Types with a constant offset 1 << kShift (Q6_K: 32, Q3_K: 4):
// acc += (sumi - offset * (bsums . scales)) * f16(d) * x.d.
template <int NT, int kShift>
inline void finish_with_offset(const __m256i sumi[], __m256i sc16, f16_t d16, const BlockQ8_K* const xb[kGroup],
                               __m256 acc[kGroup]) {
  const float d = load_f16(d16);
#pragma GCC unroll 8
  for (int c = 0; c < NT; ++c) {
    const __m256i corr = _mm256_madd_epi16(loadu(xb[c]->bsums), sc16);
    const __m256i si = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(corr, kShift));
    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_set1_ps(d * xb[c]->d), acc[c]);
  }
}

// ---- Q2_K: 16 sub-blocks of 16, 2-bit quants, 4-bit scales and mins ----

struct TraitsQ2K {
  using Block = BlockQ2_K;
  using Acc = AccQ4K;
  static Acc zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }

  template <int NT>
  static void pass(const Block& b, const BlockQ8_K* const xb[kGroup], Acc acc[kGroup]) {
    const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
    const __m256i m2 = _mm256_set1_epi8(3);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int c = 0; c < NT; ++c) sumi[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = loadu(b.qs + 32 * h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2);
        const __m256i sp = scale_pair_i16(sc16, 4 * h + j);
#pragma GCC unroll 8
        for (int c = 0; c < NT; ++c) {
          const __m256i p = _mm256_maddubs_epi16(u, loadu(xb[c]->qs + 128 * h + 32 * j));
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, sp));
        }
      }
    }
    finish_with_mins<NT>(sumi, m16, b.d, b.dmin, xb, acc);
  }
  static float result(const Acc& a) { return simd::hsum_f32x8(a.a) - simd::hsum_f32x8(a.m); }
};

// ---- Q3_K: 2 low bits + a high bit (hmask), offset 4, 16 signed 6-bit scales ----

struct TraitsQ3K {
  using Block = BlockQ3_K;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }

  template <int NT>
  static void pass(const Block& b, const BlockQ8_K* const xb[kGroup], Acc acc[kGroup]) {
    const __m256i m2 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
    const __m256i sc16 =
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(simd::unpack_q3_K_scales(b.scales)), _mm256_set1_epi16(32));
    __m256i hm = loadu(b.hmask);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int c = 0; c < NT; ++c) sumi[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = loadu(b.qs + 32 * h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        // hmask bit (4h + j) -> bit 2 (value 4).
        const __m256i hbit = _mm256_and_si256(_mm256_slli_epi16(hm, 2), b2);
        hm = _mm256_srli_epi16(hm, 1);
        const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2), hbit);
        const __m256i sp = scale_pair_i16(sc16, 4 * h + j);
#pragma GCC unroll 8
        for (int c = 0; c < NT; ++c) {
          const __m256i p = _mm256_maddubs_epi16(u, loadu(xb[c]->qs + 128 * h + 32 * j));
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, sp));
        }
      }
    }
    finish_with_offset<NT, 2>(sumi, sc16, b.d, xb, acc);
  }
  static float result(const Acc& a) { return simd::hsum_f32x8(a); }
};


// ---- shared driver ----

template <class T, int NT>
void group_rows(int64_t nb, const typename T::Block* const wr[kR], int nr, const BlockQ8_K* const xc[kGroup], int nt,
                float* s, int64_t lds) {
  typename T::Acc acc[kR][kGroup];
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < kGroup; ++c) acc[r][c] = T::zero();
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_K* xb[kGroup];
    for (int c = 0; c < kGroup; ++c) xb[c] = xc[c] + i;
    for (int r = 0; r < nr; ++r) T::template pass<NT>(wr[r][i], xb, acc[r]);
  }
  for (int c = 0; c < nt; ++c)
    for (int r = 0; r < nr; ++r) s[c * lds + r] = T::result(acc[r][c]);
}

template <class T>
void kquant_tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                 size_t x_row_bytes, int nr, int nc) {
  using Block = typename T::Block;
  const Block* wr[kR];
  for (int r = 0; r < kR; ++r)
    wr[r] = reinterpret_cast<const Block*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes);
  const int64_t nb = n / kQK_K;
  for (int g = 0; g < nc; g += kGroup) {
    const int nt = std::min(kGroup, nc - g);
    const BlockQ8_K* xc[kGroup];
    for (int c = 0; c < kGroup; ++c)
      xc[c] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(g + std::min(c, nt - 1)) * x_row_bytes);
    float* sg = s + g * lds;
    // Partial groups run the next instantiated size on repeated tokens.
    if (nt > 4) {
      group_rows<T, 8>(nb, wr, nr, xc, nt, sg, lds);
    } else if (nt > 2) {
      group_rows<T, 4>(nb, wr, nr, xc, nt, sg, lds);
    } else if (nt == 2) {
      group_rows<T, 2>(nb, wr, nr, xc, nt, sg, lds);
    } else {
      group_rows<T, 1>(nb, wr, nr, xc, nt, sg, lds);
    }
  }
}

}  // namespace

void q2_K_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  kquant_tile<TraitsQ2K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                         x_row_bytes, nr, nc);
}
void q3_K_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int nr, int nc) {
  kquant_tile<TraitsQ3K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                         x_row_bytes, nr, nc);
}
}  // namespace ember::avx2
