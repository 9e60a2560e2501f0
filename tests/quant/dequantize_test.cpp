// Dequantization must equal gguf-py's gguf.quants.dequantize bit for bit
// (fixtures: real model blocks, llama.cpp-quantized blocks and random valid
// blocks per type; see tools/gen_quant_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quantize.h"
#include "quant_fixtures.h"

namespace ember {
namespace {

using testing::DequantCase;

class DequantizeFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(DequantizeFixture, BitExactWithGgufPy) {
  DequantCase c;
  const std::string err = testing::load_dequant_case(GetParam(), &c);
  ASSERT_EQ(err, "");
  ASSERT_TRUE(can_dequantize(c.type));
  const int64_t n = static_cast<int64_t>(c.expected.size());
  const int64_t bs = dtype_block_size(c.type);
  ASSERT_EQ(n % bs, 0);
  ASSERT_EQ(dtype_row_size(c.type, n), c.bytes.size());

  std::vector<float> got(static_cast<size_t>(n), -12345.0f);
  dequantize_row_ref(c.type, c.bytes.data(), got.data(), n);
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = c.expected[static_cast<size_t>(i)], g = got[static_cast<size_t>(i)];
    if (std::isnan(e) && std::isnan(g)) continue;
    uint32_t eb, gb;
    std::memcpy(&eb, &e, 4);
    std::memcpy(&gb, &g, 4);
    if (eb != gb && ++mismatches <= 5)
      ADD_FAILURE() << GetParam() << " element " << i << " (block " << i / bs << "): got " << g
                    << " expected " << e;
  }
  EXPECT_EQ(mismatches, 0);

  // Block-by-block calls give the same output as one call over the row.
  std::vector<float> per_block(static_cast<size_t>(n));
  const size_t block_bytes = dtype_type_size(c.type);
  for (int64_t b = 0; b < n / bs; ++b)
    dequantize_row_ref(c.type, c.bytes.data() + b * block_bytes, per_block.data() + b * bs, bs);
  EXPECT_EQ(std::memcmp(per_block.data(), got.data(), got.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantizeFixture, ::testing::ValuesIn(testing::quant_type_names()),
                         [](const auto& info) { return info.param; });

TEST(Dequantize, F32IsACopy) {
  const float src[4] = {1.5f, -0.0f, 3e38f, -7.25f};
  float dst[4] = {};
  ASSERT_TRUE(can_dequantize(DType::kF32));
  dequantize_row_ref(DType::kF32, src, dst, 4);
  EXPECT_EQ(std::memcmp(src, dst, sizeof(src)), 0);
}

TEST(Dequantize, UnsupportedTypesAreRejected) {
  EXPECT_FALSE(can_dequantize(DType::kI8));
  EXPECT_FALSE(can_dequantize(DType::kI32));
  EXPECT_FALSE(can_dequantize(DType::kF64));
  EXPECT_FALSE(can_dequantize(static_cast<DType>(999)));
  float dst[2] = {0.0f, 0.0f};
  const int8_t src[2] = {1, 2};
  dequantize_row_ref(DType::kI8, src, dst, 2);  // no crash; poisoned output
  EXPECT_TRUE(std::isnan(dst[0]) && std::isnan(dst[1]));
}

// Hand-checked values independent of any fixture.
TEST(Dequantize, Q8_0KnownBlock) {
  uint8_t block[34] = {};
  const uint16_t d = 0x3800;  // 0.5
  std::memcpy(block, &d, 2);
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float out[32];
  dequantize_row_q8_0_ref(block, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * static_cast<float>(j - 16));
}

TEST(Dequantize, Q4_0KnownBlock) {
  uint8_t block[18] = {};
  const uint16_t d = 0x4000;  // 2.0
  std::memcpy(block, &d, 2);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float out[32];
  dequantize_row_q4_0_ref(block, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * static_cast<float>(j - 8));
    EXPECT_EQ(out[j + 16], 2.0f * static_cast<float>(7 - j));
  }
}

}  // namespace
}  // namespace ember
