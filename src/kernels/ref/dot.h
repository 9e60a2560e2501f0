// Scalar reference dot products: one weight row (type W) x one activation row
// (W's vec_dot_type). These define the exact arithmetic SIMD kernels are
// tested against (integer block sums, f32 scale accumulation):
//
// * Quantized x quantized: per block an exact int32 sum of integer products
//   (weighted by the integer sub-block scales for k-quants); the block's
//   float scales are applied once per block and blocks are accumulated in
//   order into one f32 sum, without FMA:
//     Q4_0/Q5_0/Q8_0:  sumf += (dw*dx) * sumi
//     MXFP4:           the same, with the doubled E2M1 values as integer weights
//                      and dw = mxfp4_half_scale(e) (quant/blocks.h)
//     Q4_1/Q5_1:       sumf += (dw*dx) * sumi + mw*sx   (sx: Q8_1's stored d*sum(q))
//     Q2_K/Q4_K/Q5_K:  sumf += d*sumi - dmin*summ,  d = dw*dx, dmin = dminw*dx,
//                      summ = sum over sub-blocks of min_j * (Q8_K bsums over it)
//     Q3_K/Q6_K/Q8_K:  sumf += d*sumi
// * Sparse int8 / int4 (kSQ8 | C, kSQ4 | C, quant/sparse.h) x Q8_0, in 16
//   f32 lanes: lane
//   l = 8h + j of block b (half h, j < 8) takes the exact int32 sum
//   isum = sum_{t<4} w[64b + 32h + 4j + t] * x[64b + 32h + 4j + t] (w the
//   block expanded under its mask) and accumulates
//     acc[l] = fma(isum, dw[b][h] * dx[2b + h], acc[l])   (one rounding)
//   in block order; then acc[i] += acc[i + 8] (i < 8), acc[i] += acc[i + 4]
//   (i < 4), acc[i] += acc[i + 2] (i < 2), s = acc[0] + acc[1]. These are
//   the lanes of one zmm (or two ymm) of vpdpbusd / pmaddubsw sums, so
//   every level gives these bits (ref/sparse_dot.cpp). The two families
//   differ only in the block's values (int8, or 4-bit q with w = q - 8).
// * F32/F16/BF16 weights x f32: exact products summed in double in index
//   order, rounded to f32 once.
//
// n is a multiple of the weight block size; activations must come from the
// matching quantizer (bsums consistent with qs).
#pragma once

#include <cstdint>

namespace ember::ref {

// Float weight types take f32 activations.
void f32_dot(int64_t n, float* s, const void* w, const void* x);
void f16_dot(int64_t n, float* s, const void* w, const void* x);
void bf16_dot(int64_t n, float* s, const void* w, const void* x);
// Legacy types: Q4_0/Q5_0/Q8_0 x Q8_0, Q4_1/Q5_1 x Q8_1.
void q4_0_dot(int64_t n, float* s, const void* w, const void* x);
void q4_1_dot(int64_t n, float* s, const void* w, const void* x);
void q5_0_dot(int64_t n, float* s, const void* w, const void* x);
void q5_1_dot(int64_t n, float* s, const void* w, const void* x);
void q8_0_dot(int64_t n, float* s, const void* w, const void* x);
// MXFP4 x Q8_0.
void mxfp4_dot(int64_t n, float* s, const void* w, const void* x);
// K-quants x Q8_K.
void q2_K_dot(int64_t n, float* s, const void* w, const void* x);
void q3_K_dot(int64_t n, float* s, const void* w, const void* x);
void q4_K_dot(int64_t n, float* s, const void* w, const void* x);
void q5_K_dot(int64_t n, float* s, const void* w, const void* x);
void q6_K_dot(int64_t n, float* s, const void* w, const void* x);
void q8_K_dot(int64_t n, float* s, const void* w, const void* x);
// Sparse int8 / int4 x Q8_0 (ref/sparse_dot.cpp).
void sq8_dot(int64_t n, float* s, const void* w, const void* x);
void sq4_dot(int64_t n, float* s, const void* w, const void* x);

}  // namespace ember::ref
