// AVX2 tile kernels (VecDotTileFn, kernels/registry.h) for the legacy weight
// types Q4_0, Q5_0 and Q8_0 x Q8_0 activations: up to kLegacyTileRows weight
// rows x kLegacyTileCols tokens per call, in register blocks of 1 row x 4
// tokens. (Single tokens go to the row kernels: kernels/matmul.cpp.)
//
// Batch invariance: every output is bit-identical to this level's vec_dot
// (avx2/legacy_dot.cpp, driver simd::legacy_blocks_dot). Per block that kernel
// forms 8 exact i32 lane sums (lane l: weights x activation quants of bytes
// 4l .. 4l+3) and then rounds only in these steps, which we replicate:
//   acc[p] = fma(float(lanes_b), f16(d_w[b]) * f16(d_x[b]), acc[p])
// with p = b % 2 for the blocks below nb rounded down to a multiple of 4 and
// p = 0 for the (< 4) blocks after them, blocks in increasing order; result =
// hsum_f32x8(acc[0] + acc[1]). The lane sums are formed as vec_dot does:
// Q8_0 with the sign trick, Q5_0 / Q4_0 as maddubs(u, y) - maddubs(offset, y)
// on the unsigned quants u, the second term computed once per token and
// block and shared by all rows.
//
// Per call, in chunks of kChunk blocks (rows of up to 1024 elements are one
// chunk): the chunk's weights of all rows are unpacked once to bytes
// and the block scales of rows and tokens converted to float (the per-call
// costs that kLegacyTileRows = 16 rows amortize); then for each group of 4
// tokens (its activations stay in L1) and each row, the chunk is walked with
// the 8 accumulators in registers, every unpacked weight block serving the 4
// tokens. Accumulators go through memory only between chunks.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/registry.h"
#include "quant/blocks.h"

namespace ember::avx2 {
namespace {

constexpr int kR = kLegacyTileRows;
constexpr int kC = kLegacyTileCols;
constexpr int kChunk = 32;  // blocks per chunk (1024 elements)
constexpr int kGroup = 4;   // tokens per register block

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weight formats: the 32 quants of a block as bytes, signed (kOffset == 0,
// multiplied with the sign trick) or unsigned with weight = quant - kOffset.
struct WeightsQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 0;  // signed weights, sign trick
  static __m256i quants(const Block& b) { return loadu(b.qs); }
};

struct WeightsQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;  // unsigned quants, offset correction
  static __m256i quants(const Block& b) {
    const __m256i hb =
        _mm256_and_si256(simd::bits_to_bytes_mask(simd::load_u32(b.qh)), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(simd::unpack_nibbles_16(b.qs), hb);
  }
};

struct WeightsQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m256i quants(const Block& b) { return simd::unpack_nibbles_16(b.qs); }
};

// One chunk of the call's rows and tokens, ready for the pair loop. Scales
// past the chunk's last block (up to a multiple of 8) are 0.
struct ChunkData {
  alignas(32) int8_t wq[kR][kChunk][32];  // quants (W::quants)
  alignas(32) float dw[kR][kChunk];       // row block scales
  alignas(32) float dx[kC][kChunk];       // token block scales
};

// The per-pair state of the vec_dot contract: the two accumulators.
struct PairAcc {
  __m256 a0, a1;
};

// Scale products s_j = dw_j * dx_j of one (row, token) for the chunk's
// blocks, as vec_dot forms them (one rounding each).
struct BlockScales {
  alignas(32) float v[kChunk];
};

// hsum_f32x8(v[c]) for 4 vectors at once, with the same additions (float
// addition is commutative, so only their grouping matters): out[c * lds].
inline void hsum4_store(const __m256 v[4], float* out, int64_t lds) {
  const __m256 x = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31));
  const __m256 y = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31));
  // x = [s4(v0) | s4(v1)], y = [s4(v2) | s4(v3)], s4[i] = v[i] + v[i + 4].
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
  // r = [s2(v0) s2(v2) | s2(v1) s2(v3)], s2 = {s4[0] + s4[2], s4[1] + s4[3]}.
  const __m256 h = _mm256_add_ps(_mm256_shuffle_ps(r, r, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(r, r, _MM_SHUFFLE(3, 1, 3, 1)));
  // h = [v0 v2 v0 v2 | v1 v3 v1 v3] (sums).
  const __m128 lo = _mm256_castps256_ps128(h), hi = _mm256_extractf128_ps(h, 1);
  out[0] = _mm_cvtss_f32(lo);
  out[lds] = _mm_cvtss_f32(hi);
  out[2 * lds] = _mm_cvtss_f32(_mm_movehdup_ps(lo));
  out[3 * lds] = _mm_cvtss_f32(_mm_movehdup_ps(hi));
}

// Offset terms of a token group (offset types): maddubs(offset, y) per token
// and block, i.e. offset * (pair sums of the activation quants) as i16.
struct GroupCorr {
  __m256i v[kGroup][kChunk];
};

// Blocks [0, jn) of the chunk for one row (quants wq, offset kOff) and NT
// tokens (xc[c] = the token's blocks at the chunk start, ps[c] its scales,
// gc its offset terms). Blocks below `jpair` alternate between a0 (even) and
// a1 (odd); from `jpair` on all go to a0. The chunk starts at an even block
// and jpair is even. acc holds the accumulators between chunks: read unless
// `first`; with `out` (last chunk) the results go to out[c * lds] instead.
template <int NT, int kOff>
inline void row_group(const int8_t (*wq)[32], const BlockScales* ps, const BlockQ8_0* const xc[kGroup], int jpair,
                      int jn, bool first, PairAcc acc[kGroup], float* out, int64_t lds, const GroupCorr& gc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 a0[NT], a1[NT];
#pragma GCC unroll 4
  for (int c = 0; c < NT; ++c) {
    a0[c] = first ? _mm256_setzero_ps() : acc[c].a0;
    a1[c] = first ? _mm256_setzero_ps() : acc[c].a1;
  }
  // Block j x token c -> float lane sums.
  auto dot = [&](__m256i aw, __m256i w, int j, int c) {
    if constexpr (kOff != 0) {
      return _mm256_cvtepi32_ps(
          _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(w, loadu(xc[c][j].qs)), gc.v[c][j]), ones));
    } else {
      return _mm256_cvtepi32_ps(
          _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(loadu(xc[c][j].qs), w)), ones));
    }
  };
  // The maddubs u8 operand: |w| for the sign trick, else the quants.
  auto absw = [&](__m256i w) {
    if constexpr (kOff != 0) {
      return w;
    } else {
      return _mm256_sign_epi8(w, w);
    }
  };
  auto wload = [&](int j) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(wq[j])); };
  int j = 0;
  for (; j < jpair; j += 2) {
    const __m256i w0 = wload(j), w1 = wload(j + 1);
    const __m256i aw0 = absw(w0), aw1 = absw(w1);
#pragma GCC unroll 4
    for (int c = 0; c < NT; ++c) {
      a0[c] = _mm256_fmadd_ps(dot(aw0, w0, j, c), _mm256_broadcast_ss(&ps[c].v[j]), a0[c]);
      a1[c] = _mm256_fmadd_ps(dot(aw1, w1, j + 1, c), _mm256_broadcast_ss(&ps[c].v[j + 1]), a1[c]);
    }
  }
  for (; j < jn; ++j) {
    const __m256i w0 = wload(j);
    const __m256i aw0 = absw(w0);
#pragma GCC unroll 4
    for (int c = 0; c < NT; ++c) a0[c] = _mm256_fmadd_ps(dot(aw0, w0, j, c), _mm256_broadcast_ss(&ps[c].v[j]), a0[c]);
  }
  if (out) {
    if constexpr (NT == 4) {
      const __m256 v[4] = {_mm256_add_ps(a0[0], a1[0]), _mm256_add_ps(a0[1], a1[1]), _mm256_add_ps(a0[2], a1[2]),
                           _mm256_add_ps(a0[3], a1[3])};
      hsum4_store(v, out, lds);
    } else {
      for (int c = 0; c < NT; ++c) out[c * lds] = simd::hsum_f32x8(_mm256_add_ps(a0[c], a1[c]));
    }
    return;
  }
#pragma GCC unroll 4
  for (int c = 0; c < NT; ++c) {
    acc[c].a0 = a0[c];
    acc[c].a1 = a1[c];
  }
}

// Float scales of blocks [0, jn) of a row of Q8_0 activations (0 up to the
// next multiple of 8).
inline void load_token_scales(const BlockQ8_0* xb, int jn, float* dx) {
  int j = 0;
  for (; j < jn; ++j) dx[j] = simd::load_f16(xb[j].d);
  for (; j < ((jn + 7) & ~7); ++j) dx[j] = 0.0f;
}

template <class W>
void legacy_tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
                 size_t x_row_bytes, int nr, int nc) {
  using Block = typename W::Block;
  const int64_t nb = n / kQK;
  const int64_t nb4 = nb & ~int64_t{3};
  ChunkData cd;
  BlockScales ps[kGroup];
  GroupCorr gc;
  // Accumulators of every (row, token) pair between chunks (rows longer
  // than one chunk only).
  PairAcc acc[kR][kC];

  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const bool first = b0 == 0, last = b0 + kChunk >= nb;
    const int jn = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
    const int jn8 = (jn + 7) & ~7;
    const int jpair = static_cast<int>(std::clamp<int64_t>(nb4 - b0, 0, jn));
    for (int r = 0; r < nr; ++r) {
      const Block* wb = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_row_bytes) + b0;
      for (int j = 0; j < jn; ++j) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(cd.wq[r][j]), W::quants(wb[j]));
        cd.dw[r][j] = simd::load_f16(wb[j].d);
      }
      for (int j = jn; j < jn8; ++j) cd.dw[r][j] = 0.0f;
    }
    for (int c = 0; c < nc; ++c)
      load_token_scales(reinterpret_cast<const BlockQ8_0*>(x + static_cast<size_t>(c) * x_row_bytes) + b0, jn,
                        cd.dx[c]);
    // Token groups outer: a group's activations stay in L1 for all rows.
    for (int g = 0; g < nc; g += kGroup) {
      const int nt = std::min(kGroup, nc - g);
      const BlockQ8_0* xc[kGroup];
      for (int c = 0; c < nt; ++c) {
        xc[c] = reinterpret_cast<const BlockQ8_0*>(x + static_cast<size_t>(g + c) * x_row_bytes) + b0;
        if constexpr (W::kOffset != 0)
          for (int j = 0; j < jn; ++j)
            gc.v[c][j] = _mm256_maddubs_epi16(_mm256_set1_epi8(W::kOffset), loadu(xc[c][j].qs));
      }
      for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nt; ++c)
          for (int j = 0; j < jn; j += 8)
            _mm256_store_ps(ps[c].v + j, _mm256_mul_ps(_mm256_load_ps(cd.dw[r] + j), _mm256_load_ps(cd.dx[g + c] + j)));
        PairAcc* a = &acc[r][g];
        float* out = last ? s + g * lds + r : nullptr;
        switch (nt) {
          case 4: row_group<4, W::kOffset>(cd.wq[r], ps, xc, jpair, jn, first, a, out, lds, gc); break;
          case 3: row_group<3, W::kOffset>(cd.wq[r], ps, xc, jpair, jn, first, a, out, lds, gc); break;
          case 2: row_group<2, W::kOffset>(cd.wq[r], ps, xc, jpair, jn, first, a, out, lds, gc); break;
          default: row_group<1, W::kOffset>(cd.wq[r], ps, xc, jpair, jn, first, a, out, lds, gc); break;
        }
      }
    }
  }
}

}  // namespace

void vec_dot_tile_q4_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile<WeightsQ4_0>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                           x_row_bytes, nr, nc);
}
void vec_dot_tile_q5_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile<WeightsQ5_0>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                           x_row_bytes, nr, nc);
}
void vec_dot_tile_q8_0_q8_0(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                            size_t x_row_bytes, int nr, int nc) {
  legacy_tile<WeightsQ8_0>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),
                           x_row_bytes, nr, nc);
}

}  // namespace ember::avx2
