// AVX2 "row lanes" kernels for Q4_K, Q5_K and Q6_K x Q8_K: vec_dot, vec_dot_rows
// (decode) and the tile kernel (kKquantsLanesTileRows = 8 weight rows x up to
// kKquantsLanesTileCols tokens), the kernels of these types at this level.
//
// Arithmetic: the row-lane contract of avx512/kquants_lanes.cpp (scalar twins
// in kernels/ref/kquants_lanes.h): per super-block one exact int32 sumi
// (Q4_K also summ), converted once and fma'd with f16(d) * x.d (Q4_K:
// acc_m with f16(dmin) * x.d; result acc - acc_m). So these kernels agree
// bit for bit with the twins and with the AVX-512 level, whatever the row
// grouping or token count.
//
// Tile: one output row per 32-bit ymm lane. Each call unpacks its 8 rows'
// quants (unsigned: Q4_K nibbles, Q6_K q = stored 6 bits) and transposes
// them super-block by super-block (dword k of the 32-element piece m of row
// r -> lane r of vector 8m + k), so one vpmaddubsw with a broadcast
// activation dword advances 8 rows. Without VNNI the pair sums stay in i16:
// Q4_K adds the 8 pieces of a 32-element sub-block in i16 (16 products per
// word: <= 16 * 15 * 127 < 2^15) and weights them with one vpmaddwd by the
// (sc, sc) word pair of the row (Q5_K, quants 0..31: 4 pieces per i16 sum,
// 8 products: <= 8 * 31 * 128 < 2^15, two vpmaddwd); Q6_K adds 2 pieces (4 products per word:
// <= 4 * 63 * 127 < 2^15) per vpmaddwd with (sc_g, sc_g), and its offset 32
// enters once per super-block as -32 * sum_g sc_g * bsums[g]. The mins / the
// offset and the float steps are one instruction per 8 outputs.
// Decode of plain rows: rows in groups of 8 (super-block i of the 8 rows, one
// after another, the next group's bytes prefetched a share per row of each
// super-block: lanes::GroupPrefetch), each row's 8 exact i32 lane sums formed in the natural layout
// (vpmaddubsw, vpmaddwd with the sub-block scales), the 8 rows' sums reduced
// together (horizontal adds) so the float work is once per 8 rows.
// Interleaved Q4_K_R16 / Q6_K_R16 (kernels/interleave.h): the tile packs each
// 8-row half of a group from the layout (pack_r16: no transposes) and runs
// the same register passes; their decode is in avx2/kquants_r16_rows.cpp.
// (AVX-VNNI `vpdpbusd ymm` would fold the i16 adds; not used yet.)
// The drivers (decode over row groups, the tile, the interleaved tile, the
// entry points) are the width-generic ones of kernels/cpu/kquants_lanes.h
// over Lanes8; this file holds the 8-lane arithmetic and packing.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "kernels/cpu/avx2/lanes8.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/kquants_lanes.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx2 {
namespace {

using lanes::block_at;
using lanes::kTileTokens;
using lanes8::bcast32;
using lanes8::chain;
using lanes8::dup_words;
using lanes8::reduce8;
using lanes8::row_offsets;
using lanes8::transpose8;

constexpr int kR = 8;            // rows per lane group (one per 32-bit ymm lane)
constexpr int kT = kTileTokens;  // tokens per register group of the tile kernel
static_assert(kKquantsLanesTileRows == kR, "one lane group per tile");

// The lanes of the width-generic drivers (kernels/cpu/kquants_lanes.h):
// row r of a group in 32-bit lane r of a ymm.
struct Lanes8 {
  static constexpr int kR = 8;
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static I row_offsets(size_t w_row_bytes, int nr) { return lanes8::row_offsets(w_row_bytes, nr); }
  static void store_rows(float* dst, F v, int nr) {
    if (nr == kR) {
      _mm256_storeu_ps(dst, v);
      return;
    }
    alignas(32) float tmp[kR];
    _mm256_store_ps(tmp, v);
    for (int r = 0; r < nr; ++r) dst[r] = tmp[r];
  }
};

using lanes8::loadu;
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// The f16 words at byte offset 0 and 2 of the dword at `base` + offsets[r]
// of the 8 rows, as f32 (lane r = row r).
inline void gather_f16_pair(const uint8_t* base, __m256i offsets, __m256& lo, __m256& hi) {
  const __m256i dd = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), offsets, 1);
  const __m256i w = _mm256_permute4x64_epi64(
      _mm256_packus_epi32(_mm256_and_si256(dd, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(dd, 16)),
      _MM_SHUFFLE(3, 1, 2, 0));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(w));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(w, 1));
}

// u[m] = the unsigned quants of elements 32m .. 32m + 31 in order.
inline void unpack_q4(const BlockQ4_K& b, __m256i u[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i q = loadu(b.qs + 32 * j);
    u[2 * j] = _mm256_and_si256(q, m4);
    u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
}
// The same for Q5_K (0..31): bit 4 of element 32m + l is bit m of qh[l],
// moved to position 4 of its byte by one shift (no bit reaches position 4
// of a neighbouring byte).
inline void unpack_q5(const BlockQ5_K& b, __m256i u[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i qh = loadu(b.qh);
  const __m256i hb[8] = {_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 3), _mm256_slli_epi16(qh, 2),
                         _mm256_slli_epi16(qh, 1), qh,                       _mm256_srli_epi16(qh, 1),
                         _mm256_srli_epi16(qh, 2), _mm256_srli_epi16(qh, 3)};
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i q = loadu(b.qs + 32 * j);
    u[2 * j] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(hb[2 * j], m10));
    u[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_and_si256(hb[2 * j + 1], m10));
  }
}
inline void unpack_q6(const BlockQ6_K& b, __m256i u[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i qh = loadu(b.qh + 32 * h);
    const __m256i ql0 = loadu(b.ql + 64 * h), ql1 = loadu(b.ql + 64 * h + 32);
    u[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
    u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
    u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
    u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
  }
}

// ---- tile: 8 rows x up to kKquantsLanesTileCols tokens ----

// w[8m + k] lane r <- dword k of u_r[m] for the 8 rows.
inline void transpose_quants(__m256i u[kR][8], __m256i* w) {
  __m256i in[kR];
#pragma GCC unroll 1
  for (int m = 0; m < 8; ++m) {
    for (int r = 0; r < kR; ++r) in[r] = u[r][m];
    transpose8(in, w + 8 * m);
  }
}


struct alignas(32) PackedQ4K {
  __m256i w[64];  // w[8s + l] lane r: unsigned quants 32s + 4l .. + 3 of row r
  __m256i sc[8];  // sc[s] lane r: i16 pair (sc_s, sc_s) of row r
  __m256i mn[8];  // mn[s] lane r: i16 pair (m_s, m_s) of row r
  __m256 d, dmin;
};

struct alignas(32) PackedQ6K {
  __m256i w[64];   // w[4g + l] lane r: quants 16g + 4l .. + 3
  __m256i sc[16];  // sc[g] lane r: i16 pair (sc_g, sc_g)
  __m256i scp[8];  // scp[k] lane r: i16 pair (sc_2k, sc_2k+1)
  __m256 d;
};

// Q4_K and Q5_K (kFive: quants 0..31, so 4 pieces per i16 sum instead of
// 8: 8 products per word, <= 8 * 31 * 128 < 2^15; two vpmaddwd per sub-block).
template <bool kFive>
struct TileScaleMin {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  using Packed = PackedQ4K;

  static void pack(const uint8_t* w, size_t w_row_bytes, __m256i offsets, int nr, int64_t i, Packed& pk) {
    __m256i in_s[kR], in_m[kR];
    __m256i u[kR][8];
    for (int r = 0; r < kR; ++r) {
      const Block* b = block_at<Block>(w, w_row_bytes, nr, r, i);
      alignas(16) uint8_t sm[16];
      simd::unpack_k4_scales(b->scales, sm, sm + 8);
      in_s[r] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm)));
      in_m[r] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8)));
      if constexpr (kFive)
        unpack_q5(*b, u[r]);
      else
        unpack_q4(*b, u[r]);
    }
    __m256i ts[8], tm[8];
    transpose8(in_s, ts);
    transpose8(in_m, tm);
    for (int s = 0; s < 8; ++s) {
      pk.sc[s] = dup_words(ts[s]);
      pk.mn[s] = dup_words(tm[s]);
    }
    transpose_quants(u, pk.w);
    gather_f16_pair(w + static_cast<size_t>(i) * sizeof(Block), offsets, pk.d, pk.dmin);
  }

  // The same from rows 8 * half .. + 7 of the Q4_K_R16 super-block at p
  // (kernels/interleave.h; Q4_K only): nibble splits and scale unpacking, no
  // transposes (a 64-byte vector of the layout is lane r = row r for 16
  // rows: its 32-byte half `half` is this form's vector).
  static void pack_r16(const uint8_t* p, int half, Packed& pk) {
    static_assert(!kFive, "Q5_K has no interleaved layout");
    const size_t h = 32 * static_cast<size_t>(half);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
    for (int c = 0; c < 32; ++c) {  // qs dword c: elements 64j + 4l .. (low), 64j + 32 + 4l .. (high)
      const __m256i q = loadu(p + 256 + 64 * c + h);
      const int j = c / 8, l = c % 8;
      pk.w[8 * (2 * j) + l] = _mm256_and_si256(q, m4);
      pk.w[8 * (2 * j + 1) + l] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    // Scales as simd::unpack_k4_scales, per lane: sc 0..3 | 4..7, m 0..3 | 4..7.
    const __m256i a0 = loadu(p + 64 + h), a1 = loadu(p + 128 + h), a2 = loadu(p + 192 + h);
    const __m256i m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    const __m256i sc[2] = {_mm256_and_si256(a0, m6),
                           _mm256_or_si256(_mm256_and_si256(a2, m4), _mm256_and_si256(_mm256_srli_epi16(a0, 2), m30))};
    const __m256i mn[2] = {_mm256_and_si256(a1, m6), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a2, 4), m4),
                                                                     _mm256_and_si256(_mm256_srli_epi16(a1, 2), m30))};
    const __m256i b0 = _mm256_set1_epi32(0xFF);
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      const __m128i sh = _mm_cvtsi32_si128(8 * (t % 4));
      pk.sc[t] = dup_words(_mm256_and_si256(_mm256_srl_epi32(sc[t / 4], sh), b0));
      pk.mn[t] = dup_words(_mm256_and_si256(_mm256_srl_epi32(mn[t / 4], sh), b0));
    }
    pk.d = _mm256_cvtph_ps(loadu128(p + 16 * half));
    pk.dmin = _mm256_cvtph_ps(loadu128(p + 32 + 16 * half));
  }

  // Tokens xc[0 .. kT) against the packed rows: out[c] lane r = result.
  static void group(const Packed* pk, int64_t nb, const BlockQ8_K* const xc[], __m256 out[]) {
    __m256 acc[kT], acc_m[kT];
    for (int c = 0; c < kT; ++c) acc[c] = acc_m[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const Packed& p = pk[i];
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c) {
        __m256i summ = _mm256_madd_epi16(p.mn[0], bcast32(xc[c][i].bsums));
#pragma GCC unroll 7
        for (int s = 1; s < 8; ++s)
          summ = _mm256_add_epi32(summ, _mm256_madd_epi16(p.mn[s], bcast32(xc[c][i].bsums + 2 * s)));
        acc_m[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_mul_ps(p.dmin, _mm256_set1_ps(xc[c][i].d)),
                                   acc_m[c]);
      }
      __m256i sumi[kT];
      for (int c = 0; c < kT; ++c) sumi[c] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int s = 0; s < 8; ++s) {
        constexpr int kPieces = kFive ? 4 : 8;  // pieces per i16 sum
#pragma GCC unroll 2
        for (int l0 = 0; l0 < 8; l0 += kPieces) {
          __m256i a[kT];
#pragma GCC unroll 4
          for (int c = 0; c < kT; ++c) a[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int l = l0; l < l0 + kPieces; ++l) {
            const __m256i wv = _mm256_load_si256(&p.w[8 * s + l]);
#pragma GCC unroll 4
            for (int c = 0; c < kT; ++c)
              a[c] = chain(_mm256_add_epi16(a[c], _mm256_maddubs_epi16(wv, bcast32(xc[c][i].qs + 32 * s + 4 * l))));
          }
#pragma GCC unroll 4
          for (int c = 0; c < kT; ++c) sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(a[c], p.sc[s]));
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c)
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_mul_ps(p.d, _mm256_set1_ps(xc[c][i].d)), acc[c]);
    }
    for (int c = 0; c < kT; ++c) out[c] = _mm256_sub_ps(acc[c], acc_m[c]);
  }
};

using TileQ4K = TileScaleMin<false>;
using TileQ5K = TileScaleMin<true>;

struct TileQ6K {
  using Block = BlockQ6_K;
  using Packed = PackedQ6K;

  static void pack(const uint8_t* w, size_t w_row_bytes, __m256i offsets, int nr, int64_t i, Packed& pk) {
    __m256i in_a[kR], in_b[kR];
    __m256i u[kR][8];
    for (int r = 0; r < kR; ++r) {
      const Block* b = block_at<Block>(w, w_row_bytes, nr, r, i);
      const __m128i sc = loadu128(b->scales);
      in_a[r] = _mm256_cvtepi8_epi32(sc);
      in_b[r] = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc));
      unpack_q6(*b, u[r]);
    }
    __m256i t[16];
    transpose8(in_a, t);
    transpose8(in_b, t + 8);
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    for (int g = 0; g < 16; ++g) pk.sc[g] = dup_words(t[g]);
    for (int k = 0; k < 8; ++k)
      pk.scp[k] = _mm256_or_si256(_mm256_and_si256(t[2 * k], lo16), _mm256_slli_epi32(t[2 * k + 1], 16));
    transpose_quants(u, pk.w);
    // d is the last word of the block: gather the dword ending with it.
    __m256 unused;
    gather_f16_pair(w + static_cast<size_t>(i) * sizeof(Block) + offsetof(Block, d) - 2, offsets, unused, pk.d);
  }

  // The same from rows 8 * half .. + 7 of the Q6_K_R16 super-block at p.
  static void pack_r16(const uint8_t* p, int half, Packed& pk) {
    const size_t h = 32 * static_cast<size_t>(half);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int hh = 0; hh < 2; ++hh)
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        // Elements 128 hh + 32 e + 4k .. + 3 (e = 0..3): group 8 hh + 2 e + k / 4, dword k % 4.
        const __m256i l0 = loadu(p + 288 + 64 * (16 * hh + k) + h), l1 = loadu(p + 288 + 64 * (16 * hh + 8 + k) + h);
        const __m256i qh = loadu(p + 2336 + 64 * (8 * hh + k) + h);
        const __m256i e[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30))};
        for (int q = 0; q < 4; ++q) pk.w[4 * (8 * hh + 2 * q + k / 4) + k % 4] = e[q];
      }
    __m256i t[16];
    for (int g = 0; g < 16; ++g)
      t[g] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 32 + 16 * g + 8 * half)));
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    for (int g = 0; g < 16; ++g) pk.sc[g] = dup_words(t[g]);
    for (int k = 0; k < 8; ++k)
      pk.scp[k] = _mm256_or_si256(_mm256_and_si256(t[2 * k], lo16), _mm256_slli_epi32(t[2 * k + 1], 16));
    pk.d = _mm256_cvtph_ps(loadu128(p + 16 * half));
  }

  static void group(const Packed* pk, int64_t nb, const BlockQ8_K* const xc[], __m256 out[]) {
    __m256 acc[kT];
    for (int c = 0; c < kT; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const Packed& p = pk[i];
      __m256i sumi[kT];
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c) {
        __m256i corr = _mm256_madd_epi16(p.scp[0], bcast32(xc[c][i].bsums));
#pragma GCC unroll 7
        for (int k = 1; k < 8; ++k)
          corr = _mm256_add_epi32(corr, _mm256_madd_epi16(p.scp[k], bcast32(xc[c][i].bsums + 2 * k)));
        sumi[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
      }
#pragma GCC unroll 1
      for (int g = 0; g < 16; ++g) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i w0 = _mm256_load_si256(&p.w[4 * g + 2 * h]);
          const __m256i w1 = _mm256_load_si256(&p.w[4 * g + 2 * h + 1]);
#pragma GCC unroll 4
          for (int c = 0; c < kT; ++c) {
            const int8_t* y = xc[c][i].qs + 16 * g + 8 * h;
            const __m256i a =
                _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast32(y)), _mm256_maddubs_epi16(w1, bcast32(y + 4)));
            sumi[c] = chain(_mm256_add_epi32(sumi[c], _mm256_madd_epi16(a, p.sc[g])));
          }
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < kT; ++c)
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_mul_ps(p.d, _mm256_set1_ps(xc[c][i].d)), acc[c]);
    }
    for (int c = 0; c < kT; ++c) out[c] = acc[c];
  }
};

// ---- decode: one token over 8-row groups ----

// What the decode driver (lanes::rows) calls: one row's 8 exact i32 lane
// sums per super-block (Self::sums; zero for rows past the group's end, not
// stored), then per super-block the 8 rows' sums reduced together
// (horizontal adds) and the float steps once for the 8 rows (Self::step).
template <class Self>
struct RowsLanes8 {
  struct Sums {
    __m256i a[kR], m[kR];  // row r: lanes totalling sumi / summ (Q6_K: m unused)
  };
  template <class Block>
  static void row_sums(const Block& b, const BlockQ8_K& x, int r, bool valid, Sums& v) {
    if (!valid) {
      v.a[r] = v.m[r] = _mm256_setzero_si256();
      return;
    }
    Self::sums(b, x, v.a[r], v.m[r]);
  }
  static void finish(const Sums& v, const uint8_t* blocks, __m256i offsets, float xd, __m256& acc, __m256& acc_m) {
    const __m256i a = reduce8(v.a);
    const __m256i m = Self::kMins ? reduce8(v.m) : _mm256_setzero_si256();
    Self::step(blocks, offsets, a, m, xd, acc, acc_m);
  }
};

// Q4_K and Q5_K (kFive; a vpmaddubsw pair sum stays within i16 either way).
template <bool kFive>
struct RowsScaleMin : RowsLanes8<RowsScaleMin<kFive>> {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr bool kMins = true;
  // a: 8 lanes whose total is sumi; b: 8 lanes whose total is summ.
  static void sums(const Block& b, const BlockQ8_K& x, __m256i& a, __m256i& m) {
    alignas(16) uint8_t sc[8], mn[8];
    simd::unpack_k4_scales(b.scales, sc, mn);
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m256i mins =
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)), dup));
    m = _mm256_madd_epi16(loadu(x.bsums), mins);
    __m256i u[8];
    if constexpr (kFive)
      unpack_q5(b, u);
    else
      unpack_q4(b, u);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i w0 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(((4 * j + 1) << 8) | (4 * j))));
      const __m256i w1 =
          _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(((4 * j + 3) << 8) | (4 * j + 2))));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(u[2 * j], loadu(x.qs + 64 * j)), w0));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(u[2 * j + 1], loadu(x.qs + 64 * j + 32)), w1));
    }
    a = _mm256_add_epi32(s0, s1);
  }
  static void step(const uint8_t* blocks, __m256i offsets, __m256i a, __m256i m, float xd, __m256& acc,
                   __m256& acc_m) {
    __m256 d, dmin;
    gather_f16_pair(blocks, offsets, d, dmin);
    const __m256 vxd = _mm256_set1_ps(xd);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(d, vxd), acc);
    acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, vxd), acc_m);
  }
};

using RowsQ4K = RowsScaleMin<false>;
using RowsQ5K = RowsScaleMin<true>;

struct RowsQ6K : RowsLanes8<RowsQ6K> {
  using Block = BlockQ6_K;
  static constexpr bool kMins = false;
  // a: 8 lanes whose total is sum_g sc_g * sum((q - 32) * x); m unused.
  static void sums(const Block& b, const BlockQ8_K& x, __m256i& a, __m256i& m) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b.scales));
    const __m256i corr = _mm256_madd_epi16(loadu(x.bsums), sc16);
    __m256i u[8];
    unpack_q6(b, u);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    const __m256i ctrl = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      // lanes 0-7: sc[2p], lanes 8-15: sc[2p + 1] (the two groups of piece p)
      const __m256i sp = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(p)), ctrl);
      const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(u[p], loadu(x.qs + 32 * p)), sp);
      if (p % 2) s1 = _mm256_add_epi32(s1, v);
      else s0 = _mm256_add_epi32(s0, v);
    }
    a = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), _mm256_slli_epi32(corr, 5));
    m = _mm256_setzero_si256();
  }
  static void step(const uint8_t* blocks, __m256i offsets, __m256i a, __m256i, float xd, __m256& acc, __m256&) {
    __m256 unused, d;
    gather_f16_pair(blocks + offsetof(Block, d) - 2, offsets, unused, d);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(d, _mm256_set1_ps(xd)), acc);
  }
};

}  // namespace

EMBER_KQUANTS_LANES_ENTRIES(q4_K, Lanes8, RowsQ4K, TileQ4K)
EMBER_KQUANTS_LANES_ENTRIES(q5_K, Lanes8, RowsQ5K, TileQ5K)
EMBER_KQUANTS_LANES_ENTRIES(q6_K, Lanes8, RowsQ6K, TileQ6K)
EMBER_KQUANTS_R16_TILE_ENTRY(q4_K, Lanes8, TileQ4K)
EMBER_KQUANTS_R16_TILE_ENTRY(q6_K, Lanes8, TileQ6K)

}  // namespace ember::avx2
