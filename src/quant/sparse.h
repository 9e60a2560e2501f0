// Sparse int8 weights (kSQ8 | C, core/dtype_sparse.h): the kept values of a
// pruned matrix, their positions as bit masks, the scales of Q8_0. Reference
// (de)quantizer, the lossless conversion from Q8_0 rows and the validation
// of rows read from files. Kernels: kernels/ref/sq8_dot.cpp (the scalar
// twin, which states the arithmetic) and the SIMD levels.
//
// Layout of one row of n inputs (n a multiple of 64, nb = n / 64 blocks,
// capacity C kept values per 64 inputs, dtype_row_size = nb * (12 + C)):
//   u64 mask[nb]       bit i of mask[b]: input 64b + i is kept
//   f16 d[nb][2]       Q8_0's scales: d[b][h] for inputs 64b + 32h .. + 31
//   int8 q[nb * C]     the kept values, block after block, each block's in
//                      input order; sum(popcount(mask)) <= nb * C, the rest
//                      of q is padding (zero when written by ember)
// Weight i of block b, half h: d[b][h] * q[k] where k counts the kept inputs
// before it in the row; not kept: 0. Values lie in [-127, 127] (Q8_0's
// range: the kernels negate them). The two scales per 64 are Q8_0's own, so
// a Q8_0 row converts without rounding again and decodes to the same
// floats (16 bits more per 64 inputs than one scale; see docs/pruning.md).
//
// Thread-safe (no state); no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype_sparse.h"
#include "core/status.h"

namespace ember {

constexpr int kSparseBlock = 64;

// Views into one row (n inputs).
struct SparseRow {
  const uint8_t* masks;   // nb u64, unaligned
  const uint8_t* scales;  // nb * 2 f16
  const int8_t* values;
};
inline SparseRow sparse_row(const void* row, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  const int64_t nb = n / kSparseBlock;
  return {p, p + nb * 8, reinterpret_cast<const int8_t*>(p + nb * 12)};
}
inline uint64_t sparse_mask(const SparseRow& r, int64_t b) {
  uint64_t m;
  std::memcpy(&m, r.masks + b * 8, 8);
  return m;
}

// Kept values of the densest row of a Q8_0 / float matrix, as a capacity
// per 64 inputs: ceil(max over rows of nonzeros / nb) (at least 1).
int sparse_capacity_q8_0(const void* rows, int64_t nrows, int64_t n);
// One Q8_0 row of n inputs -> one row of kSQ8 | capacity (values equal to
// 0 are not kept). Error if the row has more nonzeros than nb * capacity.
Status sparse_from_q8_0_row(const void* q8_0, void* dst, int64_t n, int capacity);
// Floats -> Q8_0 (quantize_row_q8_0_ref) -> sparse: the same weights as the
// dense Q8_0 export of the same floats.
Status quantize_row_sq8_ref(const float* src, void* dst, int64_t n, int capacity);
// Any kSQ8 | C row (the layout does not depend on C) -> floats.
void dequantize_row_sq8_ref(const void* src, float* dst, int64_t n);
// Checks `nrows` rows of a kSQ8 | C tensor read from a file: each row's
// masks keep at most nb * C values, every kept value lies in [-127, 127],
// scales are finite. The error names the row and the block.
Status validate_sparse_rows(DType t, const void* data, int64_t nrows, int64_t n);

}  // namespace ember
