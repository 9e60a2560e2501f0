// Scalar twins of the row-lane K-quant kernels
// (kernels/cpu/avx512/kquants_lanes.cpp, avx2/kquants_lanes.cpp): the exact arithmetic those
// kernels follow, written plainly, so tests can check them bit for bit.
//
// Q4_K (and Q5_K, its quants 0..31) x Q8_K, per super-block in order (sumi,
// summ exact int32):
//   sumi  = sum_s sc_s * dot(q, x over sub-block s)
//   summ  = sum_s m_s * (bsums[2s] + bsums[2s+1])
//   acc   = fma(float(sumi), f16(d) * x.d,    acc)
//   acc_m = fma(float(summ), f16(dmin) * x.d, acc_m)
// result = acc - acc_m.
// Q6_K x Q8_K, per super-block in order (sumi exact int32):
//   sumi  = sum_g sc_g * dot(q - 32, x over the 16-element group g)
//   acc   = fma(float(sumi), f16(d) * x.d, acc)
// result = acc. All differ from ref::q4_K_dot / q5_K / q6_K (no FMA, one
// running sum) only by float rounding.
#pragma once

#include <cstdint>

namespace ember::ref {

void q4_K_lanes_dot(int64_t n, float* s, const void* w, const void* x);
void q5_K_lanes_dot(int64_t n, float* s, const void* w, const void* x);
void q6_K_lanes_dot(int64_t n, float* s, const void* w, const void* x);

}  // namespace ember::ref
