// Importance-weighted quantizers: rows of f32 into a block type with the
// scales (and mins) of every block chosen to minimise the weighted squared
// error sum_i w_i (x_i - q(x_i))^2, where w_i comes from an importance
// vector over the row's elements (an "imatrix": the mean of the squared
// activations that multiply column i, from calibration). The stored block
// format is unchanged, so any GGUF reader runs the result.
//
// For Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0 and Q5_1 the result is
// byte-identical to llama.cpp's ggml_quantize_chunk with the same importance
// vector (quantize_row_*_impl in ggml-quants.c: the same searches, the same
// float evaluation order, the same rounding); checked against a fixture made
// with llama.cpp's own library (tools/gen_imatrix_quant_fixture.sh).
// llama.cpp ignores the importance for Q8_0; here Q8_0 gets a weighted scale
// search (19 candidate scales amax / (127 + 0.1 k), k in [-9, 9], the
// round-to-nearest scale among them, keeping the lowest weighted error).
// MXFP4 (llama.cpp has no weighted MXFP4): each block's E8M0 exponent is
// round-to-nearest's e (quantize_row_mxfp4_ref) or e - 1 or e + 1 (within
// 0 .. 254), each value at its nearest code under the scale, whichever has
// the lowest weighted error (e on ties: never worse than round-to-nearest
// under the weights).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ember {

// True for the types quantize_row_imatrix supports.
bool can_quantize_imatrix(DType t);

// Quantizes one row x[0:n] (n a multiple of t's block size) into dst with
// importance qw[0:n] (qw >= 0; all-equal weights are a valid input). For a
// type without support it writes nothing.
void quantize_row_imatrix(DType t, const float* x, void* dst, int64_t n, const float* qw);

// MXFP4's (quant/quantize_mxfp4.cpp), called by quantize_row_imatrix.
void quantize_row_mxfp4_imatrix(const float* x, void* dst, int64_t n, const float* qw);

// n_rows rows of n_per_row values, one importance vector for all rows.
// Errors: unsupported type, row length not a multiple of the block size.
Status quantize_rows_imatrix(DType t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row,
                             const float* qw);

}  // namespace ember
