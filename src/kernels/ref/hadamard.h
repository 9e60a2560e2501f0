// Scalar reference twin of the Hadamard transform (kernels/hadamard.h): the
// EMBER_ISA=scalar level and the oracle of the AVX2 kernel
// (kernels/cpu/avx2/hadamard.cpp), with the pieces both share: the size
// factorisation and the small Paley matrices, and stage 1 (the H_m blocks),
// which every level runs through this same scalar code.
//
// Same contract and in-place rule as kernels/hadamard.h. No allocation; the
// Paley matrices are built once (function-local statics).
#pragma once

#include <cstdint>

#include "kernels/hadamard.h"
#include "kernels/ops.h"

namespace ember::ref {

EMBER_DECLARE_LIKE(hadamard_row)

// The odd factor m of a valid size n = 2^k * m (1, 12 or 20).
int hadamard_odd_factor(int64_t n);
// The m x m Paley-I matrix (entries +1 / -1, row-major), m in {12, 20}.
const int8_t* hadamard_paley(int m);
// Stage 1 of the contract: each of the n / m blocks of m elements times H_m
// (H_m^T when transpose). m > 1.
void hadamard_blocks(float* x, int64_t n, int m, bool transpose);
// Stage 3: x[i] *= hadamard_scale(n) = float(1 / sqrt(n)).
float hadamard_scale(int64_t n);
// The fixed signs of D (stage 0 / 4): s_i = -1 when the low bit of a
// 32-bit mix of i + 1 (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15;
// x *= 0x846ca68b; x ^= x >> 16) is set, else +1. Chosen so that for every
// size up to 4096 the all-ones vector maps to no element above half its
// norm (a plain multiplicative hash left spikes of the full norm at 8, 16).
inline int hadamard_sign(int64_t i) {
  uint32_t x = static_cast<uint32_t>(i + 1);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x & 1u ? -1 : 1;
}
// x[i] = -x[i] where s_i = -1; and the same as float sign-bit masks
// (0x80000000 where s_i = -1), [kHadamardMaxSize].
void hadamard_signs(float* x, int64_t n);
const uint32_t* hadamard_sign_masks();

}  // namespace ember::ref
