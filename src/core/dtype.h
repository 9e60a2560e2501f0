// Tensor element types. Numeric ids equal GGML's type ids so GGUF files map
// directly. The traits table gives block geometry; kernels live elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  // OCP microscaling FP4 (gpt-oss experts): 32 E2M1 values sharing one E8M0
  // power-of-two scale (quant/blocks.h BlockMXFP4).
  kMXFP4 = 39,
  // ember's in-memory layouts, never in files (ids outside GGML's range):
  // the rows of a base type interleaved in groups of 16 for the CPU
  // kernels (kernels/interleave.h). Same bytes per row as the base type.
  kQ4_0_R16 = 0x100 | 2,
  kQ5_0_R16 = 0x100 | 6,
  kQ8_0_R16 = 0x100 | 8,
  kQ4_K_R16 = 0x100 | 12,
  kQ6_K_R16 = 0x100 | 14,
};

struct DTypeTraits {
  const char* name;   // GGML spelling: "f32", "q4_K", ...
  int64_t block_size; // elements per block (1 for plain types)
  size_t type_size;   // bytes per block
  bool quantized;
};

// Returns nullptr for ids ember does not support.
const DTypeTraits* dtype_traits(DType t);
// True if `id` (e.g. read from a file) names a supported file type (the
// in-memory layouts are not).
bool dtype_valid(uint32_t id);
// In-memory interleaved layouts: rows per interleave group (1: plain rows)
// and the type whose blocks they hold (t itself for plain types).
int dtype_row_group(DType t);
DType dtype_layout_base(DType t);
const char* dtype_name(DType t);
// Parses "q4_k", "Q4_K", "f16", ... (case-insensitive; file types only).
// Returns false if unknown.
bool dtype_from_name(std::string_view name, DType* out);

inline int64_t dtype_block_size(DType t) { return dtype_traits(t)->block_size; }
inline size_t dtype_type_size(DType t) { return dtype_traits(t)->type_size; }
// Bytes for a row of n elements (n must be a multiple of the block size).
inline size_t dtype_row_size(DType t, int64_t n) {
  const DTypeTraits* tr = dtype_traits(t);
  return static_cast<size_t>(n / tr->block_size) * tr->type_size;
}

}  // namespace ember
