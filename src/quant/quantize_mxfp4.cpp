// Scalar reference quantizer and dequantizer of MXFP4 (quant/blocks.h
// BlockMXFP4), bit-compatible with llama.cpp's quantize_row_mxfp4_ref and
// dequantize_row_mxfp4 (ggml-quants.c): the shared exponent is
// floor(log2(amax)) - 2 (so the largest |x| lands in [4, 8) times the
// doubled-value scale), each value takes the code of least |2v*d - x|
// (first code on ties), and values are kMxfp4Values[code] * d with
// d = mxfp4_half_scale(e). Tests: tests/quant/ (fixtures from
// tools/gen_mxfp4_fixtures.py, which runs llama.cpp's own C functions).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>

#include "quant/block_utils.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {
namespace {

int best_index_mxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void quantize_row_mxfp4_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    // llama.cpp: (uint8_t)(floorf(log2f(amax)) - 2 + 127), a float -> int
    // conversion as x86 performs it, then the low byte.
    const uint8_t e =
        amax > 0.0f ? static_cast<uint8_t>(quant::trunc_to_i32(std::floor(std::log2(amax)) - 2.0f + 127.0f)) : 0;
    const float d = mxfp4_half_scale(e);
    y[i].e = e;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = best_index_mxfp4(x[j], d);
      const int x1 = best_index_mxfp4(x[kQK / 2 + j], d);
      y[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

void dequantize_row_mxfp4_ref(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = mxfp4_half_scale(x[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
      dst[j + kQK / 2] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace ember
