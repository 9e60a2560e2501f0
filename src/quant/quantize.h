// Scalar reference quantizers and dequantizers for every block type.
// Dequantization matches gguf-py's gguf.quants.dequantize exactly (gguf-py
// has no Q8_1/Q8_K: those match llama.cpp, y = d * q); the round-to-nearest
// quantizers are bit-compatible with llama.cpp's quantize_row_*_ref, which is
// what llama.cpp's ggml_quantize_chunk uses without an importance matrix.
// F16/BF16 round to nearest even. Q8_K blocks of all zeros get d = 0, qs = 0
// and bsums = 0 (llama.cpp leaves their bsums unwritten).
//
// Implementation: quantize_legacy.cpp (F16, BF16, Q4_0..Q8_1),
// quantize_k.cpp (k-quants), quantize_mxfp4.cpp, quantize.cpp (dispatch). Tests and fixtures:
// tests/quant/, tests/data/quant/ (tools/gen_quant_fixtures.py).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ember {

// Row converters for one type; n is a multiple of the type's block size.
// F32 is a copy. For a type without support (see can_*), dequantize_row_ref
// fills dst with NaN and quantize_row_ref writes nothing.
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);
void quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

// True if quantize_row_ref / dequantize_row_ref support t (F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, Q8_K, MXFP4).
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
// 4-bit activations in Q8_0 blocks (W4A4 through the int8 kernels): per
// 32 values d = amax / 7 (stored f16), q = round-half-away(x / d) clamped
// to [-7, 7], so every Q8_0 vec_dot takes them unchanged.
void quantize_row_q8_0_int4_ref(const float* src, void* dst, int64_t n);
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
// MXFP4 (quant/quantize_mxfp4.cpp; llama.cpp's quantize_row_mxfp4_ref /
// dequantize_row_mxfp4 bit for bit).
void dequantize_row_mxfp4_ref(const void* src, float* dst, int64_t n);
void quantize_row_mxfp4_ref(const float* src, void* dst, int64_t n);
// The index of the first of n_blocks MXFP4 blocks whose E8M0 scale byte is
// 0xff (NaN in E8M0, which no quantizer writes and the kernels would read as
// a huge finite scale), or -1. Model loading rejects such tensors.
int64_t mxfp4_find_nan_scale(const void* blocks, int64_t n_blocks);
void dequantize_row_q8_K_ref(const void* src, float* dst, int64_t n);
void quantize_row_q8_K_ref(const float* src, void* dst, int64_t n);
void dequantize_row_f16_ref(const void* src, float* dst, int64_t n);
void quantize_row_f16_ref(const float* src, void* dst, int64_t n);
void dequantize_row_bf16_ref(const void* src, float* dst, int64_t n);
void quantize_row_bf16_ref(const float* src, void* dst, int64_t n);

}  // namespace ember
