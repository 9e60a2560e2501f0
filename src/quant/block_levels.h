// The integer levels of a quantized block and their affine meaning: element
// e of a block decodes to a[e] * L[e] + b[e] with L[e] in [lo, hi], where a
// and b come from the block's scales (and mins) and L is the stored level
// (as the unpack_* helpers of block_utils.h return it). Methods that choose
// the levels themselves (GPTQ's error feedback) fix a block's scales, round
// each element with a and b, and write the levels back with pack_levels;
// the block's scales stay as they were, so the format is unchanged.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ember {

// True for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool has_block_levels(DType t);

// The level range of t: Q4_0/Q4_1/Q4_K [0, 15], Q5_0/Q5_1/Q5_K [0, 31],
// Q8_0 [-127, 127], Q2_K [0, 3], Q3_K [-4, 3], Q6_K [-32, 31].
void block_level_range(DType t, int* lo, int* hi);

// a, b: [block size of t] for the block at `block`.
void block_affine(DType t, const void* block, float* a, float* b);

// The stored levels of the block (L: [block size]).
void unpack_levels(DType t, const void* block, int* L);

// Writes levels L (each within the range) into the block, keeping its
// scales and mins.
void pack_levels(DType t, const int* L, void* block);

}  // namespace ember
