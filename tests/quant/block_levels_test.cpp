// Block levels (quant/block_levels.h): for every type, the affine form
// a * L + b of the unpacked levels reproduces the reference dequantizer,
// and packing the unpacked levels back gives the same bytes; packing new
// levels changes only the level bits.
#include "quant/block_levels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/quantize.h"

namespace ember {
namespace {

TEST(BlockLevels, AffineFormMatchesDequantizationAndPackingRoundTrips) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(t));
    ASSERT_TRUE(has_block_levels(t));
    const int64_t G = dtype_block_size(t), nb = 4;
    const size_t bb = dtype_row_size(t, G);
    std::vector<float> x(G * nb), y(G * nb), a(G), b(G);
    for (float& v : x) v = 0.1f * g(rng) + (t == DType::kQ4_1 ? 0.05f : 0.0f);
    std::vector<uint8_t> q(bb * nb);
    quantize_row_ref(t, x.data(), q.data(), G * nb);
    dequantize_row_ref(t, q.data(), y.data(), G * nb);
    int lo, hi;
    block_level_range(t, &lo, &hi);
    std::vector<int> L(G), L2(G);
    for (int64_t k = 0; k < nb; ++k) {
      uint8_t* blk = q.data() + k * bb;
      unpack_levels(t, blk, L.data());
      block_affine(t, blk, a.data(), b.data());
      for (int64_t e = 0; e < G; ++e) {
        ASSERT_GE(L[e], lo);
        ASSERT_LE(L[e], hi);
        const float v = a[e] * static_cast<float>(L[e]) + b[e];
        ASSERT_NEAR(v, y[k * G + e], 1e-6f * (1 + std::fabs(y[k * G + e]))) << "block " << k << " element " << e;
      }
      std::vector<uint8_t> copy(blk, blk + bb);
      pack_levels(t, L.data(), copy.data());
      ASSERT_EQ(std::vector<uint8_t>(blk, blk + bb), copy);
      // New levels: they read back, and the scales (the affine form) stay.
      for (int64_t e = 0; e < G; ++e) L2[e] = lo + static_cast<int>((e * 7 + k) % (hi - lo + 1));
      pack_levels(t, L2.data(), copy.data());
      std::vector<int> back(G);
      unpack_levels(t, copy.data(), back.data());
      EXPECT_EQ(back, L2);
      std::vector<float> a2(G), b2(G);
      block_affine(t, copy.data(), a2.data(), b2.data());
      EXPECT_EQ(a2, a);
      EXPECT_EQ(b2, b);
    }
  }
  EXPECT_FALSE(has_block_levels(DType::kF16));
}

}  // namespace
}  // namespace ember
