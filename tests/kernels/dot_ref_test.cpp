// Scalar reference dot products (kernels/ref/dot.h): each must agree
// with dequantize(weights) . dequantize(activations) summed in double, to
// within the rounding of its per-block f32 scale arithmetic.
#include "kernels/ref/dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "quant/quantize.h"

namespace ember {
namespace {

using VecDot = void (*)(int64_t, float*, const void*, const void*);

struct Case {
  DType weight;
  DType activation;
  VecDot fn;
};

const Case kCases[] = {
    {DType::kF32, DType::kF32, ref::f32_dot},
    {DType::kF16, DType::kF32, ref::f16_dot},
    {DType::kBF16, DType::kF32, ref::bf16_dot},
    {DType::kQ4_0, DType::kQ8_0, ref::q4_0_dot},
    {DType::kQ4_1, DType::kQ8_1, ref::q4_1_dot},
    {DType::kQ5_0, DType::kQ8_0, ref::q5_0_dot},
    {DType::kQ5_1, DType::kQ8_1, ref::q5_1_dot},
    {DType::kQ8_0, DType::kQ8_0, ref::q8_0_dot},
    {DType::kMXFP4, DType::kQ8_0, ref::mxfp4_dot},
    {DType::kQ2_K, DType::kQ8_K, ref::q2_K_dot},
    {DType::kQ3_K, DType::kQ8_K, ref::q3_K_dot},
    {DType::kQ4_K, DType::kQ8_K, ref::q4_K_dot},
    {DType::kQ5_K, DType::kQ8_K, ref::q5_K_dot},
    {DType::kQ6_K, DType::kQ8_K, ref::q6_K_dot},
    {DType::kQ8_K, DType::kQ8_K, ref::q8_K_dot},
};

std::vector<float> random_row(size_t n, float mean, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

struct Quantized {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized
};

Quantized quantize(DType t, const std::vector<float>& x) {
  Quantized q;
  const auto n = static_cast<int64_t>(x.size());
  q.bytes.resize(dtype_row_size(t, n));
  EXPECT_TRUE(quantize_rows(t, x.data(), q.bytes.data(), 1, n).is_ok());
  q.values.resize(x.size());
  dequantize_row_ref(t, q.bytes.data(), q.values.data(), n);
  return q;
}

// Returns |vec_dot - exact| / sum|w_i x_i| for one weight/activation pair.
double relative_error(const Case& c, const std::vector<float>& w, const std::vector<float>& x, float* result) {
  const Quantized qw = quantize(c.weight, w);
  const Quantized qx = quantize(c.activation, x);
  double exact = 0, mag = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    exact += static_cast<double>(qw.values[i]) * qx.values[i];
    mag += std::fabs(static_cast<double>(qw.values[i]) * qx.values[i]);
  }
  if (c.activation == DType::kQ8_1) {
    // Q4_1/Q5_1 x Q8_1 use the block's stored s = f16(dx * sum(qx)) for the
    // min term, by definition; account for its f16 rounding.
    const size_t wsize = dtype_type_size(c.weight), xsize = dtype_type_size(c.activation);
    for (size_t b = 0; b < w.size() / 32; ++b) {
      const uint8_t* wb = qw.bytes.data() + b * wsize;
      const uint8_t* xb = qx.bytes.data() + b * xsize;
      f16_t m, dx, sx;
      std::memcpy(&m, wb + 2, 2);
      std::memcpy(&dx, xb, 2);
      std::memcpy(&sx, xb + 2, 2);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(xb[4 + j]);
      exact += static_cast<double>(f16_to_f32(m)) *
               (static_cast<double>(f16_to_f32(sx)) - static_cast<double>(f16_to_f32(dx)) * sum);
    }
  }
  float s = NAN;
  c.fn(static_cast<int64_t>(w.size()), &s, qw.bytes.data(), qx.bytes.data());
  if (result) *result = s;
  return mag > 0 ? std::fabs(s - exact) / mag : std::fabs(s - exact);
}

TEST(VecDotRef, MatchesDequantizedDoubleDot) {
  for (const Case& c : kCases) {
    double worst = 0;  // largest err / tol seen for this type
    for (int64_t n : {256, 4096}) {
      const int64_t nblocks = n / dtype_block_size(c.weight);
      // Bound: one rounding per block accumulation plus a few per block.
      const double tol = static_cast<double>(nblocks + 8) * std::ldexp(1.0, -24);
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        // Weights with a nonzero mean exercise the min / bsums terms.
        const std::vector<float> w = random_row(static_cast<size_t>(n), seed == 2 ? 0.01f : 0.0f, 0.02f, seed);
        const std::vector<float> x = random_row(static_cast<size_t>(n), 0.0f, 1.0f, 100 + seed);
        const double err = relative_error(c, w, x, nullptr);
        EXPECT_LE(err, tol) << dtype_name(c.weight) << " n=" << n << " seed=" << seed;
        worst = std::max(worst, err / tol);
      }
    }
    std::printf("  %-5s worst error / tolerance %.3f\n", dtype_name(c.weight), worst);
  }
}

TEST(VecDotRef, ZeroActivationsGiveZero) {
  for (const Case& c : kCases) {
    const std::vector<float> w = random_row(512, 0.0f, 1.0f, 9);
    const std::vector<float> x(512, 0.0f);
    float s = NAN;
    relative_error(c, w, x, &s);
    EXPECT_EQ(s, 0.0f) << dtype_name(c.weight);
  }
}

TEST(VecDotRef, FloatDotIsExactlyRoundedDoubleSum) {
  // Small integers: every product and partial sum is exact, so the result
  // must be exact too.
  std::vector<float> w(64), x(64);
  double want = 0;
  for (int i = 0; i < 64; ++i) {
    w[i] = static_cast<float>(i % 7 - 3);
    x[i] = static_cast<float>(i % 5 + 1);
    want += static_cast<double>(w[i]) * x[i];
  }
  float s = 0;
  ref::f32_dot(64, &s, w.data(), x.data());
  EXPECT_EQ(s, static_cast<float>(want));
  std::vector<f16_t> wh(64);
  std::vector<bf16_t> wb(64);
  for (int i = 0; i < 64; ++i) {
    wh[i] = f32_to_f16(w[i]);
    wb[i] = f32_to_bf16(w[i]);
  }
  ref::f16_dot(64, &s, wh.data(), x.data());
  EXPECT_EQ(s, static_cast<float>(want));
  ref::bf16_dot(64, &s, wb.data(), x.data());
  EXPECT_EQ(s, static_cast<float>(want));
}

TEST(VecDotRef, Q8_0SingleBlockFormula) {
  // One block: s = (dw * dx) * sum(qw * qx), evaluated in f32.
  std::vector<float> w = random_row(32, 0.0f, 1.0f, 21), x = random_row(32, 0.0f, 1.0f, 22);
  const Quantized qw = quantize(DType::kQ8_0, w), qx = quantize(DType::kQ8_0, x);
  int32_t sumi = 0;
  for (int j = 0; j < 32; ++j) sumi += static_cast<int8_t>(qw.bytes[2 + j]) * static_cast<int8_t>(qx.bytes[2 + j]);
  f16_t dw, dx;
  std::memcpy(&dw, qw.bytes.data(), 2);
  std::memcpy(&dx, qx.bytes.data(), 2);
  const volatile float d = f16_to_f32(dw) * f16_to_f32(dx);
  const volatile float want = d * static_cast<float>(sumi);
  float s = 0;
  ref::q8_0_dot(32, &s, qw.bytes.data(), qx.bytes.data());
  EXPECT_EQ(s, want);
}

}  // namespace
}  // namespace ember
