// ISA-independent pieces of the row-lane Q4_K / Q6_K kernels
// (kernels/cpu/avx2/lanes_kquants.cpp: 8-row groups, avx512/lanes_kquants.cpp:
// 16-row groups): row addressing, the decode kernels' prefetch stream, and
// the three entry points (vec_dot, vec_dot_rows, vec_dot_tile) each level
// defines from its templates rows<RowsTraits> and tile<TileTraits>.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ember::lanes {

// Block i of row r (< nr: rows past nr repeat the last) of the rows at w.
template <class Block>
inline const Block* block_at(const uint8_t* w, size_t w_row_bytes, int nr, int r, int64_t i) {
  return reinterpret_cast<const Block*>(w + static_cast<size_t>(std::min(r, nr - 1)) * w_row_bytes) + i;
}

// How far ahead of block i each row of a decode group is prefetched.
constexpr size_t kPrefetchBytes = 512;

// Decode groups of kR rows walk super-block i of all their rows, then i + 1.
// Row r's stream (the group starting at row r0 of the call's nr rows at g)
// is prefetched kPrefetchBytes ahead of block i; past the row's end it goes
// on in the same row of the next group, so a group's first blocks are not
// fetched cold (with short rows, 1024 elements, that stall was paid on every
// group).
template <int kR, class Block>
inline void prefetch_row_stream(const uint8_t* g, size_t w_row_bytes, int64_t r0, int r, int64_t nr, int64_t i) {
  const size_t ahead = static_cast<size_t>(i) * sizeof(Block) + kPrefetchBytes;
  const bool in_row = ahead < w_row_bytes;
  const int64_t pr = in_row ? r : kR + r;  // the row (from g) whose bytes are prefetched
  if (r0 + pr >= nr || ahead >= 2 * w_row_bytes) return;
  const char* p = reinterpret_cast<const char*>(g) + static_cast<size_t>(pr) * w_row_bytes +
                  (in_row ? ahead : ahead - w_row_bytes);
#pragma GCC unroll 4
  for (size_t l = 0; l < sizeof(Block); l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
}

}  // namespace ember::lanes

// The entry points of one type at one level, in that level's namespace:
// vec_dot is decode over one row.
#define EMBER_LANES_K_ENTRIES(name, rows_traits, tile_traits)                                                      \
  void vec_dot_rows_lanes_##name##_q8_K(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x,    \
                                        int64_t nr) {                                                              \
    rows<rows_traits>(n, s, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const BlockQ8_K*>(x), nr);    \
  }                                                                                                                \
  void vec_dot_lanes_##name##_q8_K(int64_t n, float* s, const void* w, const void* x) {                           \
    rows<rows_traits>(n, s, static_cast<const uint8_t*>(w),                                                        \
                      sizeof(rows_traits::Block) * static_cast<size_t>(n / kQK_K), static_cast<const BlockQ8_K*>(x), \
                      1);                                                                                          \
  }                                                                                                                \
  void vec_dot_tile_lanes_##name##_q8_K(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,      \
                                        const void* x, size_t x_row_bytes, int nr, int nc) {                       \
    tile<tile_traits>(n, s, lds, static_cast<const uint8_t*>(w), w_row_bytes, static_cast<const uint8_t*>(x),      \
                      x_row_bytes, nr, nc);                                                                        \
  }
