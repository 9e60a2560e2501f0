// Scalar reference twins of the row ops (kernels/ops.h) and of the Backend's
// element-wise ops (kernels/backend.h): norm, RoPE, gated activations,
// softcap, add / scale, embedding, and the sampler's softmax / max /
// log-sum-exp / exp. They are the EMBER_ISA=scalar level of the CPU backend
// and the oracle every other level (and every other backend) is tested
// against (tests/kernels/backend_ops_test.cpp).
//
// Arithmetic contract: plain loops in index order; each output is the float
// rounding of the op evaluated in double on the float inputs (row
// reductions accumulate in double, in index order), so every result is a
// function of its own row only (batch-invariant) and within about one
// rounding of the exact value. Inputs the ops define in float stay float:
// a RoPE angle is the float product pos * inv_freq (as in the models'
// reference implementations), rotated in double.
//
// The signatures (declared from EMBER_ROW_OPS) and in-place rules of kernels/ops.h. No allocation, no
// threads.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace ember::ref {

EMBER_ROW_OPS(EMBER_DECLARE_LIKE)

// out[t, :] = dequantize(table row ids[t]) * scale with the scalar
// dequantizers of quant/ (bit-exact with gguf-py); out: [n, table.ne[0]].
void embed_rows(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out);

}  // namespace ember::ref
