// The round-to-nearest quantizers must produce exactly the bytes of llama.cpp's
// quantize_row_*_ref (fixtures from libggml-base via
// tools/gen_quant_fixtures.py). The input rows include all-zero, constant,
// huge, tiny, one-outlier, tie-heavy, sparse and real-weight rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "quant/quantize.h"
#include "quant_fixtures.h"

namespace ember {
namespace {

const testing::QuantInput& input() {
  static testing::QuantInput in;
  static std::string err = testing::load_quant_input(&in);
  EXPECT_EQ(err, "");
  return in;
}

class QuantizeFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizeFixture, BitExactWithLlamaCpp) {
  const testing::QuantInput& in = input();
  ASSERT_GT(in.nrows, 0u);
  testing::QuantExpected want;
  ASSERT_EQ(testing::load_quant_expected(GetParam(), &want), "");
  ASSERT_EQ(want.nrows, in.nrows);
  ASSERT_EQ(want.n_per_row, in.n_per_row);
  ASSERT_TRUE(can_quantize(want.type));
  const size_t row_size = dtype_row_size(want.type, in.n_per_row);
  ASSERT_EQ(want.bytes.size(), row_size * in.nrows);

  // Poison the output so untouched bytes cannot pass by accident.
  std::vector<uint8_t> got(want.bytes.size(), 0xA5);
  ASSERT_TRUE(quantize_rows(want.type, in.data.data(), got.data(), in.nrows, in.n_per_row).is_ok());
  const size_t block = dtype_type_size(want.type);
  const int64_t per_block = dtype_block_size(want.type);
  int bad_blocks = 0;
  for (size_t off = 0; off < got.size(); off += block) {
    if (std::memcmp(&got[off], &want.bytes[off], block) == 0) continue;
    if (++bad_blocks <= 5) {
      size_t first = off;
      while (got[first] == want.bytes[first]) ++first;
      ADD_FAILURE() << GetParam() << ": row " << off / row_size << " block " << (off % row_size) / block
                    << " (elements from " << (off / block) * per_block << ") differs first at byte "
                    << first - off << ": got " << int(got[first]) << " want " << int(want.bytes[first]);
    }
  }
  EXPECT_EQ(bad_blocks, 0);

  // One call over the whole buffer (the row functions are block-wise).
  std::vector<uint8_t> whole(want.bytes.size(), 0x5A);
  quantize_row_ref(want.type, in.data.data(), whole.data(), static_cast<int64_t>(in.data.size()));
  EXPECT_EQ(whole, want.bytes);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantizeFixture, ::testing::ValuesIn(testing::quantized_type_names()),
                         [](const auto& info) { return info.param; });

// ---- stress check: 512 generated rows, compared by hash with llama.cpp.

constexpr int kStressRows = 512;
constexpr int kStressCols = 256;

// Mirror of stress_input() in tools/gen_quant_fixtures.py (bit-identical).
std::vector<float> stress_input() {
  const size_t n = static_cast<size_t>(kStressRows) * kStressCols;
  std::vector<float> x(n);
  uint32_t state = 0x9E3779B9u;
  auto uniform = [&]() {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) * 0x1p-23f - 1.0f;
  };
  for (size_t i = 0; i < n; ++i) {
    const float a = uniform(), b = uniform(), c = uniform();
    x[i] = (a + b) + c;
  }
  for (int r = 0; r < kStressRows; ++r) {
    const float scale = std::ldexp(1.0f, (r % 23) - 12);
    for (int j = 0; j < kStressCols; ++j) x[static_cast<size_t>(r) * kStressCols + j] *= scale;
    if (r % 5 == 0) x[static_cast<size_t>(r) * kStressCols + (r * 37) % kStressCols] = 6.0f * scale;
  }
  for (int r = 3; r < kStressRows; r += 11)
    for (int j = 0; j < kStressCols; ++j) {
      float& v = x[static_cast<size_t>(r) * kStressCols + j];
      v = std::fabs(v);
    }
  return x;
}

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::map<std::string, uint64_t> load_stress_hashes() {
  std::map<std::string, uint64_t> out;
  std::ifstream f(testing::quant_fixture_path("quant_stress_hashes.txt"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string key;
    ss >> key;
    if (key == "rows") {
      std::string w;
      uint64_t v = 0;
      while (ss >> w) {
        if (w == "input" && (ss >> std::hex >> v)) out["input"] = v;
      }
    } else {
      uint64_t v = 0;
      if (ss >> std::hex >> v) out[key] = v;
    }
  }
  return out;
}

TEST(Quantize, StressRowsMatchLlamaCppHashes) {
  const std::map<std::string, uint64_t> want = load_stress_hashes();
  ASSERT_EQ(want.count("input"), 1u) << "missing/corrupt quant_stress_hashes.txt";
  const std::vector<float> x = stress_input();
  ASSERT_EQ(fnv1a64(x.data(), x.size() * 4), want.at("input")) << "input generator out of sync with the script";
  for (const std::string& name : testing::quant_type_names()) {
    ASSERT_EQ(want.count(name), 1u) << name;
    DType t;
    ASSERT_TRUE(dtype_from_name(name, &t));
    std::vector<uint8_t> q(dtype_row_size(t, kStressCols) * kStressRows, 0xA5);
    ASSERT_TRUE(quantize_rows(t, x.data(), q.data(), kStressRows, kStressCols).is_ok());
    EXPECT_EQ(fnv1a64(q.data(), q.size()), want.at(name)) << name << " differs from llama.cpp";
  }
}

// The per-type entry points and the dispatcher agree.
TEST(Quantize, PerTypeFunctionsMatchDispatcher) {
  const testing::QuantInput& in = input();
  ASSERT_GE(in.data.size(), 256u);
  struct Entry {
    DType t;
    void (*fn)(const float*, void*, int64_t);
  };
  const Entry entries[] = {
      {DType::kQ4_0, quantize_row_q4_0_ref}, {DType::kQ4_1, quantize_row_q4_1_ref},
      {DType::kQ5_0, quantize_row_q5_0_ref}, {DType::kQ5_1, quantize_row_q5_1_ref},
      {DType::kQ8_0, quantize_row_q8_0_ref}, {DType::kQ8_1, quantize_row_q8_1_ref},
      {DType::kQ2_K, quantize_row_q2_K_ref}, {DType::kQ3_K, quantize_row_q3_K_ref},
      {DType::kQ4_K, quantize_row_q4_K_ref}, {DType::kQ5_K, quantize_row_q5_K_ref},
      {DType::kQ6_K, quantize_row_q6_K_ref}, {DType::kQ8_K, quantize_row_q8_K_ref},
      {DType::kF16, quantize_row_f16_ref},   {DType::kBF16, quantize_row_bf16_ref},
  };
  for (const Entry& e : entries) {
    const size_t sz = dtype_row_size(e.t, 256);
    std::vector<uint8_t> a(sz, 1), b(sz, 2);
    e.fn(in.data.data() + 3 * 256, a.data(), 256);
    quantize_row_ref(e.t, in.data.data() + 3 * 256, b.data(), 256);
    EXPECT_EQ(a, b) << dtype_name(e.t);
  }
}

TEST(Quantize, F32IsACopy) {
  const float src[3] = {1.0f, -2.5f, 1e-30f};
  float dst[3] = {};
  ASSERT_TRUE(quantize_rows(DType::kF32, src, dst, 1, 3).is_ok());
  EXPECT_EQ(std::memcmp(src, dst, sizeof(src)), 0);
}

TEST(Quantize, RowsValidateArguments) {
  std::vector<float> src(512, 1.0f);
  std::vector<uint8_t> dst(4096);
  EXPECT_FALSE(quantize_rows(DType::kQ4_K, src.data(), dst.data(), 1, 100).is_ok());  // not a multiple of 256
  EXPECT_FALSE(quantize_rows(DType::kQ4_0, src.data(), dst.data(), 1, 33).is_ok());
  EXPECT_FALSE(quantize_rows(DType::kQ4_0, src.data(), dst.data(), 1, 0).is_ok());
  EXPECT_FALSE(quantize_rows(DType::kQ4_0, src.data(), dst.data(), -1, 32).is_ok());
  EXPECT_FALSE(quantize_rows(DType::kQ4_0, nullptr, dst.data(), 1, 32).is_ok());
  EXPECT_FALSE(quantize_rows(DType::kI32, src.data(), dst.data(), 1, 32).is_ok());
  EXPECT_FALSE(quantize_rows(static_cast<DType>(77), src.data(), dst.data(), 1, 32).is_ok());
  const Status st = quantize_rows(DType::kQ4_K, src.data(), dst.data(), 1, 100);
  EXPECT_NE(st.message().find("q4_K"), std::string::npos) << st.message();
  EXPECT_TRUE(quantize_rows(DType::kQ4_0, src.data(), dst.data(), 0, 32).is_ok());  // nothing to do
  EXPECT_TRUE(quantize_rows(DType::kQ4_0, src.data(), dst.data(), 2, 256).is_ok());
}

TEST(Quantize, CapabilityQueries) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ8_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    EXPECT_TRUE(can_quantize(t)) << dtype_name(t);
    EXPECT_TRUE(can_dequantize(t)) << dtype_name(t);
  }
  EXPECT_FALSE(can_quantize(DType::kI16));
  EXPECT_FALSE(can_quantize(DType::kI64));
}

// Q8_K invariants the k-quant dot products rely on.
TEST(Quantize, Q8_KBsumsAreGroupSums) {
  const testing::QuantInput& in = input();
  std::vector<uint8_t> buf(dtype_row_size(DType::kQ8_K, in.n_per_row) * in.nrows);
  ASSERT_TRUE(quantize_rows(DType::kQ8_K, in.data.data(), buf.data(), in.nrows, in.n_per_row).is_ok());
  const size_t nblocks = buf.size() / 292;
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = buf.data() + b * 292;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int e = 0; e < 16; ++e) sum += static_cast<int8_t>(blk[4 + 16 * g + e]);
      int16_t bs;
      std::memcpy(&bs, blk + 260 + 2 * g, 2);
      EXPECT_EQ(bs, sum) << "block " << b << " group " << g;
    }
  }
}

}  // namespace
}  // namespace ember
