// The int8 activation format of the CUDA mat-vec kernels ("act rows"): a
// Q8_1-like format (int8 values, a scale per block, and the sums of the
// values, so that kernels on unsigned weight levels subtract the offset
// once per block), whose values and scales are exactly those of ember's CPU
// activation types, so that the device computes the products the CPU
// computes, term by term:
//
//   kind    block (scale group)   weights it serves          values and scale, bit for bit
//   kQ8_0   32                    Q4_0, Q5_0, Q8_0           quantize_row_q8_0_ref (d = amax / 127
//                                                            rounded to f16, q = round-half-away(x / d))
//   kQ8_K   256                   Q4_K, Q6_K                 quantize_row_q8_K_ref (d = 1 / iscale,
//                                                            iscale = -127 / (the signed value of
//                                                            largest magnitude, first in index
//                                                            order), q = min(127, round-even(iscale x)))
//
// One row of n elements (n a multiple of the block) is stored
// struct-of-arrays, so that a lane reads its 32 values with two 16-byte
// loads:
//   qs     int8[n]            at 0
//   d      float[n / block]   at n                  (kQ8_0: the f16 scale, widened exactly)
//   bsums  int16[n / 16]      at n + 4 * n / block  (sum of qs over each 16 consecutive elements)
// and rows are act_row_bytes(kind, n) apart (a multiple of 128 bytes).
// A block of all zeros has d = 0, qs = 0, bsums = 0.
//
// The host twin (kernels/cuda/twins.h act_quantize_host) and the device
// kernel (convert.cu) both run the per-block functions below; tests/cuda/
// checks the twin against quant/'s reference quantizers bit for bit (CI)
// and the device against the twin bit for bit (on a GPU).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd.h"

namespace ember::cuda {

enum class ActKind : uint8_t { kQ8_0, kQ8_K };

EMBER_HD constexpr int act_block(ActKind k) { return k == ActKind::kQ8_0 ? 32 : 256; }
EMBER_HD constexpr int64_t act_d_offset(ActKind, int64_t n) { return n; }
EMBER_HD constexpr int64_t act_bsums_offset(ActKind k, int64_t n) { return n + 4 * (n / act_block(k)); }
EMBER_HD constexpr int64_t act_row_bytes(ActKind k, int64_t n) {
  const int64_t used = act_bsums_offset(k, n) + 2 * (n / 16);
  return (used + 127) / 128 * 128;
}

// ---- kQ8_0: per 32-element block, from its largest magnitude amax.
// d (unrounded) and the reciprocal the values are multiplied by.
EMBER_HD float q8_0_scale(float amax) { return div_rn(amax, 127.0f); }
EMBER_HD float q8_0_inverse(float d) { return d != 0.0f ? div_rn(1.0f, d) : 0.0f; }
EMBER_HD int8_t q8_0_value(float x, float id) { return static_cast<int8_t>(round_away(mul_rn(x, id))); }
// The stored scale: d rounded to f16 (as BlockQ8_0 holds it), widened.
EMBER_HD float q8_0_stored_scale(float d) { return half_to_float(float_to_half(d)); }

// ---- kQ8_K: per 256-element block, from vmax, the signed value of largest
// magnitude (the first such in index order); vmax == 0: all zero.
EMBER_HD float q8_K_iscale(float vmax) { return div_rn(-127.0f, vmax); }
EMBER_HD int8_t q8_K_value(float x, float iscale) {
  const int q = round_even(mul_rn(iscale, x));
  return static_cast<int8_t>(q < 127 ? q : 127);
}
EMBER_HD float q8_K_stored_scale(float iscale) { return div_rn(1.0f, iscale); }

// "a beats b" in the kQ8_K max search: larger magnitude, ties to the lower
// index (the reference scans in index order and keeps the first strict max).
EMBER_HD bool q8_K_max_beats(float abs_a, int idx_a, float abs_b, int idx_b) {
  return abs_a > abs_b || (abs_a == abs_b && idx_a < idx_b);
}

}  // namespace ember::cuda
