// Scalar reference quantizers and dequantizers for every block type.
// Dequantization matches gguf-py's gguf.quants.dequantize exactly; the
// round-to-nearest quantizers are bit-compatible with llama.cpp's
// quantize_row_*_ref (no importance matrix).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ember {

// Row converters for one type; n is a multiple of the type's block size.
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);
void quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

// True if quantize_row_ref / dequantize_row_ref support t.
bool can_quantize(DType t);
bool can_dequantize(DType t);

// Quantizes `nrows` rows of `n_per_row` floats into t (n_per_row must be a
// multiple of the block size: error otherwise).
Status quantize_rows(DType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row);

// Per-type functions (scalar reference).
void dequantize_row_q4_0_ref(const void* src, float* dst, int64_t n);
void quantize_row_q4_0_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q4_1_ref(const void* src, float* dst, int64_t n);
void quantize_row_q4_1_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q5_0_ref(const void* src, float* dst, int64_t n);
void quantize_row_q5_0_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q5_1_ref(const void* src, float* dst, int64_t n);
void quantize_row_q5_1_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q8_0_ref(const void* src, float* dst, int64_t n);
void quantize_row_q8_0_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q8_1_ref(const void* src, float* dst, int64_t n);
void quantize_row_q8_1_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q2_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q2_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q3_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q3_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q4_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q4_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q5_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q5_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q6_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q6_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_q8_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q8_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_f16_ref(const void* src, float* dst, int64_t n);
void quantize_row_f16_ref(const float* src, void* dst, int64_t n);
void dequantize_row_bf16_ref(const void* src, float* dst, int64_t n);
void quantize_row_bf16_ref(const float* src, void* dst, int64_t n);

}  // namespace ember
