// AVX2 "row lanes" kernels for the legacy weight types Q4_0, Q5_0 and Q8_0 x
// Q8_0 activations, the kernels of these types at this level: vec_dot,
// vec_dot_rows (decode), the token-lane form (vec_dot_tokens over the
// activations packed once per matmul by pack_tokens: prefill and batched
// decode) and the tile (kLegacyTileRows x kLegacyTileCols, packing its tokens
// per call); and decode and token lanes over the interleaved Q4_0_R16 /
// Q5_0_R16 / Q8_0_R16 layouts (each 8-row half of a group read as this
// form's vectors, no transposes; Q5_0's fifth bits from the layout's masks).
//
// Arithmetic: the lane contract of the AVX-512 level (avx512/legacy_lanes.cpp):
//   acc = 0;  for each block b in order:  acc = fma(float(isum_b), d_w[b] * d_x[b], acc)
// isum_b the exact int32 dot of the 32 signed weights (Q4_0: nibble - 8;
// Q5_0: quant - 16; Q8_0: quant) and activation quants. So these types give
// the same bits at both levels, whatever the row grouping or token count
// (tests/kernels/legacy_lanes_test.cpp checks both against a scalar model of
// these steps).
//
// Token lanes / tile: one output row per 32-bit ymm lane. A group of 8 rows
// is unpacked block by block and transposed (dword k of row r's 32 quants ->
// lane r of vector k: lanes8::transpose8), so one vpmaddubsw with a
// broadcast activation dword advances 8 rows for a token. Q4_0 / Q5_0 take
// the quants unsigned (u in [0, 15] / [0, 31]) against the signed
// activations: the pair sums stay within i16 over 8 / 4 vectors (8 * 2 * 15
// * 128, 4 * 2 * 31 * 128 < 2^15), one vpmaddwd per token and block (two for
// Q5_0), and the offset enters as a per-token seed -offset * sum(x_b)
// packed with the activations. Q8_0 uses the sign trick (|w| from the
// transposed group, the activation dword signed by w), a vpmaddwd per
// vector. The float steps are one convert, multiply and fma per 8 outputs.
// The packed activations (per block: the quants of every token, then their
// f32 scales, then their seeds) are made once per matmul; the kernel walks
// its rows in 64-token blocks (their packed activations stay in L2) and
// 8-row groups, each group transposed per token block in chunks of kChunk
// blocks (about 5% of the Q4_0 work at 64 tokens).
//
// Decode (one token): rows in groups of 8, each row's block formed as 8
// exact i32 lane sums in the natural layout (vpmaddubsw, vpmaddwd; the
// offset subtracted as vpmaddubsw(offset, x) in i16), the 8 rows' sums
// reduced together (lanes8::reduce8) and their scales gathered, so the float
// work is once per 8 rows; the next group's bytes are prefetched into L2 a
// share per block (lanes::GroupPrefetch).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "kernels/cpu/avx2/lanes8.h"
#include "kernels/cpu/group_prefetch.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/simd.h"
#include "quant/blocks.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ember::avx2 {
namespace {

using lanes8::bcast32;
using lanes8::loadu;

constexpr int kR = 8;          // rows per group (one per ymm lane)
constexpr int kT = 4;          // tokens per register pass
constexpr int kChunk = 64;     // blocks transposed at a time (2048 elements)
constexpr int kTokBlock = 64;  // tokens per walk over the rows

enum class Legacy { kQ4_0, kQ5_0, kQ8_0 };

template <Legacy K>
struct Type;
template <>
struct Type<Legacy::kQ4_0> {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m256i quants(const Block& b) { return simd::unpack_nibbles_16(b.qs); }  // unsigned, in order
};
template <>
struct Type<Legacy::kQ5_0> {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  static __m256i quants(const Block& b) {
    const __m256i hb =
        _mm256_and_si256(simd::bits_to_bytes_mask(simd::load_u32(b.qh)), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(simd::unpack_nibbles_16(b.qs), hb);
  }
};
template <>
struct Type<Legacy::kQ8_0> {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 0;  // signed quants: the sign trick
  static __m256i quants(const Block& b) { return loadu(b.qs); }
};

// ---- packed activations ----
// Block b of nc tokens at packed + b * stride(nc): quants [nc][32], then the
// f32 scales [nc], then the i32 seeds -offset * sum(quants) [nc].
inline size_t pack_stride(int nc) { return (static_cast<size_t>(nc) * 40 + 63) / 64 * 64; }

struct TokenBlocks {
  const uint8_t* base;  // block 0
  size_t stride;
  int nc;
  const uint8_t* section(int64_t b) const { return base + static_cast<size_t>(b) * stride; }
};

template <int kOffset>
void pack(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b, int64_t e) {
  (void)n;
  const size_t stride = pack_stride(nc);
  for (int64_t i = b; i < e; ++i) {
    uint8_t* sec = static_cast<uint8_t*>(packed) + static_cast<size_t>(i) * stride;
    auto* d = reinterpret_cast<float*>(sec + 32 * static_cast<size_t>(nc));
    auto* seed = reinterpret_cast<int32_t*>(sec + 36 * static_cast<size_t>(nc));
    for (int c = 0; c < nc; ++c) {
      const auto& xb = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(x) + c * x_row_bytes)[i];
      std::memcpy(sec + 32 * c, xb.qs, 32);
      d[c] = simd::load_f16(xb.d);
      int32_t sum = 0;
      if constexpr (kOffset != 0)
        for (int k = 0; k < 32; ++k) sum += xb.qs[k];
      seed[c] = -kOffset * sum;
    }
  }
}

// ---- one 8-row group, transposed ----
template <Legacy K>
struct GroupChunk {
  static constexpr bool kSigned = K == Legacy::kQ8_0;
  alignas(32) __m256i q[kChunk][8];                // vector k lane r: dword k of row r's quants (Q8_0: |w|)
  alignas(32) __m256i sq[kSigned ? kChunk : 1][8];  // Q8_0: the signed quants (their signs)
  alignas(32) float d[kChunk][kR];                 // lane r: row r's block scale
};

// Blocks [b0, b0 + jn) of rows w + min(r, nr - 1) * w_row_bytes into g.
template <Legacy K>
void transpose_chunk(const uint8_t* w, size_t w_row_bytes, int nr, int64_t b0, int jn, GroupChunk<K>& g) {
  using Block = typename Type<K>::Block;
  const Block* rows[kR];
  for (int r = 0; r < kR; ++r)
    rows[r] = reinterpret_cast<const Block*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes) + b0;
  for (int j = 0; j < jn; ++j) {
    __m256i u[kR];
    for (int r = 0; r < kR; ++r) {
      u[r] = Type<K>::quants(rows[r][j]);
      g.d[j][r] = simd::load_f16(rows[r][j].d);
    }
    if constexpr (GroupChunk<K>::kSigned) {
      lanes8::transpose8(u, g.sq[j]);
      for (int k = 0; k < 8; ++k) g.q[j][k] = _mm256_abs_epi8(g.sq[j][k]);
    } else {
      lanes8::transpose8(u, g.q[j]);
    }
  }
}

// ---- the interleaved Q4_0_R16 / Q5_0_R16 / Q8_0_R16 layouts (kernels/interleave.h) ----
// A 64-byte vector of a block holds the same dword of 16 rows: its 32-byte
// half `half` is this form's vector for rows 8 half .. + 7 (no transposes).
constexpr int kG = 16;  // rows per interleaved group
template <Legacy K>
constexpr size_t kR16Block = kG * sizeof(typename Type<K>::Block);  // 288 / 352 / 544 bytes

// Q4_0 / Q5_0: the unsigned quants of qs dword c of rows 8 half .. + 7 of
// the block at p: lo = elements 4c .. 4c + 3, hi = 16 + 4c .. (Q5_0: the fifth
// bit from the layout's masks c and 4 + c, bits 32 half .. + 31 = this
// half's bytes).
template <Legacy K>
inline void r16_quants(const uint8_t* p, int half, int c, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  constexpr size_t kQs = K == Legacy::kQ5_0 ? 96 : 32;
  const __m256i q = loadu(p + kQs + 64 * c + 32 * half);
  lo = _mm256_and_si256(q, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if constexpr (K == Legacy::kQ5_0) {
    const __m256i b4 = _mm256_set1_epi8(0x10);
    lo = _mm256_or_si256(lo, _mm256_and_si256(simd::bits_to_bytes_mask(simd::load_u32(p + 32 + 8 * c + 4 * half)), b4));
    hi = _mm256_or_si256(
        hi, _mm256_and_si256(simd::bits_to_bytes_mask(simd::load_u32(p + 32 + 8 * (4 + c) + 4 * half)), b4));
  }
}

// Blocks [b0, b0 + jn) of rows 8 half .. + 7 of the interleaved group at gp into g.
template <Legacy K>
void unpack_chunk_r16(const uint8_t* gp, int half, int64_t b0, int jn, GroupChunk<K>& g) {
  const size_t h = 32 * static_cast<size_t>(half);
  for (int j = 0; j < jn; ++j) {
    const uint8_t* p = gp + static_cast<size_t>(b0 + j) * kR16Block<K>;
    _mm256_store_ps(g.d[j], _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * half))));
    if constexpr (K == Legacy::kQ8_0) {
      for (int c = 0; c < 8; ++c) {
        g.sq[j][c] = loadu(p + 32 + 64 * c + h);
        g.q[j][c] = _mm256_abs_epi8(g.sq[j][c]);
      }
    } else {
      for (int c = 0; c < 4; ++c) {  // qs dword c: elements 4c .. (low nibbles), 16 + 4c .. (high)
        __m256i lo, hi;
        r16_quants<K>(p, half, c, lo, hi);
        g.q[j][c] = lo;
        g.q[j][4 + c] = hi;
      }
    }
  }
}

// Exact isum (before the seed) of the group's 8 rows for one token's block
// (activation quants at xq): lane r = row r.
template <Legacy K>
inline __m256i isum8(const __m256i w[8], const GroupChunk<K>& g, int j, const uint8_t* xq) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (K == Legacy::kQ4_0) {
    __m256i s = _mm256_maddubs_epi16(w[0], bcast32(xq));
#pragma GCC unroll 7
    for (int k = 1; k < 8; ++k) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[k], bcast32(xq + 4 * k)));
    return _mm256_madd_epi16(s, ones);
  } else if constexpr (K == Legacy::kQ5_0) {
    __m256i s0 = _mm256_maddubs_epi16(w[0], bcast32(xq)), s1 = _mm256_maddubs_epi16(w[4], bcast32(xq + 16));
#pragma GCC unroll 3
    for (int k = 1; k < 4; ++k) {
      s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(w[k], bcast32(xq + 4 * k)));
      s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(w[4 + k], bcast32(xq + 16 + 4 * k)));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones));
  } else {
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i xs = _mm256_sign_epi8(bcast32(xq + 4 * k), _mm256_load_si256(&g.sq[j][k]));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], xs), ones));
    }
    return acc;
  }
}

// Stores lane r < nr of v to out[r].
inline void store_rows(float* out, __m256 v, int nr) {
  if (nr == kR) {
    _mm256_storeu_ps(out, v);
    return;
  }
  alignas(32) float t[kR];
  _mm256_store_ps(t, v);
  std::memcpy(out, t, sizeof(float) * static_cast<size_t>(nr));
}

// Tokens [c0, c0 + NT) of tb over the chunk's blocks [0, jn) (the chunk
// starting at block b0 of tb). acc[t] (token c0 + t) holds the accumulators
// between chunks: read unless `first`; with `out` (the last chunk) the
// results go to out[t * lds + r] for r < nr instead.
template <Legacy K, int NT>
inline void pass(const GroupChunk<K>& g, int jn, const TokenBlocks& tb, int64_t b0, int c0, bool first, __m256* acc,
                 float* out, int64_t lds, int nr) {
  __m256 a[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) a[t] = first ? _mm256_setzero_ps() : acc[t];
  const size_t nc = static_cast<size_t>(tb.nc);
  for (int j = 0; j < jn; ++j) {
    const uint8_t* sec = tb.section(b0 + j);
    const auto* dx = reinterpret_cast<const float*>(sec + 32 * nc) + c0;
    const auto* seed = reinterpret_cast<const int32_t*>(sec + 36 * nc) + c0;
    const uint8_t* xq = sec + 32 * static_cast<size_t>(c0);
    __m256i w[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) w[k] = _mm256_load_si256(&g.q[j][k]);
    const __m256 dw = _mm256_load_ps(g.d[j]);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      __m256i is = isum8<K>(w, g, j, xq + 32 * t);
      if constexpr (Type<K>::kOffset != 0) is = _mm256_add_epi32(is, _mm256_set1_epi32(seed[t]));
      const __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx + t));
      a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, a[t]);
    }
  }
  if (out) {
    for (int t = 0; t < NT; ++t) store_rows(out + t * lds, a[t], nr);
    return;
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc[t] = a[t];
}

// Tokens [c0, c0 + count) of tb against one transposed chunk (blocks [b0,
// b0 + jn) of tb) in register passes of kT tokens; acc[t] / out + t * lds:
// token c0 + t.
template <Legacy K>
void chunk_tokens(const GroupChunk<K>& g, int jn, const TokenBlocks& tb, int64_t b0, int c0, int count, bool first,
                  bool last, __m256* acc, float* out, int64_t lds, int nr) {
  int t = 0;
  for (; t + kT <= count; t += kT)
    pass<K, kT>(g, jn, tb, b0, c0 + t, first, acc + t, last ? out + t * lds : nullptr, lds, nr);
  float* o = last ? out + t * lds : nullptr;
  switch (count - t) {
    case 3: pass<K, 3>(g, jn, tb, b0, c0 + t, first, acc + t, o, lds, nr); break;
    case 2: pass<K, 2>(g, jn, tb, b0, c0 + t, first, acc + t, o, lds, nr); break;
    case 1: pass<K, 1>(g, jn, tb, b0, c0 + t, first, acc + t, o, lds, nr); break;
    default: break;
  }
}

// vec_dot_tokens: tokens in blocks of kTokBlock (outer: their packed
// activations stay in L2 while the rows stream), rows in 8-row groups, each
// group transposed kChunk blocks at a time.
template <Legacy K, bool kR16 = false>
void tokens(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* packed,
            int64_t nr, int nc) {
  const int64_t nb = n / kQK;
  const TokenBlocks tb{packed, pack_stride(nc), nc};
  GroupChunk<K> g;
  __m256 acc[kTokBlock];
  for (int c0 = 0; c0 < nc; c0 += kTokBlock) {
    const int count = std::min(kTokBlock, nc - c0);
    for (int64_t r0 = 0; r0 < nr; r0 += kR) {
      const int rows = static_cast<int>(std::min<int64_t>(kR, nr - r0));
      for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
        const int jn = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
        if constexpr (kR16)  // nr is a multiple of 16: whole halves
          unpack_chunk_r16<K>(w + static_cast<size_t>(r0 / kG * kG) * w_row_bytes, static_cast<int>(r0 / kR % 2), b0,
                              jn, g);
        else
          transpose_chunk<K>(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, rows, b0, jn, g);
        chunk_tokens<K>(g, jn, tb, b0, c0, count, b0 == 0, b0 + kChunk >= nb, acc, s + c0 * lds + r0, lds, rows);
      }
    }
  }
}

// vec_dot_tile: up to kLegacyTileRows rows x kLegacyTileCols tokens of
// plain Q8_0 activation rows; each chunk of kTileChunk blocks of the tokens
// is packed on the stack, then every 8-row group runs over it.
constexpr int kTileChunk = 16;
constexpr int kTileGroups = kLegacyTileRows / kR;
static_assert(kLegacyTileRows % kR == 0 && kTileChunk <= kChunk, "tile shape");

template <Legacy K>
void tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
          size_t x_row_bytes, int nr, int nc) {
  const int64_t nb = n / kQK;
  const size_t stride = pack_stride(nc);
  alignas(64) uint8_t buf[kTileChunk * ((kLegacyTileCols * 40 + 63) / 64 * 64)];
  GroupChunk<K> g;
  __m256 acc[kTileGroups][kLegacyTileCols];
  for (int64_t b0 = 0; b0 < nb; b0 += kTileChunk) {
    const int jn = static_cast<int>(std::min<int64_t>(kTileChunk, nb - b0));
    // The chunk's blocks as blocks [b0, b0 + jn) of a pack based at buf - b0 * stride.
    pack<Type<K>::kOffset>(n, x + b0 * sizeof(BlockQ8_0), x_row_bytes, nc, buf, 0, jn);
    const TokenBlocks tb{buf, stride, nc};
    for (int gi = 0; gi * kR < nr; ++gi) {
      const int rows = std::min(kR, nr - gi * kR);
      transpose_chunk<K>(w + static_cast<size_t>(gi * kR) * w_row_bytes, w_row_bytes, rows, b0, jn, g);
      chunk_tokens<K>(g, jn, tb, 0, 0, nc, b0 == 0, b0 + kTileChunk >= nb, acc[gi], s + gi * kR, lds, rows);
    }
  }
}

// vec_dot_rows: 8-row groups, natural layout, the rows' lane sums reduced
// together per block.
template <Legacy K>
void rows(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_0* x, int64_t nr) {
  using Block = typename Type<K>::Block;
  const int64_t nb = n / kQK;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const int rows = static_cast<int>(std::min<int64_t>(kR, nr - r0));
    const uint8_t* wg = w + static_cast<size_t>(r0) * w_row_bytes;
    const Block* wr[kR];
    for (int r = 0; r < kR; ++r)
      wr[r] = reinterpret_cast<const Block*>(wg + static_cast<size_t>(std::min(r, rows - 1)) * w_row_bytes);
    const __m256i offsets = lanes8::row_offsets(w_row_bytes, rows);
    // Past the call's rows too (the next task's; a prefetch cannot fault).
    auto pf = lanes::GroupPrefetch(wg + kR * w_row_bytes, kR * w_row_bytes, nb);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      const __m256i xq = loadu(x[b].qs);
      __m256i v[kR];
      if constexpr (Type<K>::kOffset != 0) {
        const __m256i corr = _mm256_maddubs_epi16(_mm256_set1_epi8(Type<K>::kOffset), xq);
#pragma GCC unroll 8
        for (int r = 0; r < kR; ++r)
          v[r] = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(Type<K>::quants(wr[r][b]), xq), corr), ones);
      } else {
#pragma GCC unroll 8
        for (int r = 0; r < kR; ++r) {
          const __m256i q = Type<K>::quants(wr[r][b]);
          v[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xq, q)), ones);
        }
      }
      const __m256 dw = lanes8::gather_f16(wg + static_cast<size_t>(b) * sizeof(Block), offsets);
      const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(simd::load_f16(x[b].d)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes8::reduce8(v)), sc, acc);
    }
    pf.finish();
    store_rows(s + r0, acc, rows);
  }
}

// Decode over whole interleaved groups (nr a multiple of 16): each group one
// sequential stream (the next prefetched into L2 a share per block, also
// past the call's rows), each activation broadcast serving both halves.
template <Legacy K>
void rows_r16(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_0* x, int64_t nr) {
  const int64_t nb = n / kQK;
  const size_t group_bytes = kG * w_row_bytes;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g0 = 0; g0 < nr; g0 += kG) {
    const uint8_t* gp = w + static_cast<size_t>(g0) * w_row_bytes;
    auto pf = lanes::GroupPrefetch(gp + group_bytes, group_bytes, nb);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      const uint8_t* p = gp + static_cast<size_t>(b) * kR16Block<K>;
      const int8_t* xq = x[b].qs;
      __m256i is[2];
      if constexpr (K != Legacy::kQ8_0) {
        // lo / hi nibble pieces in separate i16 sums (Q5_0: 4 pieces, <= 8 * 31 * 128).
        __m256i s16[2][2] = {{_mm256_setzero_si256(), _mm256_setzero_si256()},
                             {_mm256_setzero_si256(), _mm256_setzero_si256()}};
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m256i xl = bcast32(xq + 4 * c), xh = bcast32(xq + 16 + 4 * c);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            __m256i lo, hi;
            r16_quants<K>(p, h, c, lo, hi);
            s16[h][0] = _mm256_add_epi16(s16[h][0], _mm256_maddubs_epi16(lo, xl));
            s16[h][1] = _mm256_add_epi16(s16[h][1], _mm256_maddubs_epi16(hi, xh));
          }
        }
        // The offset: -offset * sum(x_b), the same for every row.
        const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), loadu(xq)), ones);
        const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        const __m256i seed = _mm256_set1_epi32(-Type<K>::kOffset * (_mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 1)));
        for (int h = 0; h < 2; ++h)
          is[h] = _mm256_add_epi32(
              _mm256_add_epi32(_mm256_madd_epi16(s16[h][0], ones), _mm256_madd_epi16(s16[h][1], ones)), seed);
      } else {
        is[0] = is[1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          const __m256i xc = bcast32(xq + 4 * c);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256i q = loadu(p + 32 + 64 * c + 32 * h);
            const __m256i pr = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xc, q));
            is[h] = _mm256_add_epi32(is[h], _mm256_madd_epi16(pr, ones));
          }
        }
      }
      const __m256 dx = _mm256_set1_ps(simd::load_f16(x[b].d));
      for (int h = 0; h < 2; ++h) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[h]), _mm256_mul_ps(dw, dx), acc[h]);
      }
    }
    pf.finish();
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(s + g0 + kR * h, acc[h]);
  }
}

}  // namespace

// ---- entry points ----
#define EMBER_AVX2_LEGACY_LANES(name, kind)                                                                            \
  void name##_dot(int64_t n, float* s, const void* w, const void* x) {                                                 \
    rows<Legacy::kind>(n, s, static_cast<const uint8_t*>(w),                                                           \
                       sizeof(Type<Legacy::kind>::Block) * static_cast<size_t>(n / kQK),                               \
                       static_cast<const BlockQ8_0*>(x), 1);                                                           \
  }                                                                                                                    \
  void name##_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x,                              \
                   int64_t nr) {                                                                                       \
    rows<Legacy::kind>(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_0*>(x), nr);       \
  }                                                                                                                    \
  void name##_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                                \
                   const void* x, size_t x_row_bytes, int nr, int nc) {                                                \
    tile<Legacy::kind>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),         \
                       x_row_bytes, nr, nc);                                                                           \
  }                                                                                                                    \
  void name##_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                              \
                     const void* packed, int64_t nr, int nc) {                                                         \
    tokens<Legacy::kind>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes,                                       \
                         static_cast<const uint8_t*>(packed), nr, nc);                                                 \
  }                                                                                                                    \
  void name##_tokens_pack(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b,               \
                          int64_t e) {                                                                                 \
    pack<Type<Legacy::kind>::kOffset>(n, x, x_row_bytes, nc, packed, b, e);                                            \
  }                                                                                                                    \
  void name##_r16_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x,                          \
                       int64_t nr) {                                                                                   \
    rows_r16<Legacy::kind>(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_0*>(x),        \
                           nr);                                                                                        \
  }                                                                                                                    \
  void name##_r16_tokens(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,                          \
                         const void* packed, int64_t nr, int nc) {                                                     \
    tokens<Legacy::kind, true>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes,                                 \
                               static_cast<const uint8_t*>(packed), nr, nc);                                           \
  }

EMBER_AVX2_LEGACY_LANES(q4_0, kQ4_0)
EMBER_AVX2_LEGACY_LANES(q5_0, kQ5_0)
EMBER_AVX2_LEGACY_LANES(q8_0, kQ8_0)
#undef EMBER_AVX2_LEGACY_LANES

size_t legacy_tokens_pack_bytes(int64_t n, int nc) { return static_cast<size_t>(n / kQK) * pack_stride(nc); }

}  // namespace ember::avx2
