// Quantize -> dequantize error bounds per type on bell-shaped random data
// (relative RMSE = rms(error) / rms(signal)), plus behaviour on edge-case
// rows that must survive exactly (zeros) or stay finite.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/quantize.h"

namespace ember {
namespace {

struct Bound {
  DType type;
  double max_rel_rmse;  // ~1.3x the measured value
};

// Measured on gaussian(64K, sigma 0.02): f16 2.1e-4, bf16 1.7e-3, q8_0 and
// q8_1 5.4e-3, q8_K 7.1e-3 (one scale per 256), q6_K 1.8e-2, q5_1 3.8e-2,
// q5_0 4.3e-2, q5_K 3.6e-2, q4_1 7.8e-2, q4_0 8.7e-2, q4_K 7.2e-2,
// q3_K 0.152, q2_K 0.297.
constexpr Bound kBounds[] = {
    {DType::kF16, 3e-4},    {DType::kBF16, 2.2e-3}, {DType::kQ8_0, 7e-3},   {DType::kQ8_1, 7e-3},
    {DType::kQ8_K, 9e-3},   {DType::kQ6_K, 2.3e-2}, {DType::kQ5_1, 4.8e-2}, {DType::kQ5_0, 5.5e-2},
    {DType::kQ5_K, 4.6e-2}, {DType::kQ4_1, 0.1},    {DType::kQ4_0, 0.11},   {DType::kQ4_K, 0.092},
    {DType::kQ3_K, 0.19},   {DType::kQ2_K, 0.37},
};

std::vector<float> gaussian(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

double rel_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, sig = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    sig += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(err / sig);
}

std::vector<float> roundtrip(DType t, const std::vector<float>& x, int64_t n_per_row) {
  const int64_t nrows = static_cast<int64_t>(x.size()) / n_per_row;
  std::vector<uint8_t> q(dtype_row_size(t, n_per_row) * static_cast<size_t>(nrows));
  EXPECT_TRUE(quantize_rows(t, x.data(), q.data(), nrows, n_per_row).is_ok());
  std::vector<float> y(x.size());
  dequantize_row_ref(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

TEST(Roundtrip, ErrorIsWithinTypeBound) {
  const std::vector<float> x = gaussian(64 * 1024, 0.02f, 7);
  for (const Bound& b : kBounds) {
    const double e = rel_rmse(x, roundtrip(b.type, x, 1024));
    EXPECT_LT(e, b.max_rel_rmse) << dtype_name(b.type);
    EXPECT_GT(e, 0.0) << dtype_name(b.type);  // every listed type is lossy on random data
    std::printf("  %-5s rel rmse %.3g (bound %.3g)\n", dtype_name(b.type), e, b.max_rel_rmse);
  }
}

TEST(Roundtrip, MoreBitsMeansLessError) {
  const std::vector<float> x = gaussian(16 * 1024, 1.0f, 11);
  auto err = [&](DType t) { return rel_rmse(x, roundtrip(t, x, 1024)); };
  EXPECT_LT(err(DType::kQ3_K), err(DType::kQ2_K));
  EXPECT_LT(err(DType::kQ4_K), err(DType::kQ3_K));
  EXPECT_LT(err(DType::kQ5_K), err(DType::kQ4_K));
  EXPECT_LT(err(DType::kQ6_K), err(DType::kQ5_K));
  EXPECT_LT(err(DType::kQ5_0), err(DType::kQ4_0));
  EXPECT_LT(err(DType::kQ8_0), err(DType::kQ5_0));
}

TEST(Roundtrip, ScaleInvariantAcrossMagnitudes) {
  // Error relative to the signal does not depend on its magnitude while the
  // f16 scales stay in their normal range.
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    const double e_small = rel_rmse(gaussian(8192, 1e-3f, 3), roundtrip(t, gaussian(8192, 1e-3f, 3), 256));
    const double e_large = rel_rmse(gaussian(8192, 10.0f, 3), roundtrip(t, gaussian(8192, 10.0f, 3), 256));
    EXPECT_NEAR(e_small, e_large, 0.25 * e_large) << dtype_name(t);
  }
}

TEST(Roundtrip, ZerosStayZeroAndOutliersAreKept) {
  for (const Bound& b : kBounds) {
    std::vector<float> zeros(512, 0.0f);
    for (float v : roundtrip(b.type, zeros, 256)) EXPECT_EQ(v, 0.0f) << dtype_name(b.type);

    std::vector<float> x = gaussian(512, 0.01f, 5);
    x[100] = 1.0f;  // one outlier: it sets the scale and must come back closely
    const std::vector<float> y = roundtrip(b.type, x, 256);
    EXPECT_NEAR(y[100], 1.0f, 0.05f) << dtype_name(b.type);
    for (float v : y) EXPECT_TRUE(std::isfinite(v)) << dtype_name(b.type);
  }
}

TEST(Roundtrip, ConstantRowsAreExactWhereRepresentable) {
  // -0.375 is exact in f16: Q4_1/Q5_1 store it as the min (d = 0); Q4_0/Q5_0
  // get d = 0.375/8 (/16), exact in f16, and level -8 (-16).
  for (DType t : {DType::kQ4_1, DType::kQ5_1, DType::kQ4_0, DType::kQ5_0, DType::kF16, DType::kBF16}) {
    std::vector<float> x(256, -0.375f);
    for (float v : roundtrip(t, x, 256)) EXPECT_EQ(v, -0.375f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ember
