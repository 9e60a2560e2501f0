// Decode (one token) kernels over many weight rows at once
// (KernelSet::vec_dot_rows): s[r] = dot(w row r, x) for r < nr. Each output is
// bit-identical to the vec_dot of the same ISA level (batch invariance).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember::avx512 {

// Rows computed together per group (the kernel takes any nr >= 1).
constexpr int kDecodeGroupRows = 16;
void vec_dot_rows_q4_0_q8_0(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr);
// Q8_0 / Q5_0 (gemm_lanes_avx512.cpp): sequential rows (two at a time when
// short), the activation side prepared once per call.
void vec_dot_rows_q8_0_q8_0(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr);
void vec_dot_rows_q5_0_q8_0(int64_t n, float* s, const void* w, size_t w_row_bytes, const void* x, int64_t nr);

}  // namespace ember::avx512
