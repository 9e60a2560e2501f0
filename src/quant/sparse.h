// Sparse weights (kSQ8 | C and kSQ4 | C, core/dtype_sparse.h): the kept
// values of a pruned matrix, their positions as bit masks, the scales of
// Q8_0 / Q4_0. Reference (de)quantizers, the lossless conversions from Q8_0
// and Q4_0 rows and the validation of rows read from files. Kernels:
// kernels/ref/sparse_dot.cpp (the scalar twins, which state the arithmetic)
// and the SIMD levels.
//
// Layout of one row of n inputs (n a multiple of 64, nb = n / 64 blocks,
// capacity C kept values per 64 inputs):
//   u64 mask[nb]       bit i of mask[b]: input 64b + i is kept
//   f16 d[nb][2]       the dense type's scales: d[b][h] for inputs
//                      64b + 32h .. + 31
//   values             the kept values, block after block, each block's in
//                      input order; the rest is padding (zero when written
//                      by ember)
// sq8 (dtype_row_size = nb * (12 + C)): int8 values q, weight d * q, in
//   [-127, 127] (Q8_0's range: the kernels negate them); sum(popcount(mask))
//   <= nb * C.
// sq4 (C even; dtype_row_size = nb * (12 + C / 2)): 4-bit values q, two a
//   byte (the low nibble first), weight d * (q - 8) as in Q4_0; each block's
//   values start on a byte (an odd count leaves its last high nibble as
//   padding), so a block of p kept values takes ceil(p / 2) bytes and
//   sum(ceil(popcount(mask) / 2)) <= nb * C / 2.
// Weight i of block b, half h: d[b][h] * value k, where k counts the kept
// inputs of the block before it; not kept: 0. The two scales per 64 are the
// dense type's own, so a Q8_0 / Q4_0 row converts without rounding again and
// decodes to the same floats (16 bits more per 64 inputs than one scale;
// see docs/pruning.md).
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
// sq4: bytes a block of `kept` values takes; value k (q - 8) of a block
// whose values start at v.
inline int sq4_block_bytes(int kept) { return (kept + 1) / 2; }
inline int8_t sq4_value(const uint8_t* v, int k) {
  return static_cast<int8_t>(((v[k / 2] >> (4 * (k % 2))) & 0xF) - 8);
}

// Kept values of the densest row of a Q8_0 matrix, as a capacity per 64
// inputs: ceil(max over rows of nonzeros / nb) (at least 1).
int sparse_capacity_q8_0(const void* rows, int64_t nrows, int64_t n);
// The same for sq4 from a Q4_0 matrix (zero: the level 8): the densest
// row's value bytes sum(ceil(nonzeros of a block / 2)) per 64 inputs,
// times 2, rounded up to even (at least 2).
int sparse_capacity_q4_0(const void* rows, int64_t nrows, int64_t n);
// One Q8_0 row of n inputs -> one row of kSQ8 | capacity (values equal to
// 0 are not kept). Error if the row has more nonzeros than nb * capacity.
Status sparse_from_q8_0_row(const void* q8_0, void* dst, int64_t n, int capacity);
// One Q4_0 row -> one row of kSQ4 | capacity (levels equal to 8, weight 0,
// are not kept). Error if the row's values do not fit.
Status sparse_from_q4_0_row(const void* q4_0, void* dst, int64_t n, int capacity);
// The sparse form of a dense matrix: Q8_0 -> kSQ8 | C, Q4_0 -> kSQ4 | C, the
// capacity from its densest row (rows contiguous, n inputs each). Error:
// another type, or n not a multiple of 64.
Result<DType> sparse_type_for(DType dense, const void* rows, int64_t nrows, int64_t n);
// One Q8_0 (st sq8) or Q4_0 (st sq4) row -> one row of sparse type st.
Status sparse_from_dense_row(DType st, const void* src, void* dst, int64_t n);
// Floats -> Q8_0 / Q4_0 (the reference quantizers) -> sparse: the same
// weights as the dense export of the same floats.
Status quantize_row_sq8_ref(const float* src, void* dst, int64_t n, int capacity);
Status quantize_row_sq4_ref(const float* src, void* dst, int64_t n, int capacity);
// Any kSQ8 | C / kSQ4 | C row (the layout does not depend on C) -> floats.
void dequantize_row_sq8_ref(const void* src, float* dst, int64_t n);
void dequantize_row_sq4_ref(const void* src, float* dst, int64_t n);
// Inputs [c0, c0 + m) of sparse rows of type t (c0 and m multiples of 64):
// the capacity of t's family the slice needs, from its densest row (kept
// value bytes of the slice's blocks per 64 inputs; at least 1, sq4 even, at
// least 2). A row can keep more values in one part of its inputs than its
// capacity allows on average, so a slice may need more than t's capacity.
int sparse_slice_capacity(DType t, const void* rows, int64_t nrows, int64_t n, int64_t c0, int64_t m);
// One row of n inputs of type t -> its inputs [c0, c0 + m) as one row of
// type dst (t's family): the slice's masks, scales and kept values, the
// rest padding (zero). The same weights as the source's columns. Error: a
// type of another family, a range off the 64-input blocks or past n, or
// values that do not fit dst's capacity.
Status sparse_slice_row(DType t, const void* src, int64_t n, int64_t c0, int64_t m, DType dst, void* out);
// Checks `nrows` rows of a sparse tensor read from a file: each row's masks
// keep no more values than the capacity allows, sq8 values lie in
// [-127, 127], scales are finite. The error names the row and the block.
Status validate_sparse_rows(DType t, const void* data, int64_t nrows, int64_t n);

}  // namespace ember
