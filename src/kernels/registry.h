// Kernel registry: (op x dtype x ISA) -> function pointer, the per-dtype
// table of the CPU backend (kernels/cpu/registry.cpp; the dtype-independent
// ops are in kernels/cpu/op_table.h). Every op has a scalar reference
// (kernels/ref/, quant/), always built; SIMD variants (kernels/cpu/avx2/,
// kernels/cpu/avx512/) register for the ISA levels they need. Lookups fall back to the best
// available level <= the requested one, so dispatch never picks an
// instruction the CPU lacks.
//
// Kernels do not allocate, log or throw.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace ember {

// Converts n floats (n a multiple of the block size) into type-t blocks.
using QuantizeRowFn = void (*)(const float* x, void* y, int64_t n);
// Converts n elements of type t into floats.
using DequantizeRowFn = void (*)(const void* x, float* y, int64_t n);
// s = dot(w[0:n], x[0:n]) where w is a row of the weight type and x a row of
// that type's vec_dot_type (activations converted by its QuantizeRowFn).
using VecDotFn = void (*)(int64_t n, float* s, const void* w, const void* x);
// Register-blocked vec_dot over a tile of nr weight rows x nc activation rows:
//   s[c * lds + r] = dot(w row r, x row c)   for r < nr, c < nc,
// rows `w_row_bytes` / `x_row_bytes` apart. 1 <= nr <= KernelSet::tile_rows,
// 1 <= nc <= KernelSet::tile_cols (the matmul driver sends single tokens to
// vec_dot_rows / vec_dot instead, but nc == 1 must still be correct).
// Every output is bit-identical to what vec_dot of the same KernelSet returns
// for that (row, token) pair, whatever the tile shape (batch invariance).
using VecDotTileFn = void (*)(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                              size_t x_row_bytes, int nr, int nc);

// Decode over many rows: s[r] = dot(w row r, x) for 0 <= r < nr (any nr >= 1),
// rows `w_row_bytes` apart, x one row of vec_dot_type. Bit-identical to
// vec_dot of the same KernelSet for every row (batch invariance).
using VecDotRowsFn = void (*)(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr);

// A few tokens over many rows (optional): s[c * lds + r] = dot(w row r, x
// row c) for r < nr (any nr >= 1), c < nc (1 <= nc <= KernelSet::few_max),
// activation rows of vec_dot_type `x_row_bytes` apart. Bit-identical to
// vec_dot.
using VecDotFewFn = void (*)(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes, const void* x,
                             size_t x_row_bytes, int64_t nr, int nc);
// Token lanes (optional, for a few tokens against many rows): pack_tokens
// rearranges nc (1 <= nc <= KernelSet::tokens_max) activation rows of
// vec_dot_type, `x_row_bytes` apart, into `packed` (tokens_pack_bytes(n, nc)
// bytes, 64-byte aligned), writing the part of activation blocks [b, e)
// (blocks of the vec_dot_type; disjoint ranges may be packed concurrently).
// vec_dot_tokens then computes s[c * lds + r] = dot(w row r, x row c) for
// r < nr (any nr >= 1), c < nc, bit-identical to vec_dot.
using TokensPackBytesFn = size_t (*)(int64_t n, int nc);
using PackTokensFn = void (*)(int64_t n, const void* x, size_t x_row_bytes, int nc, void* packed, int64_t b,
                              int64_t e);
using VecDotTokensFn = void (*)(int64_t n, float* s, int64_t lds, const void* w, size_t w_row_bytes,
                                const void* packed, int64_t nr, int nc);

struct KernelSet {
  // Row conversions.
  DequantizeRowFn dequantize_row = nullptr;
  QuantizeRowFn quantize_row = nullptr;  // fast activation quantizer (may differ from the
                                         // reference RTN quantizer only where allowed)
  // Activation quantizer of an activation type (Q8_0) with 4-bit levels in
  // the same blocks (values in [-7, 7], scale amax / 7): W4A4 / W8A4 through
  // the int8 kernels (MatmulTarget::act_bits). Null: no 4-bit form.
  QuantizeRowFn quantize_row_int4 = nullptr;
  // The forms of the dot, each bit-identical to vec_dot (the matmul driver
  // picks one per weight by token count: kernels/cpu/matmul.cpp).
  VecDotFn vec_dot = nullptr;           // weight row of this type x row of vec_dot_type
  VecDotRowsFn vec_dot_rows = nullptr;  // one-token multi-row kernel (null: use the tile / vec_dot)
  // Few-token form (null: none): the driver uses it for 2 <= nc <= few_max.
  VecDotFewFn vec_dot_few = nullptr;
  int few_max = 0;
  // Token-lane form (null: none; the matmul driver then uses the tile).
  VecDotTokensFn vec_dot_tokens = nullptr;
  PackTokensFn pack_tokens = nullptr;
  TokensPackBytesFn tokens_pack_bytes = nullptr;
  int tokens_min = 0;  // the driver uses it for tokens_min <= nc <= tokens_max (where it beats the tile)
  int tokens_max = 0;  // largest nc vec_dot_tokens accepts
  VecDotTileFn vec_dot_tile = nullptr;  // tiled vec_dot (null: loop over vec_dot)
  int tile_rows = 0;                    // largest nr vec_dot_tile accepts
  int tile_cols = 0;                    // largest nc vec_dot_tile accepts
  // Interleaved layouts (kernels/interleave.h; dtype_row_group(t) > 1) have
  // no vec_dot; their forms run over whole 16-row groups (nr a multiple of
  // 16; the tile: tile_rows a multiple of 16, the w pointer at a group's
  // start). True where this level's kernels are native rather than
  // de-interleaving into the base type's.
  bool interleaved_native = false;
};

// The activation type a weight type is multiplied with.
DType vec_dot_type(DType weight_type);

// Kernels for dtype t at the given ISA level (default: active level). Fields
// may be null where an op does not exist for t.
const KernelSet& kernels(DType t, Isa isa);
inline const KernelSet& kernels(DType t) { return kernels(t, active_isa()); }

}  // namespace ember
