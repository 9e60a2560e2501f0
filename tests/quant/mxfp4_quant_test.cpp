// MXFP4 quantization beyond llama.cpp's round-to-nearest (which
// quantize_compat_test checks bit for bit): the importance-weighted exponent
// search (quantize_row_mxfp4_imatrix: e, e - 1, e + 1, lowest weighted error)
// against a brute-force reference and against round-to-nearest, and the one
// exponent byte round-to-nearest must not write (0xff, NaN in E8M0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"

namespace ember {
namespace {

// The block of x[0:32] with exponent e, each value at its nearest code
// (written independently of the library: first code on ties).
BlockMXFP4 block_with_exponent(const float* x, uint8_t e) {
  BlockMXFP4 b{};
  b.e = e;
  const double d = mxfp4_half_scale(e);
  for (int j = 0; j < kQK; ++j) {
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(kMxfp4Values[c] * d - x[j]) < std::fabs(kMxfp4Values[best] * d - x[j])) best = c;
    b.qs[j % 16] |= static_cast<uint8_t>(j < 16 ? best : best << 4);
  }
  return b;
}

double block_error(const float* x, const float* w, const BlockMXFP4& b) {
  float y[kQK];
  dequantize_row_mxfp4_ref(&b, y, kQK);
  double e = 0;
  for (int j = 0; j < kQK; ++j) {
    const double diff = static_cast<double>(x[j]) - y[j];
    e += static_cast<double>(w[j]) * diff * diff;
  }
  return e;
}

// Every block of random rows (magnitudes over many octaves, importance
// dominated by a few channels): the chosen exponent is round-to-nearest's
// or a neighbour, its error is the least of the three (round-to-nearest's on
// ties), its codes are the nearest ones, and the total beats round-to-nearest.
TEST(Mxfp4Imatrix, ExponentSearchMatchesBruteForce) {
  constexpr int64_t kRows = 24, kPerRow = 512, kBlocks = kPerRow / kQK;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(kRows * kPerRow), w(kPerRow);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t i = 0; i < kPerRow; ++i) x[r * kPerRow + i] = std::ldexp(g(rng), static_cast<int>(r % 12) - 8);
  for (float& v : w) v = std::exp(2.0f * g(rng));
  std::vector<BlockMXFP4> qi(kRows * kBlocks), qr(kRows * kBlocks);
  ASSERT_TRUE(quantize_rows_imatrix(DType::kMXFP4, x.data(), qi.data(), kRows, kPerRow, w.data()));
  ASSERT_TRUE(quantize_rows(DType::kMXFP4, x.data(), qr.data(), kRows, kPerRow));
  double ei_total = 0, er_total = 0;
  int moved = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t b = 0; b < kBlocks; ++b) {
      const float* xb = x.data() + r * kPerRow + b * kQK;
      const float* wb = w.data() + b * kQK;
      const BlockMXFP4& got = qi[r * kBlocks + b];
      const uint8_t e0 = qr[r * kBlocks + b].e;
      ASSERT_NE(e0, 0xff);
      ASSERT_LE(std::abs(static_cast<int>(got.e) - static_cast<int>(e0)), 1) << "r=" << r << " b=" << b;
      double best = block_error(xb, wb, block_with_exponent(xb, e0));
      for (int c : {e0 - 1, e0 + 1})
        if (c >= 0 && c <= 254) best = std::min(best, block_error(xb, wb, block_with_exponent(xb, static_cast<uint8_t>(c))));
      const BlockMXFP4 want = block_with_exponent(xb, got.e);
      ASSERT_EQ(std::memcmp(&want, &got, sizeof(want)), 0) << "codes r=" << r << " b=" << b;
      const double ei = block_error(xb, wb, got), er = block_error(xb, wb, qr[r * kBlocks + b]);
      EXPECT_EQ(ei, best) << "r=" << r << " b=" << b;
      EXPECT_LE(ei, er);
      if (got.e == e0) {
        EXPECT_EQ(std::memcmp(&got, &qr[r * kBlocks + b], sizeof(got)), 0);
      }
      moved += got.e != e0;
      ei_total += ei;
      er_total += er;
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_LT(ei_total, er_total);
  std::printf("MXFP4 weighted error: imatrix / round-to-nearest = %.4f, %d of %lld blocks moved their exponent\n",
              ei_total / er_total, moved, static_cast<long long>(kRows * kBlocks));
}

// A large value that matters little and many small ones that matter: the
// search halves the scale (e - 1) and clips the outlier; uniform importance
// keeps round-to-nearest's choice here.
TEST(Mxfp4Imatrix, SmallerScaleWhenTheOutlierDoesNotMatter) {
  float x[kQK], w[kQK], ones[kQK];
  for (int j = 0; j < kQK; ++j) x[j] = 0.3f + 0.01f * static_cast<float>(j % 5), w[j] = 1.0f, ones[j] = 1.0f;
  x[7] = 5.0f;
  w[7] = 1e-6f;
  BlockMXFP4 rtn, imq, uni;
  quantize_row_mxfp4_ref(x, &rtn, kQK);
  quantize_row_mxfp4_imatrix(x, &imq, kQK, w);
  quantize_row_mxfp4_imatrix(x, &uni, kQK, ones);
  EXPECT_EQ(rtn.e, 127);  // floor(log2 5) - 2 + 127
  EXPECT_EQ(imq.e, 126);
  EXPECT_EQ(uni.e, 127);
  EXPECT_LT(block_error(x, w, imq), 0.2 * block_error(x, w, rtn));
}

// Zero blocks stay zero; zero importance keeps round-to-nearest's bytes.
TEST(Mxfp4Imatrix, DegenerateBlocks) {
  float x[2 * kQK] = {}, w[2 * kQK] = {};
  for (int j = kQK; j < 2 * kQK; ++j) x[j] = std::sin(static_cast<float>(j));
  BlockMXFP4 got[2], rtn[2];
  quantize_row_mxfp4_imatrix(x, got, 2 * kQK, w);
  quantize_row_mxfp4_ref(x, rtn, 2 * kQK);
  EXPECT_EQ(got[0].e, 0);
  for (uint8_t q : got[0].qs) EXPECT_EQ(q, 0);
  EXPECT_EQ(std::memcmp(&got[1], &rtn[1], sizeof(BlockMXFP4)), 0);
}

// llama.cpp's formula gives the byte 0xff for amax in [2^-126, 2^-125); ember
// writes the nearest valid scale (0) instead, which represents the block.
TEST(Mxfp4Quantize, NeverWritesTheNanScale) {
  float x[kQK];
  for (int j = 0; j < kQK; ++j) x[j] = std::ldexp(1.5f - 0.04f * static_cast<float>(j), -126);
  BlockMXFP4 b, bi;
  quantize_row_mxfp4_ref(x, &b, kQK);
  std::vector<float> ones(kQK, 1.0f);
  quantize_row_mxfp4_imatrix(x, &bi, kQK, ones.data());
  EXPECT_EQ(b.e, 0);
  EXPECT_NE(bi.e, 0xff);
  EXPECT_EQ(mxfp4_find_nan_scale(&b, 1), -1);
  float y[kQK];
  dequantize_row_mxfp4_ref(&b, y, kQK);
  // Within half the widest code gap (2 d) and never zeroed (as a 2^127 scale would).
  const double d = mxfp4_half_scale(0);
  for (int j = 0; j < kQK; ++j) {
    EXPECT_NEAR(y[j], x[j], 2.0 * d) << j;
    EXPECT_GT(y[j], 0.0f) << j;
  }
  // Every exponent round-to-nearest can produce, over the whole float range.
  for (int k = -149; k <= 127; ++k) {
    float v[kQK];
    for (int j = 0; j < kQK; ++j) v[j] = std::ldexp(1.0f + static_cast<float>(j) / 32.0f, k);
    quantize_row_mxfp4_ref(v, &b, kQK);
    EXPECT_NE(b.e, 0xff) << "2^" << k;
  }
}

}  // namespace
}  // namespace ember
