// Scalar twins of the AVX-512 row-lane K-quant kernels (contract in
// kernels/ref/kquants_lanes.h). FMA contraction is off: every float step
// is the one written (the fma calls are explicit).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kernels/ref/kquants_lanes.h"

#include <cmath>

#include "core/fp16.h"
#include "quant/block_utils.h"
#include "quant/blocks.h"

namespace ember::ref {

namespace {

// Q4_K and Q5_K: the same scales, mins and sub-blocks; Unpack gives the
// unsigned quants (0..15 / 0..31) in element order.
template <class Block, void (*Unpack)(const Block&, int8_t*)>
float dot_scale_min_lanes(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const Block*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];
  float acc = 0.0f, acc_m = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    Unpack(a[i], q);
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, m;
      quant::get_scale_min_k4(j, a[i].scales, &sc, &m);
      int32_t dot = 0;
      for (int e = 32 * j; e < 32 * j + 32; ++e) dot += q[e] * b[i].qs[e];
      sumi += sc * dot;
      summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
    const float d = f16_to_f32(a[i].d) * b[i].d;
    const float dmin = f16_to_f32(a[i].dmin) * b[i].d;
    acc = std::fma(static_cast<float>(sumi), d, acc);
    acc_m = std::fma(static_cast<float>(summ), dmin, acc_m);
  }
  return acc - acc_m;
}

}  // namespace

void q4_K_lanes_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_scale_min_lanes<BlockQ4_K, quant::unpack_q4_K>(n, w, x);
}
void q5_K_lanes_dot(int64_t n, float* s, const void* w, const void* x) {
  *s = dot_scale_min_lanes<BlockQ5_K, quant::unpack_q5_K>(n, w, x);
}

void q6_K_lanes_dot(int64_t n, float* s, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  int8_t q[kQK_K];  // q - 32
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quant::unpack_q6_K(a[i], q);
    int32_t sumi = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int32_t dot = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) dot += q[e] * b[i].qs[e];
      sumi += a[i].scales[g] * dot;
    }
    acc = std::fma(static_cast<float>(sumi), f16_to_f32(a[i].d) * b[i].d, acc);
  }
  *s = acc;
}

}  // namespace ember::ref
