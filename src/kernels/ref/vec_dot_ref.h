// Scalar reference dot products: one weight row (type W) x one activation row
// (W's vec_dot_type). These define the exact arithmetic SIMD kernels are
// tested against (integer block sums, f32 scale accumulation).
#pragma once

#include <cstdint>

namespace ember::ref {

// Float weight types take f32 activations.
void vec_dot_f32(int64_t n, float* s, const void* w, const void* x);
void vec_dot_f16(int64_t n, float* s, const void* w, const void* x);
void vec_dot_bf16(int64_t n, float* s, const void* w, const void* x);
// Legacy types: Q4_0/Q5_0/Q8_0 x Q8_0, Q4_1/Q5_1 x Q8_1.
void vec_dot_q4_0_q8_0(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q4_1_q8_1(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q5_0_q8_0(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q5_1_q8_1(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q8_0_q8_0(int64_t n, float* s, const void* w, const void* x);
// K-quants x Q8_K.
void vec_dot_q2_K_q8_K(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q3_K_q8_K(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q4_K_q8_K(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q5_K_q8_K(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q6_K_q8_K(int64_t n, float* s, const void* w, const void* x);
void vec_dot_q8_K_q8_K(int64_t n, float* s, const void* w, const void* x);

}  // namespace ember::ref
