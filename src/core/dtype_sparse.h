// The sparse weight types (ember's own GGUF type ids), two families of
// blocks of 64 inputs with a bit mask, Q8_0 / Q4_0's two f16 scales and the
// kept values packed (layouts: quant/sparse.h):
//   kSQ8 | C  (C = 1..64)        int8 values, 12 + C bytes a block;
//   kSQ4 | C  (C even, 2..64)    4-bit values, 12 + C / 2 bytes a block;
// C is the row capacity in kept values per 64 inputs. GGML's ids end below
// 64, so 0x401..0x440 and 0x482..0x4C0 never collide with a llama.cpp type
// (nor with the interleaved layouts' bit 0x100). The traits (dtype_traits,
// dtype_name "sq8_c<C>" / "sq4_c<C>", dtype_valid) come from core/dtype.cpp
// like every type's; kSQ8 and kSQ4 themselves are the families' names in the
// kernel registry.
#pragma once

#include "core/dtype.h"

namespace ember {

inline constexpr DType kSQ8 = static_cast<DType>(0x400);
inline constexpr DType kSQ4 = static_cast<DType>(0x480);

// kSQ8 | C, C = 1..64.
bool dtype_is_sq8(DType t);
// kSQ4 | C, C even, 2..64.
bool dtype_is_sq4(DType t);
// Either family.
bool dtype_is_sparse(DType t);
// Kept values per 64 inputs a row has room for (0 for other types).
int dtype_sparse_capacity(DType t);
// Bits per kept value: 8 (sq8), 4 (sq4), 0 (not sparse).
int dtype_sparse_bits(DType t);
// kSQ8 | capacity (1 <= capacity <= 64).
DType dtype_sq8(int capacity);
// kSQ4 | capacity (capacity even, 2 <= capacity <= 64).
DType dtype_sq4(int capacity);
// The dense type a sparse type re-encodes, its export type: Q8_0 for sq8,
// Q4_0 for sq4; any other type itself.
DType dtype_sparse_dense(DType t);

}  // namespace ember
