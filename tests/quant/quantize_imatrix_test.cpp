// Importance-weighted quantizers (quant/quantize_imatrix.h): byte-exact with
// llama.cpp's ggml_quantize_chunk given the same importance vector (fixture
// tests/data/quant/imatrix_quant.bin from tools/gen_imatrix_quant_fixture.sh,
// made with llama.cpp's libggml-base), and lower importance-weighted error
// than round-to-nearest in every type, Q8_0 included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"
#include "quant_fixtures.h"

namespace ember {
namespace {

struct ImatrixFixture {
  uint32_t n_rows = 0, n_per_row = 0;
  std::vector<float> src, qw;
  std::vector<std::pair<DType, std::vector<uint8_t>>> cases;
};

std::string load_fixture(ImatrixFixture* fx) {
  std::vector<uint8_t> raw;
  const std::string path = testing::quant_fixture_path("imatrix_quant.bin");
  if (!testing::read_file(path, &raw)) return "cannot read " + path;
  if (raw.size() < 20 || std::memcmp(raw.data(), "EMBIMQ01", 8) != 0) return "bad header in " + path;
  fx->n_rows = testing::read_u32(&raw[8]);
  fx->n_per_row = testing::read_u32(&raw[12]);
  const uint32_t n_types = testing::read_u32(&raw[16]);
  size_t p = 20;
  const size_t n = static_cast<size_t>(fx->n_rows) * fx->n_per_row;
  if (raw.size() < p + 4 * (n + fx->n_per_row)) return "truncated " + path;
  fx->src.resize(n);
  std::memcpy(fx->src.data(), &raw[p], 4 * n);
  p += 4 * n;
  fx->qw.resize(fx->n_per_row);
  std::memcpy(fx->qw.data(), &raw[p], 4 * fx->n_per_row);
  p += 4 * fx->n_per_row;
  for (uint32_t k = 0; k < n_types; ++k) {
    if (raw.size() < p + 8) return "truncated " + path;
    const DType t = static_cast<DType>(testing::read_u32(&raw[p]));
    const uint32_t nbytes = testing::read_u32(&raw[p + 4]);
    p += 8;
    if (raw.size() < p + nbytes) return "truncated " + path;
    fx->cases.emplace_back(t, std::vector<uint8_t>(raw.begin() + p, raw.begin() + p + nbytes));
    p += nbytes;
  }
  return p == raw.size() ? "" : "trailing bytes in " + path;
}

TEST(QuantizeImatrix, BitExactWithLlamaCppImatrixQuantization) {
  ImatrixFixture fx;
  ASSERT_EQ(load_fixture(&fx), "");
  ASSERT_EQ(fx.cases.size(), 9u);
  for (const auto& [t, want] : fx.cases) {
    SCOPED_TRACE(dtype_name(t));
    ASSERT_TRUE(can_quantize_imatrix(t));
    ASSERT_EQ(want.size(), dtype_row_size(t, fx.n_per_row) * fx.n_rows);
    std::vector<uint8_t> got(want.size(), 0xA5);
    ASSERT_TRUE(quantize_rows_imatrix(t, fx.src.data(), got.data(), fx.n_rows, fx.n_per_row, fx.qw.data()));
    size_t first_diff = want.size();
    for (size_t i = 0; i < want.size() && first_diff == want.size(); ++i)
      if (got[i] != want[i]) first_diff = i;
    EXPECT_EQ(first_diff, want.size()) << "first differing byte";
    // And it differs from round-to-nearest: the importance is used.
    std::vector<uint8_t> rtn(want.size());
    ASSERT_TRUE(quantize_rows(t, fx.src.data(), rtn.data(), fx.n_rows, fx.n_per_row));
    EXPECT_NE(rtn, want);
  }
}

double weighted_error(DType t, const std::vector<float>& x, const std::vector<uint8_t>& q, int64_t n_rows,
                      int64_t n_per_row, const std::vector<float>& w) {
  std::vector<float> y(n_per_row);
  const size_t row = dtype_row_size(t, n_per_row);
  double e = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row_ref(t, q.data() + r * row, y.data(), n_per_row);
    for (int64_t i = 0; i < n_per_row; ++i) {
      const double d = static_cast<double>(x[r * n_per_row + i]) - y[i];
      e += w[i] * d * d;
    }
  }
  return e;
}

TEST(QuantizeImatrix, LowerWeightedErrorThanRoundToNearest) {
  constexpr int64_t kRows = 32, kPerRow = 512;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(kRows * kPerRow), w(kPerRow);
  for (float& v : x) v = 0.05f * g(rng);
  for (float& v : w) v = std::exp(2.0f * g(rng));  // a few channels dominate, as in real activations
  for (DType t : {DType::kQ8_0, DType::kQ6_K, DType::kQ5_K, DType::kQ5_0, DType::kQ4_K, DType::kQ4_0, DType::kQ3_K,
                  DType::kQ2_K, DType::kQ4_1, DType::kQ5_1}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t bytes = dtype_row_size(t, kPerRow) * kRows;
    std::vector<uint8_t> qi(bytes), qr(bytes);
    ASSERT_TRUE(quantize_rows_imatrix(t, x.data(), qi.data(), kRows, kPerRow, w.data()));
    ASSERT_TRUE(quantize_rows(t, x.data(), qr.data(), kRows, kPerRow));
    const double ei = weighted_error(t, x, qi, kRows, kPerRow, w);
    const double er = weighted_error(t, x, qr, kRows, kPerRow, w);
    EXPECT_LT(ei, 0.9 * er) << "imatrix " << ei << " vs rtn " << er;
  }
}

TEST(QuantizeImatrix, RejectsBadInput) {
  std::vector<float> x(48), w(48, 1.0f);
  std::vector<uint8_t> out(64);
  EXPECT_FALSE(quantize_rows_imatrix(DType::kQ4_0, x.data(), out.data(), 1, 48, w.data()));
  EXPECT_FALSE(quantize_rows_imatrix(DType::kF16, x.data(), out.data(), 1, 32, w.data()));
  EXPECT_FALSE(can_quantize_imatrix(DType::kQ8_K));
}

}  // namespace
}  // namespace ember
