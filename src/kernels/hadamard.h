// Orthonormal Hadamard transform of short vectors (one attention head row):
// the rotation that spreads outliers of Q/K/V over the head dimension before
// a 4-bit KV cache rounds them (QuaRot), applied by the forward pass
// (model/layers/attention.cpp) outside the attention kernels.
//
// Sizes: n = 2^k * m with m in {1, 12, 20} and 2 <= n <= kHadamardMaxSize
// (64, 80 = 4 * 20, 96 = 8 * 12, 128, 160, 192, 256, ...). The matrix is
//   H_n = (H_{2^k} (x) H_m) D / sqrt(n)
// times D, with H_{2^k} Sylvester's (the Walsh-Hadamard matrix) and H_m
// the Paley-I matrix of the prime q = m - 1 (q = 11, 19; q = 3 mod 4):
// row 0 all ones, row i >= 1 = [-1, e_i + Q_i], Q the Jacobsthal matrix
// Q[i][j] = chi(j - i) mod q (chi: quadratic character), and D a fixed
// diagonal of pseudo-random signs (kernels/ref/hadamard.h
// hadamard_sign: a "randomized Hadamard" as in QuaRot, so that a vector
// with a large common component, e.g. all channels alike, is not mapped
// onto one spike, as the plain Walsh matrix maps the all-ones vector).
// H_n H_n^T = I, so H_n^T = D (H_{2^k} (x) H_m^T) / sqrt(n) is the inverse.
// Element i of the row is index (a, b) = (i / m, i % m).
//
// Arithmetic contract (every ISA level, bit for bit; the scalar twin is
// kernels/ref/hadamard.cpp):
//   0. (not transpose) x[i] = -x[i] where D_i = -1 (a sign flip, exact);
//   1. m > 1: each block of m, y[a, b] = sum over b' = 0..m-1 in order of
//      +-x[a, b'] (H_m[b][b'], or H_m[b'][b] for the transpose), starting
//      from +-x[a, 0], each term an add or a subtract of a float;
//   2. butterflies over a for h = 1, 2, 4, ..., 2^(k-1) (in this order):
//      (u, v) = (y[a], y[a + h]) -> (u + v, u - v) for every a with
//      a & h == 0, elementwise over b;
//   3. every element times the float 1 / sqrt(n) (rounded once from double);
//   4. (transpose) the sign flips of stage 0.
// Each output element is a fixed sequence of float adds and one multiply,
// so a row's result depends only on that row (batch- and thread-invariant).
//
// Thread-safe (no state; the small matrices are built once, thread-safely);
// no allocation.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ember {

constexpr int64_t kHadamardMaxSize = 4096;

// OK when n is a size of the transform (above); the error says why not.
Status hadamard_check(int64_t n);

// x[0..n) <- H_n x (transpose: H_n^T x, the inverse), in place, at the
// active ISA level. n must pass hadamard_check.
void hadamard_row(float* x, int64_t n, bool transpose);

}  // namespace ember
