// The row-lane Q4_K, Q5_K and Q6_K kernels of the AVX2 and AVX-512 levels
// (kernels/cpu/avx2/kquants_lanes.cpp: 8-row groups; avx512/kquants_lanes.cpp:
// 16-row groups) against their scalar twins
// (kernels/ref/kquants_lanes.h), bit for bit:
// vec_dot, decode over any row count (partial row groups), tiles of every
// shape up to the level's rows x 70 tokens (partial token groups), the
// extremes of the integer sums (largest quants and scales, activations
// +-127), and the matmul driver at several thread counts and
// token counts (more tokens than one tile call takes), and the AVX-512 token
// lanes (a few tokens x any rows, activations packed once). The twin itself must
// agree with the plain reference dot product within rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/ref/kquants_lanes.h"
#include "kernels/registry.h"
#include "kernels/test_weights.h"
#include "quant/blocks.h"

namespace ember {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

class KQuantLanes : public ::testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  void SetUp() override {
    if (cpu_max_isa() < isa()) GTEST_SKIP() << "CPU lacks " << isa_name(isa());
  }
  DType t() const { return std::get<0>(GetParam()); }
  Isa isa() const { return std::get<1>(GetParam()); }
  const KernelSet& k() const { return kernels(t(), isa()); }
  int tile_rows() const { return k().tile_rows; }
  float twin(int64_t n, const uint8_t* w, const BlockQ8_K* x) const {
    float s;
    if (t() == DType::kQ4_K) ref::q4_K_lanes_dot(n, &s, w, x);
    else if (t() == DType::kQ5_K) ref::q5_K_lanes_dot(n, &s, w, x);
    else ref::q6_K_lanes_dot(n, &s, w, x);
    return s;
  }
  // s (cols x lds, filled with -7 before the call) holds the twin's bits
  // at [c * lds + r] for r < nr, c < nc, and -7 everywhere else.
  ::testing::AssertionResult outputs_match(const std::vector<float>& s, int64_t lds, int64_t nr, int nc, int64_t n,
                                           const uint8_t* w, const BlockQ8_K* x) const {
    const size_t rb = dtype_row_size(t(), n);
    const int64_t xb = n / kQK_K;
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i) / lds, r = static_cast<int64_t>(i) % lds;
      const float got = s[i];
      if (c >= nc || r >= nr) {
        if (got != -7.0f) return ::testing::AssertionFailure() << "wrote outside: r=" << r << " c=" << c;
        continue;
      }
      const float want = twin(n, w + rb * r, x + xb * c);
      if (!same_bits(got, want))
        return ::testing::AssertionFailure() << "r=" << r << " c=" << c << ": " << got << " vs " << want;
    }
    return ::testing::AssertionSuccess();
  }
};

INSTANTIATE_TEST_SUITE_P(Types, KQuantLanes,
                         ::testing::Combine(::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                                            ::testing::Values(Isa::kAvx2, Isa::kAvx512)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, Isa>>& i) {
                           return std::string(dtype_name(std::get<0>(i.param))) + "_" +
                                  isa_name(std::get<1>(i.param));
                         });

// Both levels' lane kernels are registered for these types (the vec_dot,
// tile and decode of one arithmetic).
TEST_P(KQuantLanes, LaneKernelsAreRegistered) {
  EXPECT_NE(k().vec_dot_rows, nullptr);
  EXPECT_NE(k().vec_dot_tile, nullptr);
  EXPECT_EQ(tile_rows(), isa() == Isa::kAvx2 ? 8 : 16);
  EXPECT_NE(k().vec_dot, kernels(t(), Isa::kScalar).vec_dot);
  // The token-lane form exists at AVX-512 (AVX2 batched decode uses the tile).
  if (isa() == Isa::kAvx512) {
    EXPECT_NE(k().vec_dot_tokens, nullptr);
    EXPECT_NE(k().pack_tokens, nullptr);
    EXPECT_GE(k().tokens_max, 16);
  }
}

// Activation rows [tokens, n] quantized to Q8_K by the level's quantizer.
std::vector<BlockQ8_K> make_x(int64_t tokens, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n));
  std::vector<BlockQ8_K> x(static_cast<size_t>(tokens * n / kQK_K));
  for (int64_t t = 0; t < tokens; ++t) {
    const float mag = t % 11 == 3 ? 0.0f : std::ldexp(1.0f, static_cast<int>(t % 9) - 4);
    for (auto& v : f) v = gauss(rng) * mag;
    kernels(DType::kQ8_K, Isa::kAvx2).quantize_row(f.data(), &x[static_cast<size_t>(t * n / kQK_K)], n);
  }
  return x;
}

TEST_P(KQuantLanes, TwinIsADotProduct) {
  constexpr int64_t kRows = 9, n = 1024;
  const std::vector<uint8_t> w = make_weights(t(), kRows, n, 3);
  const std::vector<BlockQ8_K> x = make_x(1, n, 4);
  const size_t rb = dtype_row_size(t(), n);
  for (int64_t r = 0; r < kRows; ++r) {
    float want, abs_scale = 0.0f;
    kernels(t(), Isa::kScalar).vec_dot(n, &want, w.data() + rb * r, x.data());
    std::vector<float> wf(n);
    kernels(t(), Isa::kScalar).dequantize_row(w.data() + rb * r, wf.data(), n);
    for (int64_t i = 0; i < n; ++i)
      abs_scale += std::fabs(wf[i] * x[i / kQK_K].d * x[i / kQK_K].qs[i % kQK_K]);
    EXPECT_NEAR(twin(n, w.data() + rb * r, x.data()), want, 1e-5f * abs_scale + 1e-30f) << "row " << r;
  }
}

TEST_P(KQuantLanes, VecDotAndRowsMatchTwin) {
  for (int64_t n : {256, 768, 3072}) {
    for (int64_t rows : {1, 5, 16, 17, 37}) {
      const std::vector<uint8_t> w = make_weights(t(), rows, n, static_cast<uint32_t>(n + rows));
      const std::vector<BlockQ8_K> x = make_x(1, n, 5);
      const size_t rb = dtype_row_size(t(), n);
      std::vector<float> got(static_cast<size_t>(rows) + 1, -7.0f);
      k().vec_dot_rows(n, got.data(), w.data(), rb, x.data(), rows);
      EXPECT_EQ(got[static_cast<size_t>(rows)], -7.0f) << "wrote past the rows";
      for (int64_t r = 0; r < rows; ++r) {
        const float want = twin(n, w.data() + rb * r, x.data());
        float one;
        k().vec_dot(n, &one, w.data() + rb * r, x.data());
        ASSERT_TRUE(same_bits(one, want)) << "vec_dot n=" << n << " r=" << r << ": " << one << " vs " << want;
        ASSERT_TRUE(same_bits(got[r], want)) << "rows n=" << n << " nr=" << rows << " r=" << r;
      }
    }
  }
}

TEST_P(KQuantLanes, TilesMatchTwin) {
  constexpr int64_t kRows = 16, kTokens = 70;
  ASSERT_LE(tile_rows(), kRows);
  for (int64_t n : {256, 1280}) {
    const std::vector<uint8_t> w = make_weights(t(), kRows, n, static_cast<uint32_t>(n));
    const std::vector<BlockQ8_K> x = make_x(kTokens, n, 6);
    const size_t rb = dtype_row_size(t(), n), xrb = dtype_row_size(DType::kQ8_K, n);
    for (int nr : {1, 3, 7, 8, 15, 16}) {
      if (nr > tile_rows()) continue;
      for (int nc : {2, 3, 4, 5, 9, 70}) {
        const int64_t lds = kRows + 3;
        std::vector<float> s(static_cast<size_t>(lds * kTokens), -7.0f);
        k().vec_dot_tile(n, s.data(), lds, w.data(), rb, x.data(), xrb, nr, nc);
        ASSERT_TRUE(outputs_match(s, lds, nr, nc, n, w.data(), x.data())) << "n=" << n << " nr=" << nr << " nc=" << nc;
      }
    }
  }
}

// Token lanes: activations packed (in two block ranges, as two threads
// would), then any row count x 1 .. tokens_max tokens, against the twin bit
// for bit, nothing written outside the outputs.
TEST_P(KQuantLanes, TokensMatchTwin) {
  if (!k().vec_dot_tokens) GTEST_SKIP() << "no token lanes at " << isa_name(isa());
  const int kmax = k().tokens_max;
  for (int64_t n : {256, 1280, 3072}) {
    const int64_t xb = n / kQK_K;
    const std::vector<BlockQ8_K> x = make_x(kmax, n, static_cast<uint32_t>(7 + n));
    const size_t rb = dtype_row_size(t(), n), xrb = dtype_row_size(DType::kQ8_K, n);
    for (int64_t nr : {1, 3, 16, 17, 37, 70}) {
      const std::vector<uint8_t> w = make_weights(t(), nr, n, static_cast<uint32_t>(n * 3 + nr));
      for (int nc : {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, kmax}) {
        if (nc > kmax) continue;
        std::vector<uint8_t> pk(k().tokens_pack_bytes(n, nc) + 64);
        uint8_t* packed = pk.data() + (64 - reinterpret_cast<uintptr_t>(pk.data()) % 64) % 64;
        k().pack_tokens(n, x.data(), xrb, nc, packed, 0, xb / 2);
        k().pack_tokens(n, x.data(), xrb, nc, packed, xb / 2, xb);
        const int64_t lds = nr + 3;
        std::vector<float> s(static_cast<size_t>(lds * (kmax + 1)), -7.0f);
        k().vec_dot_tokens(n, s.data(), lds, w.data(), rb, packed, nr, nc);
        ASSERT_TRUE(outputs_match(s, lds, nr, nc, n, w.data(), x.data())) << "n=" << n << " nr=" << nr << " nc=" << nc;
      }
    }
  }
}

// The few-token decode form: any row count x 1 .. few_max tokens, bit for
// bit against the twin, nothing written outside the outputs.
TEST_P(KQuantLanes, FewMatchTwin) {
  if (!k().vec_dot_few) GTEST_SKIP() << "no few-token kernel at " << isa_name(isa());
  const int kmax = k().few_max;
  for (int64_t n : {256, 1280}) {
    const std::vector<BlockQ8_K> x = make_x(kmax, n, static_cast<uint32_t>(17 + n));
    const size_t rb = dtype_row_size(t(), n), xrb = dtype_row_size(DType::kQ8_K, n);
    for (int64_t nr : {1, 5, 16, 17, 37}) {
      const std::vector<uint8_t> w = make_weights(t(), nr, n, static_cast<uint32_t>(n * 5 + nr));
      for (int nc = 1; nc <= kmax; ++nc) {
        const int64_t lds = nr + 3;
        std::vector<float> s(static_cast<size_t>(lds * (kmax + 1)), -7.0f);
        k().vec_dot_few(n, s.data(), lds, w.data(), rb, x.data(), xrb, nr, nc);
        ASSERT_TRUE(outputs_match(s, lds, nr, nc, n, w.data(), x.data())) << "n=" << n << " nr=" << nr << " nc=" << nc;
      }
    }
  }
}

// The largest integer sums: Q4_K nibbles 15 (Q5_K quants 31) with scales and mins 63, Q6_K
// quants -32 or 31 with scales -128 or 127, activations +-127 (sums near
// 2^25 and 2^27: float(sumi) rounds, identically everywhere).
TEST_P(KQuantLanes, ExtremeSumsMatchTwin) {
  constexpr int64_t n = 512, kRows = 17, kTokens = 6;
  const size_t rb = dtype_row_size(t(), n);
  const std::vector<uint8_t> w = extreme_weights(t(), kRows, n, 11);
  std::vector<BlockQ8_K> x(static_cast<size_t>(kTokens * n / kQK_K));
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      BlockQ8_K& xb = x[static_cast<size_t>(t * n / kQK_K + i)];
      xb.d = 0.5f + static_cast<float>(t);
      for (int e = 0; e < kQK_K; ++e) xb.qs[e] = static_cast<int8_t>(t % 2 ? (e % 3 ? 127 : -127) : 127);
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int e = 16 * g; e < 16 * g + 16; ++e) sum += xb.qs[e];
        xb.bsums[g] = static_cast<int16_t>(sum);
      }
    }
  const size_t xrb = dtype_row_size(DType::kQ8_K, n);
  std::vector<float> rows(kRows);
  k().vec_dot_rows(n, rows.data(), w.data(), rb, x.data(), kRows);
  const int tr = tile_rows();
  std::vector<float> tile(static_cast<size_t>(tr * kTokens));
  k().vec_dot_tile(n, tile.data(), tr, w.data(), rb, x.data(), xrb, tr, kTokens);
  if (k().vec_dot_few && kTokens <= k().few_max) {
    std::vector<float> few(static_cast<size_t>(kRows * kTokens));
    k().vec_dot_few(n, few.data(), kRows, w.data(), rb, x.data(), xrb, kRows, kTokens);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kTokens; ++c)
        ASSERT_TRUE(same_bits(few[c * kRows + r], twin(n, w.data() + rb * r, x.data() + c * n / kQK_K)))
            << "few r=" << r << " c=" << c;
  }
  std::vector<float> tok(static_cast<size_t>(kRows * kTokens));
  if (k().vec_dot_tokens) {
    std::vector<uint8_t> pk(k().tokens_pack_bytes(n, kTokens) + 64);
    uint8_t* packed = pk.data() + (64 - reinterpret_cast<uintptr_t>(pk.data()) % 64) % 64;
    k().pack_tokens(n, x.data(), xrb, kTokens, packed, 0, n / kQK_K);
    k().vec_dot_tokens(n, tok.data(), kRows, w.data(), rb, packed, kRows, kTokens);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kTokens; ++c)
        ASSERT_TRUE(same_bits(tok[c * kRows + r], twin(n, w.data() + rb * r, x.data() + c * n / kQK_K)))
            << "tokens r=" << r << " c=" << c;
  }
  for (int64_t r = 0; r < kRows; ++r) {
    ASSERT_TRUE(same_bits(rows[r], twin(n, w.data() + rb * r, x.data()))) << "rows r=" << r;
    for (int64_t c = 0; r < tr && c < kTokens; ++c)
      ASSERT_TRUE(same_bits(tile[c * tr + r], twin(n, w.data() + rb * r, x.data() + c * n / kQK_K)))
          << "tile r=" << r << " c=" << c;
  }
}

// The driver at the level: any token count (1: decode rows; 2 .. 8: the
// few-token decode form and 12 .. 16: token lanes at AVX-512; 300: more than
// one tile call's tokens) and thread count gives the twin's bits.
TEST_P(KQuantLanes, MatmulMatchesTwin) {
  constexpr int64_t kRows = 150, n = 512;  // several row tasks on 2 threads
  const Isa saved = active_isa();
  set_active_isa(isa());
  const std::vector<uint8_t> wb = make_weights(t(), kRows, n, 21);
  const TensorView w = matrix_view(t(), kRows, n, wb);
  const size_t rb = dtype_row_size(t(), n);
  ThreadPool pool1(1), pool2(2);
  MatmulScratch scratch;
  for (int64_t tokens : {1, 2, 5, 8, 9, 11, 12, 16, 17, 33, 300}) {
    std::mt19937 rng(static_cast<uint32_t>(tokens));
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> xf(static_cast<size_t>(tokens * n));
    for (auto& v : xf) v = gauss(rng);
    std::vector<BlockQ8_K> xq(static_cast<size_t>(tokens * n / kQK_K));
    for (int64_t t = 0; t < tokens; ++t)
      kernels(DType::kQ8_K).quantize_row(xf.data() + t * n, &xq[static_cast<size_t>(t * n / kQK_K)], n);
    for (ThreadPool* pool : {&pool1, &pool2}) {
      std::vector<float> y(static_cast<size_t>(tokens * kRows));
      matmul(w, xf.data(), n, y.data(), kRows, tokens, *pool, scratch);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < kRows; ++r)
          ASSERT_TRUE(same_bits(y[static_cast<size_t>(t * kRows + r)],
                                twin(n, wb.data() + rb * r, &xq[static_cast<size_t>(t * n / kQK_K)])))
              << "tokens=" << tokens << " threads=" << pool->size() << " t=" << t << " r=" << r;
    }
  }
  set_active_isa(saved);
}

}  // namespace
}  // namespace ember
