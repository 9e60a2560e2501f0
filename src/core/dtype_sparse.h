// The sparse int8 weight types (ember's own GGUF type ids): kSQ8 | C for
// C = 1..64, the row capacity in kept values per 64 inputs; blocks of 64
// inputs of 12 + C bytes (layout: quant/sparse.h). GGML's ids end below 64,
// so 0x401..0x440 never collide with a llama.cpp type. The traits
// (dtype_traits, dtype_name "sq8_c<C>", dtype_valid) come from core/dtype.cpp
// like every type's; kSQ8 itself is the family's name in the kernel registry.
#pragma once

#include "core/dtype.h"

namespace ember {

inline constexpr DType kSQ8 = static_cast<DType>(0x400);

// True for kSQ8 | C, C = 1..64.
bool dtype_is_sparse(DType t);
// Kept values per 64 inputs a row has room for (0 for other types).
int dtype_sparse_capacity(DType t);
// kSQ8 | capacity (1 <= capacity <= 64).
DType dtype_sq8(int capacity);

}  // namespace ember
