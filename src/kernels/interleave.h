// Interleaved weight layouts: a Q4_0 / Q5_0 / Q8_0 / Q4_K / Q6_K matrix whose rows
// are stored in groups of 16 with each block's fields transposed across the
// group (DType::kQ4_0_R16 .. kQ6_K_R16, in memory only, never in files).
// The decode and prefill kernels then read each group as one sequential
// stream with no per-call transposes or scale shuffles: one 64-byte load
// gives the same dword of all 16 rows, the lane order of the row-lane
// kernels (kernels/cpu/avx512/kquants_lanes.cpp), whose arithmetic contract
// they keep bit for bit (matmul over an interleaved matrix == matmul over
// its base-type rows, at every ISA level and token count).
//
// Layout (rows a multiple of 16; row_bytes as the base type, so group g
// starts at 16 * g * row_bytes). Block i of group g, 16 x the base
// block's bytes at group + i * 16 * sizeof(block), is the base blocks'
// fields one after another, each cut into units of u bytes (1, 2 or 4) and
// stored as 16-row vectors of 16 u bytes: unit r of vector c = bytes
// u c .. u c + u - 1 of row r's field.
//   Q4_0_R16 (288 bytes): d (u = 2: one vector), qs (4: 4 vectors).
//   Q5_0_R16 (352 bytes): d (u = 2: one vector), qh as 8 bit masks (64
//   bytes: bit 4 r + b % 4 of little-endian uint64 b / 4 = bit b of row r's
//   qh; mask k / 4 + k: the bytes of qs vector k whose low / high nibble
//   has the high bit), qs (4: 4 vectors).
//   Q8_0_R16 (544 bytes): d (2: one), qs (4: 8 vectors).
//   Q4_K_R16 (2304 bytes): d (u = 2: one vector), dmin (2: one), scales (4:
//   3 vectors), qs (4: 32 vectors).
//   Q6_K_R16 (3360 bytes): d (2: one), scales (1: 16 vectors of 16 bytes,
//   vector g = group g's scale of the 16 rows), ql (4: 32), qh (4: 16).
//
// Threading: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ember {

// The interleaved layout of `base` (kQ4_0 -> kQ4_0_R16, ..., kQ6_K ->
// kQ6_K_R16), or base itself when it has none.
DType interleaved_type(DType base);
// True when a [rows, n] matrix of `base` can be interleaved (a layout
// exists, rows % 16 == 0) and the active ISA level has native kernels for
// it (elsewhere the interleaved kernels only de-interleave and call the
// base type's: correct, not faster).
bool interleave_pays(DType base, int64_t rows);

// src: rows x n of base type (rows % 16 == 0), rows row_bytes apart;
// dst: the same byte count in the interleaved layout.
void interleave_rows(DType base, const void* src, int64_t rows, int64_t n, void* dst);
// Row q (0..15) of the 16-row group at `group` of interleaved type t
// (n elements) back in its base type's bytes.
void deinterleave_row(DType t, const void* group, int q, int64_t n, void* dst);
// The 16 rows of the group at `group` as base-type rows, row_bytes apart.
void deinterleave_group(DType t, const void* group, int64_t n, void* dst);

// Base-type bytes of row r of w (any type: plain rows are copied).
void copy_row_bytes(const TensorView& w, int64_t r, void* dst);

}  // namespace ember
