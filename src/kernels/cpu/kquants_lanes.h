// The row-lane Q4_K / Q5_K / Q6_K kernels' drivers, written once over the
// vector width (kernels/cpu/avx2/kquants_lanes.cpp: 8 rows per group, one
// per 32-bit ymm lane; avx512/kquants_lanes.cpp: 16 per zmm), as
// kernels/cpu/attention_tiles.h is for attention: decode over row groups
// (rows<V, T>), the tile (tile<V, T>: each call packs its rows once, then
// register passes of kTileTokens tokens) and the tile over one interleaved
// 16-row group (tile_r16<V, T>: packed from the layout without transposes),
// plus the entry points each level defines from them. The arithmetic (the
// row-lane contract, twins in kernels/ref/kquants_lanes.h) and the unpacking
// are the level's own, in its traits:
//   V (lanes):  kR (rows per group = lanes), F / I (float / int vectors),
//               zero(), sub(a, b), row_offsets(w_row_bytes, nr) (byte
//               offsets of the group's rows, rows past nr repeating the
//               last), store_rows(dst, v, nr) (lanes < nr to dst[0 .. nr)).
//   T (tile):   Block, Packed (one super-block of kR rows, transposed),
//               pack(w, w_row_bytes, offsets, nr, i, packed),
//               pack_r16(super-block, half, packed) (rows kR * half .. of a
//               16-row group), group(packed, nb, xc[kTileTokens], out).
//   T (decode): Block, Sums (the kR rows' exact integer lane sums of one
//               super-block), row_sums(block, x, r, valid, sums) (row r's;
//               valid: a row of the group, not a repeat past its end),
//               finish(sums, super-block i of the group, offsets, x.d, acc,
//               acc_m) (the rows' sums reduced, their scales, the float
//               steps).
//
// Internal linkage: compiled into the avx2/ and avx512/ TUs with their own
// ISA flags; the linker must not merge their copies into one.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/group_prefetch.h"
#include "quant/blocks.h"

namespace ember::lanes {
namespace {

constexpr int kTileTokens = 4;     // tokens per register pass of the tile (both widths)
constexpr int kR16GroupRows = 16;  // rows of an interleaved group

// Block i of row r (< nr: rows past nr repeat the last) of the rows at w.
template <class Block>
inline const Block* block_at(const uint8_t* w, size_t w_row_bytes, int nr, int r, int64_t i) {
  return reinterpret_cast<const Block*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes) + i;
}

// The packed super-blocks of one group of V::kR rows against nc tokens,
// kTileTokens at a time: lanes r < nr of the results to s[c * lds + r].
template <class V, class T>
void tokens_over_packed(const typename T::Packed* packed, int64_t nb, float* s, int64_t lds, const uint8_t* x,
                        size_t x_row_bytes, int nc, int nr) {
  constexpr int kT = kTileTokens;
  for (int t0 = 0; t0 < nc; t0 += kT) {
    const int gt = std::min(kT, nc - t0);
    const BlockQ8_K* xc[kT];
    for (int c = 0; c < kT; ++c)
      xc[c] = reinterpret_cast<const BlockQ8_K*>(x + static_cast<size_t>(t0 + std::min(c, gt - 1)) * x_row_bytes);
    typename V::F out[kT];
    T::group(packed, nb, xc, out);
    for (int c = 0; c < gt; ++c) V::store_rows(s + (t0 + c) * lds, out[c], nr);
  }
}

// vec_dot_tile: nr <= V::kR rows x nc tokens; the rows packed once per call.
template <class V, class T>
void tile(int64_t n, float* s, int64_t lds, const uint8_t* w, size_t w_row_bytes, const uint8_t* x,
          size_t x_row_bytes, int nr, int nc) {
  const int64_t nb = n / kQK_K;
  thread_local std::vector<typename T::Packed> packed;
  if (packed.size() < static_cast<size_t>(nb)) packed.resize(static_cast<size_t>(nb));
  const typename V::I offsets = V::row_offsets(w_row_bytes, nr);
  for (int64_t i = 0; i < nb; ++i) T::pack(w, w_row_bytes, offsets, nr, i, packed[static_cast<size_t>(i)]);
  tokens_over_packed<V, T>(packed.data(), nb, s, lds, x, x_row_bytes, nc, nr);
}

// The tile over one interleaved 16-row group (kernels/interleave.h; nr ==
// 16): each V::kR-row part packed from the layout, then the register passes.
template <class V, class T>
void tile_r16(int64_t n, float* s, int64_t lds, const uint8_t* w, const uint8_t* x, size_t x_row_bytes, int nc) {
  const int64_t nb = n / kQK_K;
  thread_local std::vector<typename T::Packed> packed;
  if (packed.size() < static_cast<size_t>(nb)) packed.resize(static_cast<size_t>(nb));
  for (int half = 0; half < kR16GroupRows / V::kR; ++half) {
    for (int64_t i = 0; i < nb; ++i)
      T::pack_r16(w + static_cast<size_t>(i) * kR16GroupRows * sizeof(typename T::Block), half,
                  packed[static_cast<size_t>(i)]);
    tokens_over_packed<V, T>(packed.data(), nb, s + V::kR * half, lds, x, x_row_bytes, nc, V::kR);
  }
}

// vec_dot_rows: one token over groups of V::kR rows (super-block i of the
// group's rows one after another), the next group's bytes prefetched a
// share per row of each super-block (one sequential stream: GroupPrefetch;
// a share per super-block, 18 lines at once for 2048-wide Q4_K, filled the
// line fill buffers and stalled on the prefetches).
template <class V, class T>
void rows(int64_t n, float* s, const uint8_t* w, size_t w_row_bytes, const BlockQ8_K* x, int64_t nr) {
  using Block = typename T::Block;
  constexpr int kR = V::kR;
  const int64_t nb = n / kQK_K;
  for (int64_t r0 = 0; r0 < nr; r0 += kR) {
    const int gr = static_cast<int>(std::min<int64_t>(kR, nr - r0));
    const uint8_t* g = w + static_cast<size_t>(r0) * w_row_bytes;
    const typename V::I offsets = V::row_offsets(w_row_bytes, gr);
    typename V::F acc = V::zero(), acc_m = V::zero();
    auto pf = next_group_prefetch<kR>(w, w_row_bytes, r0, nr, nb * kR);
    for (int64_t i = 0; i < nb; ++i) {
      typename T::Sums sums;
      for (int r = 0; r < kR; ++r) {
        pf.step();
        T::row_sums(*block_at<Block>(g, w_row_bytes, gr, r, i), x[i], r, r < gr, sums);
      }
      T::finish(sums, g + static_cast<size_t>(i) * sizeof(Block), offsets, x[i].d, acc, acc_m);
    }
    V::store_rows(s + r0, V::sub(acc, acc_m), gr);
  }
}

}  // namespace
}  // namespace ember::lanes

// The entry points of one type at one level, in that level's namespace
// (V: the level's lane traits): vec_dot is decode over one row.
#define EMBER_KQUANTS_LANES_ENTRIES(name, V, rows_traits, tile_traits)                                                 \
  void name##_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr) {                \
    lanes::rows<V, rows_traits>(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x),   \
                                nr);                                                                                   \
  }                                                                                                                    \
  void name##_dot(int64_t n, float* s, const void* w, const void* x) {                                                 \
    lanes::rows<V, rows_traits>(n, s, static_cast<const uint8_t*>(w),                                                  \
                                sizeof(rows_traits::Block) * static_cast<size_t>(n / kQK_K),                           \
                                static_cast<const BlockQ8_K*>(x), 1);                                                  \
  }                                                                                                                    \
  void name##_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,                 \
                   size_t x_row_bytes, int nr, int nc) {                                                               \
    lanes::tile<V, tile_traits>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes,                                \
                                static_cast<const uint8_t*>(x), x_row_bytes, nr, nc);                                  \
  }
// ... and the tile of its interleaved layout (Q4_K_R16, Q6_K_R16).
#define EMBER_KQUANTS_R16_TILE_ENTRY(name, V, tile_traits)                                                             \
  void name##_r16_tile(int64_t n, float* s, int64_t lds, const void* w, size_t, const void* x, size_t x_row_bytes,     \
                       int, int nc) {                                                                                  \
    lanes::tile_r16<V, tile_traits>(n, s, lds, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(x),         \
                                    x_row_bytes, nc);                                                                  \
  }
