// AVX-512 (F/BW/VL + VNNI) tile kernels for the legacy 32-element weight
// types Q4_0 / Q5_0 / Q8_0 x Q8_0 activations: up to 4 weight rows x 4
// activation rows per call (kernels/registry.h, VecDotTileFn), for prompt
// processing; nc == 1 is the decode path (4 rows, one token).
//
// Batch invariance: every output is bit-identical to the single-pair vec_dot
// of this level (simd::legacy_blocks_dot in legacy_{avx2,avx512}.cpp). That
// kernel's float state is two 8-lane accumulators: block b goes to acc[b % 2]
// for b below nb rounded down to a multiple of 4, the remaining (< 4) tail
// blocks to acc0; each step is acc = fma(float(p_b), dw_b * dx_b, acc) with
// p_b the block's 8 x i32 lane sums (lane l = sum of products 4l..4l+3) and
// the result is hsum_f32x8(acc0 + acc1). Integer lane sums are exact, so we
// may compute them differently: here one vpdpbusd per pair on unsigned
// weight quants u = q + offset, seeded with -offset * sum4(y) (computed once
// per activation block). The float steps are replicated exactly, with acc0
// and acc1 packed as the low / high halves of one zmm (blocks b, b+1 in one
// instruction), tail blocks masked to the low half.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_util.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Two 32-byte rows -> one zmm [a | b].
inline __m512i load2(const void* a, const void* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(loadu(a)), loadu(b), 1);
}

// f16 scales of two blocks -> [f(a) x 8 | f(b) x 8].
inline __m512 scales2(uint16_t a, uint16_t b) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (static_cast<uint32_t>(b) << 16))));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_zextps128_ps512(f));
}

// 16 packed nibbles of two blocks -> zmm [lo(a) hi(a) | lo(b) hi(b)] (the
// layout of unpack_nibbles_16, per 256-bit half).
inline __m512i nibbles2(const uint8_t* a, const uint8_t* b) {
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
  // 128-bit lanes [q0 | q1 | q0 >> 4 | q1 >> 4] -> [0, 2, 1, 3].
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
  return _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

// Weight formats: unsigned quants u (0..255) such that the signed weight is
// u - kOffset, for one block (ymm) or two consecutive blocks (zmm).
struct WeightQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m256i unpack1(const Block& b) { return _mm256_xor_si256(loadu(b.qs), _mm256_set1_epi8(-128)); }
  static __m512i unpack2(const Block& b0, const Block& b1) {
    return _mm512_xor_si512(load2(b0.qs, b1.qs), _mm512_set1_epi8(-128));
  }
};

struct WeightQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m256i unpack1(const Block& b) { return simd::unpack_nibbles_16(b.qs); }
  static __m512i unpack2(const Block& b0, const Block& b1) { return nibbles2(b0.qs, b1.qs); }
};

struct WeightQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  static __m256i unpack1(const Block& b) {
    const __m256i nib = simd::unpack_nibbles_16(b.qs);
    return _mm256_mask_add_epi8(nib, simd::load_u32(b.qh), nib, _mm256_set1_epi8(16));
  }
  static __m512i unpack2(const Block& b0, const Block& b1) {
    const __m512i lo = nibbles2(b0.qs, b1.qs);
    const __mmask64 hb = simd::load_u32(b0.qh) | (static_cast<uint64_t>(simd::load_u32(b1.qh)) << 32);
    return _mm512_mask_add_epi8(lo, hb, lo, _mm512_set1_epi8(16));
  }
};

// s[c * lds + r] for r < nr, c < nc; NC columns computed (nc <= NC, extra
// columns repeat the last one), kTileRows rows (likewise).
template <class W, int NC>
void legacy_tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                 size_t x_row_bytes, int nr, int nc) {
  using WB = typename W::Block;
  const WB* wr[kTileRows];
  const BlockQ8_0* xc[NC];
  for (int r = 0; r < kTileRows; ++r)
    wr[r] = reinterpret_cast<const WB*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes);
  for (int c = 0; c < NC; ++c)
    xc[c] = reinterpret_cast<const BlockQ8_0*>(x + static_cast<size_t>(std::min(c, nc - 1)) * x_row_bytes);

  const int64_t nb = n / kQK;
  const int64_t nb4 = nb & ~int64_t{3};
  const __m512i off = _mm512_set1_epi8(static_cast<char>(W::kOffset));
  __m512 acc[kTileRows][NC];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();

  int64_t b = 0;
  for (; b < nb4; b += 2) {
    __m512i y[NC], seed[NC];
    __m512 dx[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      y[c] = load2(xc[c][b].qs, xc[c][b + 1].qs);
      seed[c] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, y[c]));
      dx[c] = scales2(xc[c][b].d, xc[c][b + 1].d);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kTileRows; ++r) {
      const __m512i u = W::unpack2(wr[r][b], wr[r][b + 1]);
      const __m512 dw = scales2(wr[r][b].d, wr[r][b + 1].d);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const __m512i p = _mm512_dpbusd_epi32(seed[c], u, y[c]);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, dx[c]), acc[r][c]);
      }
    }
  }
  // Tail blocks (< 4): all into acc0 (the low half).
  for (; b < nb; ++b) {
    __m256i y[NC], seed[NC];
    float dx[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      y[c] = loadu(xc[c][b].qs);
      seed[c] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(off), y[c]));
      dx[c] = simd::load_f16(xc[c][b].d);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kTileRows; ++r) {
      const __m256i u = W::unpack1(wr[r][b]);
      const float dw = simd::load_f16(wr[r][b].d);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const __m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(seed[c], u, y[c]));
        acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(p), _mm512_set1_ps(dw * dx[c]), acc[r][c],
                                          static_cast<__mmask16>(0x00FF));
      }
    }
  }
  for (int c = 0; c < nc; ++c)
    for (int r = 0; r < nr; ++r)
      s[c * lds + r] = simd::hsum_f32x8(
          _mm256_add_ps(_mm512_castps512_ps256(acc[r][c]), _mm512_extractf32x8_ps(acc[r][c], 1)));
}

template <class W>
void legacy_tile_dispatch(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                          size_t x_row_bytes, int nr, int nc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (nc == 1) {
    legacy_tile<W, 1>(n, s, lds, wb, w_row_bytes, xb, x_row_bytes, nr, nc);
  } else if (nc == 2) {
    legacy_tile<W, 2>(n, s, lds, wb, w_row_bytes, xb, x_row_bytes, nr, nc);
  } else {
    legacy_tile<W, kTileCols>(n, s, lds, wb, w_row_bytes, xb, x_row_bytes, nr, nc);
  }
}

}  // namespace

void vec_dot_tile_q8_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile_dispatch<WeightQ8_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

void vec_dot_tile_q4_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile_dispatch<WeightQ4_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

void vec_dot_tile_q5_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile_dispatch<WeightQ5_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
