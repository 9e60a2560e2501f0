// Kernel registry: (op x dtype x ISA) -> function pointer. Every op has a
// scalar reference (kernels/ref/), always built; SIMD variants (kernels/cpu/)
// register for the ISA levels they need. Lookups fall back to the best
// available level <= the requested one, so dispatch never picks an
// instruction the CPU lacks.
//
// Kernels do not allocate, log or throw.
#pragma once

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

struct KernelSet {
  DequantizeRowFn dequantize_row = nullptr;
  QuantizeRowFn quantize_row = nullptr;  // fast activation quantizer (may differ from the
                                         // reference RTN quantizer only where allowed)
  VecDotFn vec_dot = nullptr;            // weight row of this type x row of vec_dot_type
};

// The activation type a weight type is multiplied with.
DType vec_dot_type(DType weight_type);

// Kernels for dtype t at the given ISA level (default: active level). Fields
// may be null where an op does not exist for t.
const KernelSet& kernels(DType t, Isa isa);
inline const KernelSet& kernels(DType t) { return kernels(t, active_isa()); }

}  // namespace ember
