// Host twins of the CUDA kernels: the very functions the device runs
// (kernels/cuda/act_format.h, rows_math.h), driven on the CPU in the
// device's order, so that CI (no GPU) checks the device arithmetic against
// the scalar references of quant/ and kernels/ref/, and a GPU session checks
// the device against these bit for bit (tests/cuda/).
#pragma once

#include <cstdint>

#include "kernels/cuda/act_format.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/rows_math.h"
#include "quant/blocks.h"

namespace ember::cuda {

// One act row (act_format.h) of n elements from x, as convert.cu writes it:
// act_row_bytes(k, n) bytes at `row` (the padding is zeroed).
void act_quantize_host(ActKind k, const float* x, int64_t n, uint8_t* row);
// The act row back as the CPU's activation blocks (BlockQ8_0 [n / 32] or
// BlockQ8_K [n / 256]), for kernels/ref/dot.h. Exact.
void act_to_q8_0(const uint8_t* row, int64_t n, BlockQ8_0* out);
void act_to_q8_K(const uint8_t* row, int64_t n, BlockQ8_K* out);

// dot(weight row, activation row) exactly as rows.cu computes it (its lanes,
// chunks and butterfly emulated): quantized types take an act row, F16 /
// BF16 an f32 row. Bit-identical to the device.
float rows_host(WType t, const uint8_t* w_row, int64_t n, const void* act);

// The per-block terms the device adds for one row, in row order (one per
// block; per super-block for the K-quants): each must equal the term
// kernels/ref/dot.cpp adds for that block, bit for bit.
void rows_block_terms_host(WType t, const uint8_t* w_row, int64_t n, const uint8_t* act, float* terms);

// The K/V stores of attention.cu's kv_store kernel over host memory (every
// pointer of `a` host memory): the same addressing (geometry.h
// kv_row_offset) and the same per-element encoder (kv_store_elem).
void kv_store_host(const launch::KvStoreArgs& a);

}  // namespace ember::cuda
