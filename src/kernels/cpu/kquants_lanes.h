// ISA-independent pieces of the row-lane Q4_K / Q6_K kernels
// (kernels/cpu/avx2/kquants_lanes.cpp: 8-row groups, avx512/kquants_lanes.cpp:
// 16-row groups): row addressing, the decode kernels' group prefetch, and
// the three entry points (vec_dot, vec_dot_rows, vec_dot_tile) each level
// defines from its templates rows<RowsTraits> and tile<TileTraits>.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/group_prefetch.h"

namespace ember::lanes {
// Internal linkage: compiled into the avx2/, avx512/ and amx/ TUs with their
// own ISA flags; the linker must not merge their copies into one.
namespace {

// Block i of row r (< nr: rows past nr repeat the last) of the rows at w.
template <class Block>
inline const Block* block_at(const uint8_t* w, size_t w_row_bytes, int nr, int r, int64_t i) {
  return reinterpret_cast<const Block*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes) + i;
}

}  // namespace
}  // namespace ember::lanes

// The entry points of one type at one level, in that level's namespace:
// vec_dot is decode over one row.
#define EMBER_LANES_K_ENTRIES(name, rows_traits, tile_traits)                                                      \
  void name##_rows(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x,    \
                                        int64_t nr) {                                                              \
    rows<rows_traits>(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x), nr);    \
  }                                                                                                                \
  void name##_dot(int64_t n, float* s, const void* w, const void* x) {                           \
    rows<rows_traits>(n, s, static_cast<const uint8_t*>(w),                                                        \
                      sizeof(rows_traits::Block) * static_cast<size_t>(n / kQK_K), static_cast<const BlockQ8_K*>(x), \
                      1);                                                                                          \
  }                                                                                                                \
  void name##_tile(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,      \
                                        const void* x, size_t x_row_bytes, int nr, int nc) {                       \
    tile<tile_traits>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),      \
                      x_row_bytes, nr, nc);                                                                        \
  }
