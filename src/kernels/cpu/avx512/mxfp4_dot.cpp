// AVX-512 VNNI kernels for MXFP4 weights x Q8_0 activations: vec_dot,
// decode over many rows, a few tokens over many rows (batched decode) and
// the tile (prefill), every form giving vec_dot's bits for every (row,
// token) pair.
//
// Arithmetic (this level's contract, vec_dot): two blocks per zmm (block 2k
// in the low 256 bits, 2k + 1 in the high; a last odd block with zero
// weights and scale above it): vpdpbusd of |w| (the doubled E2M1 values,
// pshufb lookup) and sign(x, w) gives 16 exact i32 sums (8 per block); they
// are converted and fma'd into one 16-lane f32 accumulator with the blocks'
// scales mxfp4_half_scale(e) * d_x (one float product per block); the
// result is its horizontal sum. Differs from the AVX2 level only by float
// rounding.
//
// The decode, few and tile forms reach the same 16 integer sums another way:
// the weights looked up as u = w + 12 (0 .. 24, unsigned, so vpdpbusd takes
// them as they are) against the activations as they are, the dot started
// at -12 * (the sum of each lane's 4 activations), which depends on the
// activations only and is computed once per call (XPair). sum(u x) - 12
// sum(x) = sum(w x) exactly (all terms well inside int32), so the sums, and
// from them every float operation in its order, are vec_dot's. Per block
// pair and token that leaves vpdpbusd, the conversion, the scale product
// and the fma; the weight unpacking is shared by the tokens of a tile.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <vector>

#include "kernels/cpu/group_prefetch.h"
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

// ---- The unsigned-weight form (decode and tile; see atop the file). ----

constexpr int kOffset = 12;  // -min(kMxfp4Values): u = w + 12 lies in [0, 24]

// The activation side of block pair (2p, 2p + 1) of one token: its 64
// quants (zero for a missing second block), -12 * each lane's sum of 4, and
// the blocks' scales (8 lanes each; 0 for a missing block).
struct alignas(64) XPair {
  __m512i x;
  __m512i neg_corr;
  __m512 d;
};

inline void prepare_pair(const BlockQ8_0* x, int64_t i, int64_t nb, XPair* out) {
  const bool pair = i + 1 < nb;
  const __m256i x1 = pair ? load_x(x[i + 1]) : _mm256_setzero_si256();
  const __m512i xq = _mm512_inserti64x4(_mm512_castsi256_si512(load_x(x[i])), x1, 1);
  const __m512i lane_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(kOffset), xq);
  const float d0 = simd::load_f16(x[i].d);
  const float d1 = pair ? simd::load_f16(x[i + 1].d) : 0.0f;
  _mm512_store_si512(&out->x, xq);
  _mm512_store_si512(&out->neg_corr, _mm512_sub_epi32(_mm512_setzero_si512(), lane_sums));
  _mm512_store_ps(&out->d, _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1));
}

// The weight table shifted by kOffset, in all four 128-bit lanes.
inline __m512i unsigned_table() {
  alignas(16) int8_t t[16];
  for (int j = 0; j < 16; ++j) t[j] = static_cast<int8_t>(kMxfp4Values[j] + kOffset);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// Block pair (i, i + 1) of a row as u = w + 12, laid out as decode_pair's
// wq: low nibbles of block i, its high nibbles, then block i + 1's (a
// missing second block: anything, its activations are zero).
inline __m512i weights_u(const BlockMXFP4* w, int64_t i, bool pair, __m512i table_u) {
  __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].qs)));
  if (pair) q = _mm512_mask_broadcast_i32x4(q, 0xFF00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i + 1].qs)));
  q = _mm512_mask_srli_epi16(q, 0xFF00FF00u, q, 4);  // 128-bit lanes 1 and 3: the high nibbles
  return _mm512_shuffle_epi8(table_u, _mm512_and_si512(q, _mm512_set1_epi8(0x0F)));
}

// mxfp4_half_scale of every exponent byte (broadcast loads instead of the
// scalar bit assembly per block), built at compile time: a run-time
// initializer in this TU could use AVX-512 instructions at program start,
// on CPUs without them. The same bits as mxfp4_half_scale (quant/blocks.h;
// DecodeRows.Mxfp4RawBytesMatchVecDotBitForBit runs every exponent).
struct HalfScales {
  float v[256];
};
constexpr HalfScales make_half_scales() {
  HalfScales t{};
  for (uint32_t e = 0; e < 256; ++e) t.v[e] = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  return t;
}
constexpr HalfScales kHalfScales = make_half_scales();

// The half scales of block pair (i, i + 1), as decode_pair keeps them.
inline __m512 half_scales(const BlockMXFP4* w, int64_t i, bool pair) {
  const __m512 s0 = _mm512_set1_ps(kHalfScales.v[w[i].e]);
  return pair ? _mm512_mask_broadcastss_ps(s0, 0xFF00, _mm_load_ss(&kHalfScales.v[w[i + 1].e]))
              : _mm512_mask_mov_ps(s0, 0xFF00, _mm512_setzero_ps());
}

// acc + pair_step's product, from the unsigned form: the same sums, the
// same scale product sw * d_x per lane, the same fma.
inline __m512 step_u(__m512i u, __m512 sw, const XPair& xp, __m512 acc) {
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_load_si512(&xp.neg_corr), u, _mm512_load_si512(&xp.x));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(sw, _mm512_load_ps(&xp.d)), acc);
}

// Decode: the activation pairs prepared once per call on the stack (rows
// up to this many block pairs; longer rows take vec_dot's own loop).
constexpr int64_t kRowsMaxPairs = 256;
constexpr int64_t kRowsAhead = 8;  // decode's prefetch distance in rows (12 KB at 2880 wide)
// Tile: activation pairs prepared per chunk of this many block pairs (all
// of the call's tokens: 8 x 16 x 192 bytes, L1-sized), the accumulators
// kept in memory between chunks.
constexpr int64_t kTileChunkPairs = 16;

// R rows x C tokens over block pairs [p0, p1): acc[r * C + c] += the
// pairs' products of row r (rows w_row_bytes apart from w) with token c
// (xp[(p - p0) * C + c]); pf (null: none) stepped once per block pair.
template <int R, int C>
inline void tile_block(const uint8_t* w, size_t w_row_bytes, int64_t nb, const XPair* xp, int64_t p0, int64_t p1,
                       __m512* acc, __m512i table_u, lanes::GroupPrefetch* pf) {
  // Fully unrolled, so that the accumulators stay in registers.
  __m512 a[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) a[r][c] = acc[r * C + c];
  for (int64_t p = p0; p < p1; ++p) {
    if (pf) pf->step();
    const int64_t i = 2 * p;
    const bool pair = i + 1 < nb;
    __m512i u[R];
    __m512 sw[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const auto* wr = reinterpret_cast<const BlockMXFP4*>(w + r * w_row_bytes);
      u[r] = weights_u(wr, i, pair, table_u);
      sw[r] = half_scales(wr, i, pair);
    }
    const XPair* xc = xp + (p - p0) * C;
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512i xv = _mm512_load_si512(&xc[c].x);
      const __m512i corr = _mm512_load_si512(&xc[c].neg_corr);
      const __m512 d = _mm512_load_ps(&xc[c].d);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
        a[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u[r], xv)), _mm512_mul_ps(sw[r], d),
                                  a[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r * C + c] = a[r][c];
}

template <int R>
inline void tile_block_nc(int nc, const uint8_t* w, size_t w_row_bytes, int64_t nb, const XPair* xp, int64_t p0,
                          int64_t p1, __m512* acc, __m512i table_u, lanes::GroupPrefetch* pf = nullptr) {
  switch (nc) {
    case 1: return tile_block<R, 1>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    case 2: return tile_block<R, 2>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    case 3: return tile_block<R, 3>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    case 4: return tile_block<R, 4>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    case 5: return tile_block<R, 5>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    case 6: return tile_block<R, 6>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    case 7: return tile_block<R, 7>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
    default: return tile_block<R, 8>(w, w_row_bytes, nb, xp, p0, p1, acc, table_u, pf);
  }
}

static_assert(kMxfp4TileCols == 8 && kMxfp4FewMax == 8, "tile_block_nc dispatches 1 .. 8 tokens");

}  // namespace

void mxfp4_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_row(n / kQK, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(x), value_table());
}

void mxfp4_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {
  const int64_t nb = n / kQK, np = (nb + 1) / 2;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  if (np > kRowsMaxPairs) {
    const __m128i table = value_table();
    for (int64_t r = 0; r < nr; ++r) {
      if (r + 1 < nr) _mm_prefetch(reinterpret_cast<const char*>(wb + (r + 1) * w_row_bytes), _MM_HINT_T0);
      s[r] = dot_row(nb, reinterpret_cast<const BlockMXFP4*>(wb + r * w_row_bytes), xb, table);
    }
    return;
  }
  XPair xp[kRowsMaxPairs];
  for (int64_t p = 0; p < np; ++p) prepare_pair(xb, 2 * p, nb, &xp[p]);
  const __m512i table_u = unsigned_table();
  // Two rows at a time (two independent fma chains). One memory stream,
  // prefetched into L2 kRowsAhead rows ahead (the first ones up front), the
  // pair of rows that far ahead spread over this pair's steps: one or two
  // rows ahead left the kernel waiting on DRAM at every row.
  {
    const size_t first = static_cast<size_t>(std::min<int64_t>(nr, kRowsAhead)) * w_row_bytes;
    lanes::GroupPrefetch(wb, first, 1).finish();
  }
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) {
    const int64_t ahead = r + kRowsAhead;
    lanes::GroupPrefetch pf = ahead < nr ? lanes::GroupPrefetch(wb + ahead * w_row_bytes,
                                                                static_cast<size_t>(std::min<int64_t>(2, nr - ahead)) *
                                                                    w_row_bytes,
                                                                np)
                                         : lanes::GroupPrefetch(nullptr, 0, np);
    const auto* w0 = reinterpret_cast<const BlockMXFP4*>(wb + r * w_row_bytes);
    const auto* w1 = reinterpret_cast<const BlockMXFP4*>(wb + (r + 1) * w_row_bytes);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; ++p) {
      pf.step();
      const int64_t i = 2 * p;
      const bool pair = i + 1 < nb;
      a0 = step_u(weights_u(w0, i, pair, table_u), half_scales(w0, i, pair), xp[p], a0);
      a1 = step_u(weights_u(w1, i, pair, table_u), half_scales(w1, i, pair), xp[p], a1);
    }
    pf.finish();
    s[r] = _mm512_reduce_add_ps(a0);
    s[r + 1] = _mm512_reduce_add_ps(a1);
  }
  if (r < nr) {
    const auto* w0 = reinterpret_cast<const BlockMXFP4*>(wb + r * w_row_bytes);
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; ++p) {
      const int64_t i = 2 * p;
      const bool pair = i + 1 < nb;
      a0 = step_u(weights_u(w0, i, pair, table_u), half_scales(w0, i, pair), xp[p], a0);
    }
    s[r] = _mm512_reduce_add_ps(a0);
  }
}

// A few tokens (batched decode: an expert chosen by a handful of a step's
// tokens). The decode form's memory stream (whole rows in order, two at a
// time, prefetched kRowsAhead rows ahead into L2) with the tile's register
// block of 2 rows x nc tokens over every block pair of the rows: the
// activation pairs of all nc tokens prepared once per call (np x nc x 192
// bytes, at most 384 KB; a thread's buffer kept between calls). The tile's
// 16-row panels, swept 16 block pairs at a time with no prefetch, left
// batched decode waiting on DRAM (16 rows = 16 streams the hardware
// prefetchers do not follow), at 2 tokens an expert 1.2x slower than
// before the tile. The tile's own tile_block, so every sum and float
// operation is the tile's and vec_dot's.
void mxfp4_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
               size_t x_row_bytes, int64_t nr, int nc) {
  const int64_t nb = n / kQK, np = (nb + 1) / 2;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (np > kRowsMaxPairs) {  // longer rows than decode prepares: the tile, 16 rows at a time
    for (int64_t r = 0; r < nr; r += kMxfp4TileRows)
      mxfp4_tile(n, s + r, lds, wb + r * w_row_bytes, w_row_bytes, x, x_row_bytes,
                 static_cast<int>(std::min<int64_t>(kMxfp4TileRows, nr - r)), nc);
    return;
  }
  thread_local std::vector<XPair> buf;
  if (buf.size() < static_cast<size_t>(np * nc)) buf.resize(static_cast<size_t>(kRowsMaxPairs * kMxfp4FewMax));
  XPair* xp = buf.data();
  for (int c = 0; c < nc; ++c) {
    const auto* xc = reinterpret_cast<const BlockQ8_0*>(xb + c * x_row_bytes);
    for (int64_t p = 0; p < np; ++p) prepare_pair(xc, 2 * p, nb, &xp[p * nc + c]);
  }
  const __m512i table_u = unsigned_table();
  lanes::GroupPrefetch(wb, static_cast<size_t>(std::min<int64_t>(nr, kRowsAhead)) * w_row_bytes, 1).finish();
  __m512 acc[2 * kMxfp4FewMax];
  for (int64_t r = 0; r < nr; r += 2) {
    const int rows = static_cast<int>(std::min<int64_t>(2, nr - r));
    const int64_t ahead = r + kRowsAhead;
    lanes::GroupPrefetch pf =
        ahead < nr ? lanes::GroupPrefetch(wb + ahead * w_row_bytes,
                                          static_cast<size_t>(std::min<int64_t>(2, nr - ahead)) * w_row_bytes, np)
                   : lanes::GroupPrefetch(nullptr, 0, np);
    for (int k = 0; k < rows * nc; ++k) acc[k] = _mm512_setzero_ps();
    if (rows == 2)
      tile_block_nc<2>(nc, wb + r * w_row_bytes, w_row_bytes, nb, xp, 0, np, acc, table_u, &pf);
    else
      tile_block_nc<1>(nc, wb + r * w_row_bytes, w_row_bytes, nb, xp, 0, np, acc, table_u, &pf);
    pf.finish();
    for (int i = 0; i < rows; ++i)
      for (int c = 0; c < nc; ++c) s[c * lds + r + i] = _mm512_reduce_add_ps(acc[i * nc + c]);
  }
}

void mxfp4_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                size_t x_row_bytes, int nr, int nc) {
  const int64_t nb = n / kQK, np = (nb + 1) / 2;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  const __m512i table_u = unsigned_table();
  XPair xp[kTileChunkPairs * kMxfp4TileCols];
  __m512 acc[kMxfp4TileRows * kMxfp4TileCols];
  for (int k = 0; k < nr * nc; ++k) acc[k] = _mm512_setzero_ps();
  // The next panel of nr rows (the driver's next call, or the next task's
  // rows: a prefetch past the matrix cannot fault) into L2, spread over
  // this call's block-pair steps: 16 rows are 16 streams the hardware
  // prefetchers do not follow.
  lanes::GroupPrefetch pf(wb + static_cast<size_t>(nr) * w_row_bytes, static_cast<size_t>(nr) * w_row_bytes,
                          np * ((nr + 1) / 2));
  for (int64_t p0 = 0; p0 < np; p0 += kTileChunkPairs) {
    const int64_t p1 = std::min(np, p0 + kTileChunkPairs);
    for (int c = 0; c < nc; ++c) {
      const auto* xc = reinterpret_cast<const BlockQ8_0*>(xb + c * x_row_bytes);
      for (int64_t p = p0; p < p1; ++p) prepare_pair(xc, 2 * p, nb, &xp[(p - p0) * nc + c]);
    }
    int r = 0;
    for (; r + 2 <= nr; r += 2)
      tile_block_nc<2>(nc, wb + r * w_row_bytes, w_row_bytes, nb, xp, p0, p1, acc + r * nc, table_u, &pf);
    if (r < nr) tile_block_nc<1>(nc, wb + r * w_row_bytes, w_row_bytes, nb, xp, p0, p1, acc + r * nc, table_u, &pf);
  }
  pf.finish();
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nc; ++c) s[c * lds + r] = _mm512_reduce_add_ps(acc[r * nc + c]);
}

}  // namespace ember::avx512
