// AVX-512 (F/BW/VL + VNNI) tile kernels for the legacy 32-element weight
// type Q4_0 x Q8_0 activations (kernels/registry.h, VecDotTileFn; Q8_0 and
// Q5_0 weights have their own kernels in gemm_lanes_avx512.cpp): 4 weight
// rows x up to kWideTileCols tokens per call. Wide calls unpack the 4 weight
// rows once and stream the tokens 4 at a time; nc == 2 loads both operands per block pair; nc == 1 (decode) is vec_dot.
//
// Batch invariance: every output is bit-identical to the single-pair vec_dot
// of this level (simd::legacy_blocks_dot in legacy_{avx2,avx512}.cpp). That
// kernel's float state is two 8-lane accumulators: block b goes to acc[b % 2]
// for b below nb rounded down to a multiple of 4, the remaining (< 4) tail
// blocks to acc0; each step is acc = fma(float(p_b), dw_b * dx_b, acc) with
// p_b the block's 8 x i32 lane sums (lane l = sum of products 4l..4l+3) and
// the result is hsum_f32x8(acc0 + acc1). Integer lane sums are exact, so we
// may compute them differently: one vpdpbusd per pair on an unsigned operand
// (quants + offset) seeded with -offset * sum4(signed operand). The float
// steps are replicated exactly, with acc0 and acc1 packed as the low / high
// halves of one zmm (blocks b, b+1 in one instruction), tail blocks masked to
// the low half, and the final sums reduced 16 at a time (tile512::hsum16).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_util.h"
#include "kernels/cpu/tile_avx512.h"
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
// u - kOffset (unpack*), or the signed weights themselves (signed*), for one
// block (ymm) or two consecutive blocks (zmm).
struct WeightQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m256i unpack1(const Block& b) { return simd::unpack_nibbles_16(b.qs); }
  static __m512i unpack2(const Block& b0, const Block& b1) { return nibbles2(b0.qs, b1.qs); }
  static __m256i signed1(const Block& b) { return _mm256_sub_epi8(unpack1(b), _mm256_set1_epi8(kOffset)); }
  static __m512i signed2(const Block& b0, const Block& b1) {
    return _mm512_sub_epi8(unpack2(b0, b1), _mm512_set1_epi8(kOffset));
  }
};

using VecDotRowFn = void (*)(int64_t n, float* s, const void* w, const void* x);

// ---- narrow tiles: 4 weight rows x NC tokens (NC = 2: token tails) ----
//
// Weights are the unsigned operand (u = q + offset), activations the signed
// one, seeded with -offset * sum4(y) once per activation block.
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
      s[c * lds + r] =
          simd::hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][c]), _mm512_extractf32x8_ps(acc[r][c], 1)));
}

// ---- wide tiles: 4 weight rows x up to kWideTileCols tokens ----
//
// Weight-stationary: the 4 rows' blocks are unpacked once per call into
// `PreparedPair`s (signed quants, their seeds, expanded scales; a chunk of
// kChunkPairs block pairs at a time, ~12 KB, stays in L1) and reused by every
// group of 4 tokens. Here the activation is the unsigned operand: vpdpbusd on
// y + 128 (y ^ 0x80) and the signed weights w, seeded with -128 * sum4(w), so
// each lane is sum4(y * w) exactly and the per-token work is one load, xor
// and scale conversion per block pair.

constexpr int kChunkPairs = 16;

struct alignas(64) PreparedPair {
  __m512i ws[kTileRows];    // signed quants of blocks b, b + 1
  __m512i seed[kTileRows];  // -128 * sum4(ws) per i32 lane
  __m512 dw[kTileRows];     // [d_b x 8 | d_b+1 x 8]
};

// acc[r][c] (acc0 | acc1 per zmm) -> s[c * lds + r] = hsum_f32x8(acc0 + acc1).
inline void store_legacy_sums(const __m512 acc[kTileRows][4], float* s, int64_t lds, int nr, int nc) {
  __m512 v[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    const __m512 a = acc[(2 * m) / 4][(2 * m) % 4], b = acc[(2 * m + 1) / 4][(2 * m + 1) % 4];
    v[m] = _mm512_add_ps(tile512::lo_halves(a, b), tile512::hi_halves(a, b));
  }
  tile512::store_tile4x4(tile512::hsum16(v), s, lds, nr, nc);
}

template <class W>
void legacy_tile_wide(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                      size_t x_row_bytes, int nr, int nc) {
  using WB = typename W::Block;
  const WB* wr[kTileRows];
  for (int r = 0; r < kTileRows; ++r)
    wr[r] = reinterpret_cast<const WB*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes);
  const int64_t nb = n / kQK;
  const int64_t nb4 = nb & ~int64_t{3};
  const int64_t npairs = nb4 / 2;
  const int ngroups = (nc + 3) / 4;
  const int64_t nchunks = std::max<int64_t>(1, (npairs + kChunkPairs - 1) / kChunkPairs);
  const __m512i flip = _mm512_set1_epi8(-128);
  PreparedPair prep[kChunkPairs];
  __m512 saved[kWideTileCols / 4][kTileRows][4];  // accumulators between chunks

  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t p0 = ch * kChunkPairs, p1 = std::min(npairs, p0 + kChunkPairs);
    for (int64_t p = p0; p < p1; ++p) {
      PreparedPair& pp = prep[p - p0];
      const int64_t b = 2 * p;
#pragma GCC unroll 4
      for (int r = 0; r < kTileRows; ++r) {
        const __m512i ws = W::signed2(wr[r][b], wr[r][b + 1]);
        pp.ws[r] = ws;
        pp.seed[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, ws));
        pp.dw[r] = scales2(wr[r][b].d, wr[r][b + 1].d);
      }
    }
    const bool last = ch == nchunks - 1;
    for (int g = 0; g < ngroups; ++g) {
      const int gc = std::min(4, nc - 4 * g);
      const BlockQ8_0* xc[4];
      for (int c = 0; c < 4; ++c)
        xc[c] = reinterpret_cast<const BlockQ8_0*>(x + static_cast<size_t>(4 * g + std::min(c, gc - 1)) * x_row_bytes);
      __m512 acc[kTileRows][4];
      for (int r = 0; r < kTileRows; ++r)
        for (int c = 0; c < 4; ++c) acc[r][c] = ch == 0 ? _mm512_setzero_ps() : saved[g][r][c];

      for (int64_t p = p0; p < p1; ++p) {
        const PreparedPair& pp = prep[p - p0];
        const int64_t b = 2 * p;
        __m512i y[4];
        __m512 dx[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          y[c] = _mm512_xor_si512(load2(xc[c][b].qs, xc[c][b + 1].qs), flip);
          dx[c] = scales2(xc[c][b].d, xc[c][b + 1].d);
        }
#pragma GCC unroll 4
        for (int r = 0; r < kTileRows; ++r) {
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            const __m512i d = _mm512_dpbusd_epi32(pp.seed[r], y[c], pp.ws[r]);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(pp.dw[r], dx[c]), acc[r][c]);
          }
        }
      }
      if (!last) {
        for (int r = 0; r < kTileRows; ++r)
          for (int c = 0; c < 4; ++c) saved[g][r][c] = acc[r][c];
        continue;
      }
      // Tail blocks (< 4): all into acc0 (the low half).
      for (int64_t b = nb4; b < nb; ++b) {
        __m256i y[4];
        float dx[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          y[c] = _mm256_xor_si256(loadu(xc[c][b].qs), _mm512_castsi512_si256(flip));
          dx[c] = simd::load_f16(xc[c][b].d);
        }
#pragma GCC unroll 4
        for (int r = 0; r < kTileRows; ++r) {
          const __m256i ws = W::signed1(wr[r][b]);
          const __m256i seed = _mm256_sub_epi32(
              _mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(flip), ws));
          const float dw = simd::load_f16(wr[r][b].d);
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            const __m256 d = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(seed, y[c], ws));
            acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(d), _mm512_set1_ps(dw * dx[c]), acc[r][c],
                                              static_cast<__mmask16>(0x00FF));
          }
        }
      }
      store_legacy_sums(acc, s + 4 * g * lds, lds, nr, gc);
    }
  }
}

// nc == 1 (decode): vec_dot row by row. A 4-row tile is faster on cached
// weights, but decode streams weights from memory, and 4 short row streams at
// a time defeat the hardware prefetchers (measured 5-10% slower even with
// software prefetch); one sequential stream is the faster memory pattern.
template <class W, VecDotRowFn VecDot>
void legacy_tile_dispatch(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                          size_t x_row_bytes, int nr, int nc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (nc == 1) {
    for (int r = 0; r < nr; ++r) VecDot(n, s + r, wb + static_cast<size_t>(r) * w_row_bytes, xb);
  } else if (nc == 2) {
    legacy_tile<W, 2>(n, s, lds, wb, w_row_bytes, xb, x_row_bytes, nr, nc);
  } else {
    legacy_tile_wide<W>(n, s, lds, wb, w_row_bytes, xb, x_row_bytes, nr, nc);
  }
}

}  // namespace

void vec_dot_tile_q4_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile_dispatch<WeightQ4_0, vec_dot_q4_0_q8_0>(n, s, lds, w, w_row_bytes, x, x_row_bytes, nr, nc);
}

}  // namespace ember::avx512
