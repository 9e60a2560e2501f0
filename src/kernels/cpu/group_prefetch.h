// Software prefetch of the next group of contiguous weight rows while the
// current group is computed (the decode kernels' memory stream).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ember::lanes {
// Internal linkage: compiled into the avx2/, avx512/ and amx/ TUs with their
// own ISA flags; the linker must not merge their copies into one.
namespace {

// Prefetches the cache line at p into L1 (L1 = true: prefetcht0) or L2
// (prefetcht1). Inline asm, not _mm_prefetch: GCC 12 deletes a loop whose
// only statements are __builtin_prefetch calls (a loop over a run of lines
// compiled to nothing).
template <bool L1>
inline void prefetch_line(const void* p) {
  if constexpr (L1)
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
  else
    asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

// Decode prefetch. A group's kR rows are contiguous, and so is the next
// group: while this group's super-blocks are computed, the next group's
// bytes are prefetched line by line, spread evenly over this group's
// super-blocks (or block pairs: the caller's steps). Used by the Q4_0 /
// Q8_0 / Q4_1 / Q5_1 group decode (avx512/legacy_rows.cpp) and the Q4_K /
// Q6_K row-lane decode (avx2/ and avx512/kquants_lanes.cpp).
// One sequential prefetch stream replaces kR per-row streams, which the
// hardware prefetchers could not follow: with one stream per row the Q4_K /
// Q6_K decode kernels drew ~5.6 GB/s from DRAM on one thread against ~10.5
// for Q4_0 (docs/performance.md, "Q4_K / Q6_K decode"). The lines go to L2
// (_MM_HINT_T1), not L1: a group of 16 rows is 36 KB (Q4_K, 4096 wide) to
// 129 KB (14336 wide), so the next group prefetched into L1 evicted the
// current one; one thread out of DRAM, 2026-12-04: Q4_K 4096-wide 11-15 GB/s
// against 9-12, Q6_K 14336-wide 14-16 against 5-7.
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
    for (; done_ < end; ++done_) _mm_prefetch(p_ + done_ * 64, _MM_HINT_T1);
  }
  // After the last step: whatever is left (fewer steps than planned).
  void finish() {
    for (; done_ < lines_; ++done_) _mm_prefetch(p_ + done_ * 64, _MM_HINT_T1);
  }

 private:
  const char* p_;
  int64_t lines_, per_step_, done_ = 0;
};

// The prefetch for the group at rows [r0, r0 + kR) of nr rows at w,
// spread over `steps` steps.
template <int kR>
inline GroupPrefetch next_group_prefetch(const uint8_t* w, size_t w_row_bytes, int64_t r0, int64_t nr, int64_t steps) {
  const int64_t next_rows = std::min<int64_t>(kR, nr - r0 - kR);
  if (next_rows <= 0) return GroupPrefetch(nullptr, 0, steps);
  return GroupPrefetch(w + static_cast<size_t>(r0 + kR) * w_row_bytes, static_cast<size_t>(next_rows) * w_row_bytes,
                       steps);
}

}  // namespace
}  // namespace ember::lanes
