// Scalar reference quantizer and dequantizer of MXFP4 (quant/blocks.h
// BlockMXFP4), bit-compatible with llama.cpp's quantize_row_mxfp4_ref and
// dequantize_row_mxfp4 (ggml-quants.c): the shared exponent is
// floor(log2(amax)) - 2 (so the largest |x| lands in [4, 8) times the
// doubled-value scale), each value takes the code of least |2v*d - x|
// (first code on ties), and values are kMxfp4Values[code] * d with
// d = mxfp4_half_scale(e). One deliberate difference: where llama.cpp's
// byte would be 0xff (NaN in E8M0; amax in [2^-126, 2^-125)), ember writes 0.
// The importance-weighted quantizer (quantize_imatrix.h) tries that exponent
// and its two neighbours and keeps the lowest weighted error.
// Tests: tests/quant/ (fixtures from tools/gen_mxfp4_fixtures.py, which runs
// llama.cpp's own C functions).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>

#include "quant/block_utils.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"

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

float block_amax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  return amax;
}

// llama.cpp's exponent: (uint8_t)(floorf(log2f(amax)) - 2 + 127), a float ->
// int conversion as x86 performs it, then the low byte; except that the one
// byte it would write that is NaN in E8M0 (0xff, for amax in [2^-126,
// 2^-125), where the true exponent is -1) becomes 0, the nearest valid scale
// (llama.cpp reads 0xff as 2^127, which zeroes such a block).
uint8_t rtn_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const auto e = static_cast<uint8_t>(quant::trunc_to_i32(std::floor(std::log2(amax)) - 2.0f + 127.0f));
  return e == 0xff ? 0 : e;
}

void write_codes(const float* x, float d, BlockMXFP4* y) {
  for (int j = 0; j < kQK / 2; ++j) {
    const int x0 = best_index_mxfp4(x[j], d);
    const int x1 = best_index_mxfp4(x[kQK / 2 + j], d);
    y->qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
  }
}

// sum_j qw[j] (x[j] - q(x[j]))^2 with each value at its nearest code under d.
double weighted_error(const float* x, const float* qw, float d) {
  double err = 0.0;
  for (int j = 0; j < kQK; ++j) {
    const double diff = static_cast<double>(kMxfp4Values[best_index_mxfp4(x[j], d)]) * d - x[j];
    err += static_cast<double>(qw[j]) * diff * diff;
  }
  return err;
}

}  // namespace

void quantize_row_mxfp4_ref(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const uint8_t e = rtn_exponent(block_amax(x));
    y[i].e = e;
    write_codes(x, mxfp4_half_scale(e), &y[i]);
  }
}

void quantize_row_mxfp4_imatrix(const float* x, void* dst, int64_t n, const float* qw) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i, x += kQK, qw += kQK) {
    const float amax = block_amax(x);
    const uint8_t e0 = rtn_exponent(amax);
    uint8_t best = e0;
    if (amax > 0.0f) {
      // The exponent without llama.cpp's wrap-around, clamped to the valid
      // bytes 0 .. 254; candidates its neighbours, after round-to-nearest's.
      const float t = std::floor(std::log2(amax)) - 2.0f + 127.0f;
      const int base = static_cast<int>(std::min(254.0f, std::max(0.0f, t)));
      double best_err = weighted_error(x, qw, mxfp4_half_scale(e0));
      for (int c = base - 1; c <= base + 1; ++c) {
        if (c < 0 || c > 254 || c == e0) continue;
        const double err = weighted_error(x, qw, mxfp4_half_scale(static_cast<uint8_t>(c)));
        if (err < best_err) {
          best_err = err;
          best = static_cast<uint8_t>(c);
        }
      }
    }
    y[i].e = best;
    write_codes(x, mxfp4_half_scale(best), &y[i]);
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

int64_t mxfp4_find_nan_scale(const void* blocks, int64_t n_blocks) {
  const auto* b = static_cast<const BlockMXFP4*>(blocks);
  for (int64_t i = 0; i < n_blocks; ++i)
    if (b[i].e == 0xff) return i;
  return -1;
}

}  // namespace ember
