// ISA-independent pieces of the row-lane Q4_K / Q6_K kernels
// (kernels/cpu/avx2/lanes_kquants.cpp: 8-row groups, avx512/lanes_kquants.cpp:
// 16-row groups): row addressing, the decode kernels' group prefetch, and
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

// Decode prefetch. A group's kR rows are contiguous, and so is the next
// group: while this group's super-blocks are computed, the next group's
// bytes are prefetched line by line, spread evenly over this group's
// super-blocks (the Q4_0 decode kernels' scheme, avx512/lanes_rows.cpp).
// One sequential prefetch stream replaces kR per-row streams, which the
// hardware prefetchers could not follow: with one stream per row the Q4_K /
// Q6_K decode kernels drew ~5.6 GB/s from DRAM on one thread against ~10.5
// for Q4_0 (docs/performance.md, "Q4_K / Q6_K decode").
class GroupPrefetch {
 public:
  // next: the first byte of the next group (null: none), bytes long;
  // steps: the super-blocks of this group over which to spread it.
  GroupPrefetch(const uint8_t* next, size_t bytes, int64_t steps)
      : p_(reinterpret_cast<const char*>(next)),
        lines_(next ? static_cast<int64_t>((bytes + 63) / 64) : 0),
        per_step_(steps > 0 ? (lines_ + steps - 1) / steps : lines_) {}
  // Before super-block i's work: the next per_step lines.
  void step() {
    const int64_t end = std::min(lines_, done_ + per_step_);
    for (; done_ < end; ++done_) _mm_prefetch(p_ + done_ * 64, _MM_HINT_T0);
  }

 private:
  const char* p_;
  int64_t lines_, per_step_, done_ = 0;
};

// The prefetch for the group at rows [r0, r0 + kR) of nr rows at w.
template <int kR>
inline GroupPrefetch next_group_prefetch(const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t nr, int64_t nb) {
  const int64_t next_rows = std::min<int64_t>(kR, nr - r0 - kR);
  if (next_rows <= 0) return GroupPrefetch(nullptr, 0, nb);
  return GroupPrefetch(w + static_cast<size_t>(r0 + kR) * w_row_bytes, static_cast<size_t>(next_rows) * w_row_bytes,
                       nb);
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
