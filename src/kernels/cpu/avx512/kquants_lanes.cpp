// AVX-512 VNNI "row lanes" kernels for Q4_K and Q6_K x Q8_K: vec_dot,
// vec_dot_rows (decode) and the tile kernel (kKquantsLanesTileRows = 16 weight rows
// x up to kKquantsLanesTileCols tokens), the kernels of these types at this level.
//
// Arithmetic (the contract of all three, hence batch-invariant; the scalar
// twins are in kernels/ref/kquants_lanes.h):
//   acc = acc_m = 0;  for each super-block i in order:
//     Q4_K: sumi = sum_s sc_s * (sum of the 32 products q * x of sub-block s)
//           summ = sum_s m_s * (bsums[2s] + bsums[2s+1])
//           acc   = fma(float(sumi), f16(d) * x.d,    acc)
//           acc_m = fma(float(summ), f16(dmin) * x.d, acc_m)
//     Q6_K: sumi = sum_g sc_g * (sum of the 16 products (q - 32) * x of group g)
//           acc   = fma(float(sumi), f16(d) * x.d, acc)
//   result = acc - acc_m
// sumi and summ are exact int32 (Q4_K: |sumi| <= 8 * 63 * 32 * 15 * 127;
// Q6_K: <= 16 * 128 * 16 * 32 * 127, both < 2^31); every float step is one
// IEEE operation, so the kernels agree bit for bit whatever the grouping of
// their integer work. Compared with the 8-lane partial sums of the other
// K-quant kernels (avx512/kquants_tile.cpp) this rounds once per super-block
// instead of 8 times plus a horizontal sum.
//
// Why this form: one output row per zmm lane. The tile kernel unpacks its 16
// rows' quants (unsigned: Q4_K nibbles, Q6_K q = stored 6 bits) and
// transposes them super-block by super-block (dword k of the 64-element
// piece m of row r -> lane r of vector 16m + k), so one vpdpbusd with a
// broadcast activation dword advances 16 rows at once and the scales, mins
// and float steps are one instruction each for 16 outputs. Q4_K: half
// sub-blocks (16 products: |sum| <= 16 * 15 * 127 < 2^15) are packed into the
// i16 halves of each lane and weighted by the row's scale with one vpdpwssd.
// Q6_K: each 16-element group's sum (up to 16 * 63 * 127, too wide for i16)
// is weighted with one vpmulld, and the offset 32 enters once per super-block
// as -32 * sum_g sc_g * bsums[g]. Decode walks 16-row groups (the rows'
// super-block i one after another, the next group's bytes prefetched a share
// per super-block: lanes::GroupPrefetch): per
// row four zmm vpdpbusd and four vpdpwssd give 16 lane sums (4-product sums
// fit i16 for both types), and the 16 rows' lane sums are reduced together
// so the float work is again one instruction per 16 rows.
// The drivers (decode over row groups, the tile, the interleaved tile, the
// entry points) are the width-generic ones of kernels/cpu/kquants_lanes.h
// over Lanes16; this file holds the 16-lane arithmetic and packing and the
// few-token form (this level only).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/avx512/kquants_unpack.h"
#include "kernels/cpu/kquants_lanes.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx512 {
namespace {

using lanes::block_at;
using kq::loadu;
using kq::transpose16;
using kq::unpack_nibbles;
using kq::unpack_q6;

constexpr int kR = 16;                  // rows per lane group (one per zmm lane)
constexpr int kT = lanes::kTileTokens;  // tokens per register group of the tile kernel
static_assert(kKquantsLanesTileRows == kR, "one lane group per tile");

inline __m512i bcast32(const void* p) { return _mm512_set1_epi32(static_cast<int>(simd::load_u32(p))); }

// Byte offsets of the 16 rows (rows past nr repeat the last one).
inline __m512i row_offsets(size_t w_row_bytes, int nr) {
  alignas(64) int32_t off[kR];
  for (int r = 0; r < kR; ++r) off[r] = static_cast<int32_t>(static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes);
  return _mm512_load_si512(off);
}

// The lanes of the width-generic drivers (kernels/cpu/kquants_lanes.h):
// row r of a group in lane r of a zmm.
struct Lanes16 {
  static constexpr int kR = 16;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static I row_offsets(size_t w_row_bytes, int nr) { return avx512::row_offsets(w_row_bytes, nr); }
  static void store_rows(float* dst, F v, int nr) {
    _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << nr) - 1), v);
  }
};

// The f16 words at byte offset `at` and at + 2 of the 16 rows' blocks
// starting at `base` (one gather of the dword at `at`), as f32.
inline void gather_f16_pair(const uint8_t* base, __m512i offsets, __m512& lo, __m512& hi) {
  const __m512i dd = _mm512_i32gather_epi32(offsets, base, 1);
  lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
  hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
}

// ---- tile: 16 rows x up to kKquantsLanesTileCols tokens ----

// w[16m + k] lane r <- dword k of u_r[m] for the 16 rows.
inline void transpose_quants(__m512i u[kR][4], __m512i* w) {
  __m512i in[kR];
#pragma GCC unroll 1
  for (int m = 0; m < 4; ++m) {
    for (int r = 0; r < kR; ++r) in[r] = u[r][m];
    transpose16(in, w + 16 * m);
  }
}

// Q4_K: one super-block of 16 rows, transposed.
struct alignas(64) PackedQ4K {
  __m512i w[64];  // w[8s + l] lane r: unsigned quants 32s + 4l .. + 3 of row r
  __m512i sc[8];  // sc[s] lane r: i16 pair (sc_s, sc_s) of row r (Q5_K: sc_s as i32)
  __m512i mn[8];  // mn[s] lane r: i16 pair (m_s, m_s) of row r
  __m512 d, dmin;
};

// Q6_K: the same (w[4g + l]: quants 16g + 4l .. + 3).
struct alignas(64) PackedQ6K {
  __m512i w[64];
  __m512i sc[16];  // sc[g] lane r: the signed scale of group g (i32)
  __m512i scp[8];  // scp[k] lane r: i16 pair (sc_2k, sc_2k+1)
  __m512 d;
};

// Q4_K and Q5_K (kFive: quants 0..31; the same scales and mins). Q5_K's
// 16-product half sub-block sums can pass 2^15, so its sub-block sums stay
// i32 and are weighted with one vpmulld (sc[s] then holds the plain scale).
template <bool kFive>
struct TileScaleMin {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  using Packed = PackedQ4K;

  static void pack(const uint8_t* w, size_t w_row_bytes, __m512i offsets, int nr, int64_t i, Packed& pk) {
    // Scales: row r's 16 dwords [sc pairs s = 0..7 | min pairs s = 0..7]
    // (Q5_K: plain sc).
    __m512i in[kR], out[kR];
    for (int r = 0; r < kR; ++r) {
      alignas(16) uint8_t sm[16];
      simd::unpack_k4_scales(block_at<Block>(w, w_row_bytes, nr, r, i)->scales, sm, sm + 8);
      const __m512i v = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sm)));
      const __m512i pairs = _mm512_or_si512(v, _mm512_slli_epi32(v, 16));
      in[r] = kFive ? _mm512_mask_mov_epi32(pairs, 0x00FF, v) : pairs;
    }
    transpose16(in, out);
    for (int s = 0; s < 8; ++s) {
      pk.sc[s] = out[s];
      pk.mn[s] = out[8 + s];
    }
    __m512i u[kR][4];
    for (int r = 0; r < kR; ++r) {
      if constexpr (kFive)
        kq::unpack_q5(*block_at<Block>(w, w_row_bytes, nr, r, i), u[r]);
      else
        unpack_nibbles(*block_at<Block>(w, w_row_bytes, nr, r, i), u[r]);
    }
    transpose_quants(u, pk.w);
    gather_f16_pair(w + static_cast<size_t>(i) * sizeof(Block), offsets, pk.d, pk.dmin);
  }

  // The same from the interleaved super-block at p (kernels/interleave.h):
  // nibble splits and scale shuffles, no transposes.
  static void pack_r16(const uint8_t* p, int /*half: always 0*/, Packed& pk) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) {
        const __m512i q = _mm512_loadu_si512(p + kq::kR16Q4KQuants + 64 * (8 * j + l));
        pk.w[8 * (2 * j) + l] = _mm512_and_si512(q, m4);
        pk.w[8 * (2 * j + 1) + l] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      }
    const kq::R16Q4KScales sc = kq::r16_q4k_scales(p);
    for (int s = 0; s < 8; ++s) {
      const __m512i ix = kq::pair_index(s & 3);
      pk.sc[s] = _mm512_shuffle_epi8(s < 4 ? sc.sc_lo : sc.sc_hi, ix);
      pk.mn[s] = _mm512_shuffle_epi8(s < 4 ? sc.m_lo : sc.m_hi, ix);
    }
    pk.d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    pk.dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }

  // Tokens xc[0 .. kT) against the packed rows: out[c] lane r = result.
  static void group(const Packed* pk, int64_t nb, const BlockQ8_K* const xc[kT], __m512 out[kT]) {
    __m512 acc[kT], acc_m[kT];
    for (int c = 0; c < kT; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const Packed& p = pk[i];
      __m512i sumi[kT], summ[kT];
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c) {
        summ[c] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), p.mn[0], bcast32(xc[c][i].bsums));
#pragma GCC unroll 7
        for (int s = 1; s < 8; ++s) summ[c] = _mm512_dpwssd_epi32(summ[c], p.mn[s], bcast32(xc[c][i].bsums + 2 * s));
        sumi[c] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        __m512i a[kT], b[kT];
#pragma GCC unroll 4
        for (int c = 0; c < kT; ++c) a[c] = b[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) {
          const __m512i wa = _mm512_load_si512(&p.w[8 * s + l]);
          const __m512i wb = _mm512_load_si512(&p.w[8 * s + 4 + l]);
#pragma GCC unroll 4
          for (int c = 0; c < kT; ++c) {
            const int8_t* y = xc[c][i].qs + 32 * s + 4 * l;
            a[c] = _mm512_dpbusd_epi32(a[c], wa, bcast32(y));
            b[c] = _mm512_dpbusd_epi32(b[c], wb, bcast32(y + 16));
          }
        }
#pragma GCC unroll 4
        for (int c = 0; c < kT; ++c) {
          if constexpr (kFive)
            sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(_mm512_add_epi32(a[c], b[c]), p.sc[s]));
          else
            sumi[c] = _mm512_dpwssd_epi32(
                sumi[c], _mm512_mask_blend_epi16(0xAAAAAAAA, a[c], _mm512_slli_epi32(b[c], 16)), p.sc[s]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c) {
        const __m512 xd = _mm512_set1_ps(xc[c][i].d);
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(p.d, xd), acc[c]);
        acc_m[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[c]), _mm512_mul_ps(p.dmin, xd), acc_m[c]);
      }
    }
    for (int c = 0; c < kT; ++c) out[c] = _mm512_sub_ps(acc[c], acc_m[c]);
  }
};

using TileQ4K = TileScaleMin<false>;
using TileQ5K = TileScaleMin<true>;

struct TileQ6K {
  using Block = BlockQ6_K;
  using Packed = PackedQ6K;

  static void pack(const uint8_t* w, size_t w_row_bytes, __m512i offsets, int nr, int64_t i, Packed& pk) {
    __m512i in[kR];
    for (int r = 0; r < kR; ++r)
      in[r] = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block_at<Block>(w, w_row_bytes, nr, r, i)->scales)));
    transpose16(in, pk.sc);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int k = 0; k < 8; ++k)
      pk.scp[k] = _mm512_or_si512(_mm512_and_si512(pk.sc[2 * k], lo16), _mm512_slli_epi32(pk.sc[2 * k + 1], 16));
    __m512i u[kR][4];
    for (int r = 0; r < kR; ++r) unpack_q6(*block_at<Block>(w, w_row_bytes, nr, r, i), u[r]);
    transpose_quants(u, pk.w);
    // d is the last word of the block: gather the dword ending with it.
    __m512 unused;
    gather_f16_pair(w + static_cast<size_t>(i) * sizeof(Block) + offsetof(Block, d) - 2, offsets, unused, pk.d);
  }

  static void pack_r16(const uint8_t* p, int /*half: always 0*/, Packed& pk) {
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 8; ++k) {
        __m512i q[4];
        kq::r16_q6k_quants(p, h, k, q);  // elements 128h + 32e + 4k: group 8h + 2e + k / 4, dword k % 4
        for (int e = 0; e < 4; ++e) pk.w[4 * (8 * h + 2 * e + k / 4) + k % 4] = q[e];
      }
    for (int g = 0; g < 16; ++g) pk.sc[g] = kq::r16_q6k_scale(p, g);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int k = 0; k < 8; ++k)
      pk.scp[k] = _mm512_or_si512(_mm512_and_si512(pk.sc[2 * k], lo16), _mm512_slli_epi32(pk.sc[2 * k + 1], 16));
    pk.d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  static void group(const Packed* pk, int64_t nb, const BlockQ8_K* const xc[kT], __m512 out[kT]) {
    __m512 acc[kT];
    for (int c = 0; c < kT; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const Packed& p = pk[i];
      __m512i sumi[kT], corr[kT];
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c) {
        corr[c] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), p.scp[0], bcast32(xc[c][i].bsums));
#pragma GCC unroll 7
        for (int k = 1; k < 8; ++k) corr[c] = _mm512_dpwssd_epi32(corr[c], p.scp[k], bcast32(xc[c][i].bsums + 2 * k));
        sumi[c] = _mm512_setzero_si512();
      }
#pragma GCC unroll 16
      for (int g = 0; g < 16; ++g) {
        __m512i a[kT];
#pragma GCC unroll 4
        for (int c = 0; c < kT; ++c) a[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l) {
          const __m512i wv = _mm512_load_si512(&p.w[4 * g + l]);
#pragma GCC unroll 4
          for (int c = 0; c < kT; ++c) a[c] = _mm512_dpbusd_epi32(a[c], wv, bcast32(xc[c][i].qs + 16 * g + 4 * l));
        }
#pragma GCC unroll 4
        for (int c = 0; c < kT; ++c) sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(a[c], p.sc[g]));
      }
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c) {
        const __m512i v = _mm512_sub_epi32(sumi[c], _mm512_slli_epi32(corr[c], 5));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(p.d, _mm512_set1_ps(xc[c][i].d)), acc[c]);
      }
    }
    for (int c = 0; c < kT; ++c) out[c] = acc[c];  // acc - 0: the same bits
  }
};

// ---- decode: one token over 16-row groups ----

// vpermw indices for the vpdpwssd weights of piece m's vpdpbusd sums: lane k
// low word = the scale of the lane's sub-block (Q4_K: 2m + k / 8) or group
// (Q6_K: 4m + k / 4), high word = a zero word (the sums fit the low word).
template <int kLanesPerScale, int kZeroWord>
struct ScaleWordIndex {
  alignas(64) int16_t idx[4][32];
  constexpr ScaleWordIndex() : idx() {
    for (int m = 0; m < 4; ++m)
      for (int k = 0; k < 16; ++k) {
        idx[m][2 * k] = static_cast<int16_t>((16 / kLanesPerScale) * m + k / kLanesPerScale);
        idx[m][2 * k + 1] = kZeroWord;
      }
  }
};
constexpr ScaleWordIndex<8, 8> kQ4KWords;
constexpr ScaleWordIndex<4, 16> kQ6KWords;

// A row's super-block ready for the dot with any token: the unpacked quants,
// the vpdpwssd weight words of each 64-element piece, the (mins / scales)
// words for the bsums term.
struct PreppedRow {
  __m512i u[4];
  __m512i sw[4];  // sw[m]: words[m] gathered from the row's scales
  __m256i mw;     // Q4_K: the mins, each twice; Q6_K: the scales
};

template <class Words>
inline void scale_words(__m512i sc16, const Words& words, __m512i sw[4]) {
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) sw[m] = _mm512_permutexvar_epi16(_mm512_load_si512(words.idx[m]), sc16);
}

// sum over the 4 pieces of vpdpwssd(vpdpbusd(u[m], x piece m), sw[m]).
inline __m256i weighted_sum8(const __m512i u[4], const int8_t* y, const __m512i sw[4]) {
  const __m512i z = _mm512_setzero_si512();
  __m512i s[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    s[h] = _mm512_dpwssd_epi32(z, _mm512_dpbusd_epi32(z, u[h], _mm512_loadu_si512(y + 64 * h)), sw[h]);
    s[h] = _mm512_dpwssd_epi32(s[h], _mm512_dpbusd_epi32(z, u[h + 2], _mm512_loadu_si512(y + 64 * (h + 2))), sw[h + 2]);
  }
  const __m512i t = _mm512_add_epi32(s[0], s[1]);
  return _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
}

inline __m512i join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

// v[r] = [a_r | b_r] (8-lane halves) -> lane r of sa = total of a_r, lane r
// of sb = total of b_r.
inline void reduce_rows(const __m512i v[kR], __m512i& sa, __m512i& sb);

// What the decode driver (lanes::rows) calls: one row's super-block prepared
// and dotted with the token ([a | b] lane sums; rows past the group's end
// repeat its last row, not stored), then per super-block the 16 rows' sums
// reduced together and the float steps once for the 16 rows.
template <class Self>
struct RowsLanes16 {
  struct Sums {
    __m512i v[kR];  // row r: [a | b] lane sums
  };
  template <class Block>
  static void row_sums(const Block& b, const BlockQ8_K& x, int r, bool /*valid*/, Sums& s) {
    PreppedRow p;
    Self::prep(b, p);
    s.v[r] = Self::dot(p, x);
  }
  static void finish(const Sums& s, const uint8_t* blocks, __m512i offsets, float xd, __m512& acc, __m512& acc_m) {
    __m512i a, b;
    reduce_rows(s.v, a, b);
    __m512 d, dmin;
    Self::scales(blocks, offsets, d, dmin);
    Self::step(a, b, d, dmin, xd, acc, acc_m);
  }
};

// Q4_K and Q5_K (their 4-product lane sums fit i16 either way: 4 * 31 *
// 128 < 2^15).
template <bool kFive>
struct RowsScaleMin : RowsLanes16<RowsScaleMin<kFive>> {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static void prep(const Block& b, PreppedRow& p) {
    alignas(16) uint8_t sc[8], m[8];
    simd::unpack_k4_scales(b.scales, sc, m);
    scale_words(_mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)))),
                kQ4KWords, p.sw);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    p.mw = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)), dup));
    if constexpr (kFive)
      kq::unpack_q5(b, p.u);
    else
      unpack_nibbles(b, p.u);
  }
  // [a | b]: 8 lanes whose total is sumi, 8 whose total is summ.
  static __m512i dot(const PreppedRow& p, const BlockQ8_K& x) {
    return join(weighted_sum8(p.u, x.qs, p.sw), _mm256_madd_epi16(loadu(x.bsums), p.mw));
  }
  // The 16 rows' d and dmin of the super-block at `blocks`.
  static void scales(const uint8_t* blocks, __m512i offsets, __m512& d, __m512& dmin) {
    gather_f16_pair(blocks, offsets, d, dmin);
  }
  static void step(__m512i a, __m512i b, __m512 d, __m512 dmin, float xd, __m512& acc, __m512& acc_m) {
    const __m512 vxd = _mm512_set1_ps(xd);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(d, vxd), acc);
    acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(b), _mm512_mul_ps(dmin, vxd), acc_m);
  }
};

using RowsQ4K = RowsScaleMin<false>;
using RowsQ5K = RowsScaleMin<true>;

struct RowsQ6K : RowsLanes16<RowsQ6K> {
  using Block = BlockQ6_K;
  static void prep(const Block& b, PreppedRow& p) {
    p.mw = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    scale_words(_mm512_zextsi256_si512(p.mw), kQ6KWords, p.sw);
    unpack_q6(b, p.u);
  }
  // [a | b]: totals sum_g sc_g * sum(q * x) and sum_g sc_g * bsums[g].
  static __m512i dot(const PreppedRow& p, const BlockQ8_K& x) {
    return join(weighted_sum8(p.u, x.qs, p.sw), _mm256_madd_epi16(loadu(x.bsums), p.mw));
  }
  static void scales(const uint8_t* blocks, __m512i offsets, __m512& d, __m512& unused) {
    gather_f16_pair(blocks + offsetof(Block, d) - 2, offsets, unused, d);
  }
  static void step(__m512i a, __m512i b, __m512 d, __m512, float xd, __m512& acc, __m512&) {
    const __m512i sumi = _mm512_sub_epi32(a, _mm512_slli_epi32(b, 5));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(d, _mm512_set1_ps(xd)), acc);
  }
};

// v[r] = [a_r | b_r] (8-lane halves) -> lane r of sa = total of a_r, lane r
// of sb = total of b_r.
inline void reduce_rows(const __m512i v[kR], __m512i& sa, __m512i& sb) {
  __m512i t[kR];
  transpose16(v, t);  // t[k] lane r = v[r] dword k
  const __m512i a = _mm512_add_epi32(_mm512_add_epi32(t[0], t[1]), _mm512_add_epi32(t[2], t[3]));
  const __m512i a2 = _mm512_add_epi32(_mm512_add_epi32(t[4], t[5]), _mm512_add_epi32(t[6], t[7]));
  const __m512i b = _mm512_add_epi32(_mm512_add_epi32(t[8], t[9]), _mm512_add_epi32(t[10], t[11]));
  const __m512i b2 = _mm512_add_epi32(_mm512_add_epi32(t[12], t[13]), _mm512_add_epi32(t[14], t[15]));
  sa = _mm512_add_epi32(a, a2);
  sb = _mm512_add_epi32(b, b2);
}

// A few tokens (2 .. kKquantsLanesFewMax) over many rows: rows() for each token,
// with each row's super-block unpacked once for all of them and the rows'
// d / dmin gathered once. The same arithmetic as rows() token by token.
template <class T>
void few(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
         size_t x_row_bytes, int64_t nr, int nc) {
  using Block = typename T::Block;
  const int64_t nb = n / kQK_K;
  const BlockQ8_K* xt[kKquantsLanesFewMax];
  for (int t = 0; t < nc; ++t) xt[t] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(t) * x_row_bytes);
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const int gr = static_cast<int>(std::min<int64_t>(kR, nr - r0));
    const uint8_t* g = w + static_cast<size_t>(r0) * w_row_bytes;
    const __m512i offsets = row_offsets(w_row_bytes, gr);
    __m512 acc[kKquantsLanesFewMax], acc_m[kKquantsLanesFewMax];
    for (int t = 0; t < nc; ++t) acc[t] = acc_m[t] = _mm512_setzero_ps();
    auto pf = lanes::next_group_prefetch<kR>(w, w_row_bytes, r0, nr, nb * kR);
    for (int64_t i = 0; i < nb; ++i) {
      __m512i v[kKquantsLanesFewMax][kR];
      for (int r = 0; r < kR; ++r) {
        pf.step();
        PreppedRow p;
        T::prep(*block_at<Block>(g, w_row_bytes, gr, r, i), p);
        for (int t = 0; t < nc; ++t) v[t][r] = T::dot(p, xt[t][i]);
      }
      __m512 d, dmin;
      T::scales(g + static_cast<size_t>(i) * sizeof(Block), offsets, d, dmin);
      for (int t = 0; t < nc; ++t) {
        __m512i a, b;
        reduce_rows(v[t], a, b);
        T::step(a, b, d, dmin, xt[t][i].d, acc[t], acc_m[t]);
      }
    }
    for (int t = 0; t < nc; ++t)
      _mm512_mask_storeu_ps(s + t * lds + r0, static_cast<__mmask16>((1u << gr) - 1), _mm512_sub_ps(acc[t], acc_m[t]));
  }
}



}  // namespace

EMBER_KQUANTS_LANES_ENTRIES(q4_K, Lanes16, RowsQ4K, TileQ4K)
EMBER_KQUANTS_LANES_ENTRIES(q5_K, Lanes16, RowsQ5K, TileQ5K)
EMBER_KQUANTS_LANES_ENTRIES(q6_K, Lanes16, RowsQ6K, TileQ6K)
EMBER_KQUANTS_R16_TILE_ENTRY(q4_K, Lanes16, TileQ4K)
EMBER_KQUANTS_R16_TILE_ENTRY(q6_K, Lanes16, TileQ6K)

void q4_K_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int64_t nr, int nc) {
  few<RowsQ4K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes,
               nr, nc);
}
void q5_K_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int64_t nr, int nc) {
  few<RowsQ5K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes,
               nr, nc);
}
void q6_K_few(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
              size_t x_row_bytes, int64_t nr, int nc) {
  few<RowsQ6K>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x), x_row_bytes,
               nr, nc);
}

}  // namespace ember::avx512
