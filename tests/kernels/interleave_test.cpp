// The interleaved Q4_K_R16 / Q6_K_R16 layouts (kernels/interleave.h): the
// byte layout as documented (spot checks written from the header, not from
// the code), exact round trips, and the matmul driver over an interleaved
// matrix against the same matrix in its base type, bit for bit, at every ISA
// level the CPU has (native AVX-512 kernels; de-interleaving ones below), for
// decode, tiles and every token-count path, on random and extreme blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/interleave.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/registry.h"
#include "kernels/test_weights.h"
#include "quant/blocks.h"

namespace ember {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(Interleave, TypesAreInMemoryOnly) {
  EXPECT_EQ(interleaved_type(DType::kQ4_K), DType::kQ4_K_R16);
  EXPECT_EQ(interleaved_type(DType::kQ6_K), DType::kQ6_K_R16);
  EXPECT_EQ(interleaved_type(DType::kQ4_0), DType::kQ4_0_R16);
  EXPECT_EQ(interleaved_type(DType::kQ8_0), DType::kQ8_0_R16);
  EXPECT_EQ(interleaved_type(DType::kQ5_0), DType::kQ5_0_R16);
  EXPECT_EQ(vec_dot_type(DType::kQ5_0_R16), DType::kQ8_0);
  EXPECT_EQ(dtype_row_size(DType::kQ5_0_R16, 640), dtype_row_size(DType::kQ5_0, 640));
  EXPECT_EQ(vec_dot_type(DType::kQ4_0_R16), DType::kQ8_0);
  EXPECT_EQ(interleaved_type(DType::kQ5_K), DType::kQ5_K);
  EXPECT_EQ(dtype_layout_base(DType::kQ6_K_R16), DType::kQ6_K);
  EXPECT_EQ(dtype_row_group(DType::kQ4_K_R16), 16);
  EXPECT_EQ(dtype_row_group(DType::kQ4_K), 1);
  EXPECT_EQ(dtype_row_size(DType::kQ4_K_R16, 512), dtype_row_size(DType::kQ4_K, 512));
  EXPECT_EQ(vec_dot_type(DType::kQ6_K_R16), DType::kQ8_K);
  // Never read from a file, never chosen by name.
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(DType::kQ4_K_R16)));
  DType d;
  EXPECT_FALSE(dtype_from_name("q4_K_r16", &d));
  EXPECT_FALSE(interleave_pays(DType::kQ4_K, 40));  // rows not a multiple of 16
  EXPECT_FALSE(interleave_pays(DType::kQ5_K, 64));  // no layout
  EXPECT_EQ(interleave_pays(DType::kQ4_K, 64), active_isa() >= Isa::kAvx2);
}

TEST(Interleave, Q4KLayoutAsDocumented) {
  constexpr int64_t kRows = 32, n = 512;
  const std::vector<uint8_t> w = make_weights(DType::kQ4_K, kRows, n, 5);
  std::vector<uint8_t> il(w.size());
  interleave_rows(DType::kQ4_K, w.data(), kRows, n, il.data());
  const size_t rb = dtype_row_size(DType::kQ4_K, n);
  for (int g = 0; g < 2; ++g)
    for (int i = 0; i < 2; ++i)
      for (int r = 0; r < 16; ++r) {
        const auto& b = reinterpret_cast<const BlockQ4_K*>(w.data() + (16 * g + r) * rb)[i];
        const uint8_t* sb = il.data() + 16 * g * rb + static_cast<size_t>(i) * 2304;
        EXPECT_EQ(std::memcmp(sb + 2 * r, &b.d, 2), 0);
        EXPECT_EQ(std::memcmp(sb + 32 + 2 * r, &b.dmin, 2), 0);
        for (int k = 0; k < 3; ++k) EXPECT_EQ(std::memcmp(sb + 64 + 64 * k + 4 * r, b.scales + 4 * k, 4), 0);
        for (int c = 0; c < 32; ++c) ASSERT_EQ(std::memcmp(sb + 256 + 64 * c + 4 * r, b.qs + 4 * c, 4), 0);
      }
}

TEST(Interleave, Q6KLayoutAsDocumented) {
  constexpr int64_t kRows = 16, n = 256;
  const std::vector<uint8_t> w = make_weights(DType::kQ6_K, kRows, n, 6);
  std::vector<uint8_t> il(w.size());
  interleave_rows(DType::kQ6_K, w.data(), kRows, n, il.data());
  for (int r = 0; r < 16; ++r) {
    const auto& b = reinterpret_cast<const BlockQ6_K*>(w.data() + r * sizeof(BlockQ6_K))[0];
    const uint8_t* sb = il.data();
    EXPECT_EQ(std::memcmp(sb + 2 * r, &b.d, 2), 0);
    for (int g = 0; g < 16; ++g) EXPECT_EQ(static_cast<int8_t>(sb[32 + 16 * g + r]), b.scales[g]);
    for (int c = 0; c < 32; ++c) ASSERT_EQ(std::memcmp(sb + 288 + 64 * c + 4 * r, b.ql + 4 * c, 4), 0);
    for (int c = 0; c < 16; ++c) ASSERT_EQ(std::memcmp(sb + 2336 + 64 * c + 4 * r, b.qh + 4 * c, 4), 0);
  }
}

class Interleaved : public ::testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  void SetUp() override {
    if (cpu_max_isa() < isa()) GTEST_SKIP() << "CPU lacks " << isa_name(isa());
  }
  DType base() const { return std::get<0>(GetParam()); }
  DType t() const { return interleaved_type(base()); }
  Isa isa() const { return std::get<1>(GetParam()); }

  // matmul over the interleaved copy of `wb` == matmul over wb, bit for bit.
  void expect_same_matmul(const std::vector<uint8_t>& wb, int64_t rows, int64_t n,
                          std::initializer_list<int64_t> token_counts) {
    std::vector<uint8_t> il(wb.size());
    interleave_rows(base(), wb.data(), rows, n, il.data());
    const TensorView wp = matrix_view(base(), rows, n, wb);
    TensorView wi = matrix_view(base(), rows, n, il);
    wi.type = t();
    const Isa saved = active_isa();
    set_active_isa(isa());
    ThreadPool pool1(1), pool2(2);
    MatmulScratch scratch;
    for (int64_t tokens : token_counts) {
      std::mt19937 rng(static_cast<uint32_t>(tokens));
      std::normal_distribution<float> gauss(0.0f, 1.0f);
      std::vector<float> xf(static_cast<size_t>(tokens * n));
      for (auto& v : xf) v = gauss(rng) * (tokens % 3 == 0 ? 100.0f : 1.0f);
      std::vector<float> want(static_cast<size_t>(tokens * rows));
      matmul(wp, xf.data(), n, want.data(), rows, tokens, pool1, scratch);
      for (ThreadPool* pool : {&pool1, &pool2}) {
        std::vector<float> got(want.size(), -7.0f);
        matmul(wi, xf.data(), n, got.data(), rows, tokens, *pool, scratch);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_TRUE(same_bits(got[i], want[i])) << "tokens=" << tokens << " threads=" << pool->size() << " t="
                                                  << i / rows << " r=" << i % rows << ": " << got[i] << " vs " << want[i];
      }
    }
    set_active_isa(saved);
  }
};

INSTANTIATE_TEST_SUITE_P(Types, Interleaved,
                         ::testing::Combine(::testing::Values(DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                                                              DType::kQ6_K),
                                            ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, Isa>>& i) {
                           return std::string(dtype_name(std::get<0>(i.param))) + "_" +
                                  isa_name(std::get<1>(i.param));
                         });

TEST_P(Interleaved, KernelsRegistered) {
  const KernelSet& k = kernels(t(), isa());
  EXPECT_NE(k.vec_dot_rows, nullptr);
  EXPECT_NE(k.vec_dot_tile, nullptr);
  EXPECT_EQ(k.tile_rows % 16, 0);
  // Native kernels at AVX-512 and AVX2 (decode and tile / token lanes, at
  // AVX2 each 8-row half of a group read without transposes).
  EXPECT_EQ(k.interleaved_native, isa() >= Isa::kAvx2);
  // Q4_0 / Q5_0 / Q8_0 at AVX-512: above few_max tokens the token-lane form
  // (activations packed once per matmul), which MatmulMatchesBaseType's 17,
  // 33, 70 and 300 tokens go through.
  const bool legacy = base() == DType::kQ4_0 || base() == DType::kQ5_0 || base() == DType::kQ8_0;
  if (isa() >= Isa::kAvx512 && legacy) {
    EXPECT_NE(k.vec_dot_tokens, nullptr);
    EXPECT_NE(k.pack_tokens, nullptr);
    EXPECT_EQ(k.tokens_min, k.few_max + 1);
    EXPECT_GE(k.tokens_max, 4096);
  }
  // Q4_0 / Q5_0 / Q8_0 at AMX: the AMX token lanes with their own pack.
  if (isa() == Isa::kAmx && legacy) {
    const VecDotTokensFn fn = base() == DType::kQ4_0   ? amx::q4_0_r16_tokens
                              : base() == DType::kQ5_0 ? amx::q5_0_r16_tokens
                                                       : amx::q8_0_r16_tokens;
    EXPECT_EQ(k.vec_dot_tokens, fn);
    EXPECT_EQ(k.tokens_pack_bytes, amx::legacy_r16_tokens_pack_bytes);
  }
  // Q4_K / Q6_K at AMX: the tile kernels for batched decode and prefill
  // (MatmulMatchesBaseType's 8 .. 300 tokens go through them).
  if (isa() == Isa::kAmx && !legacy) {
    const bool q4 = base() == DType::kQ4_K;
    EXPECT_EQ(k.vec_dot_few, q4 ? amx::q4_K_r16_few : amx::q6_K_r16_few);
    EXPECT_EQ(k.vec_dot_tile, q4 ? amx::q4_K_r16_tile : amx::q6_K_r16_tile);
  }
}

TEST_P(Interleaved, RoundTrips) {
  constexpr int64_t kRows = 48, n = 768;
  const std::vector<uint8_t> w = make_weights(base(), kRows, n, 9);
  std::vector<uint8_t> il(w.size()), back(w.size());
  interleave_rows(base(), w.data(), kRows, n, il.data());
  EXPECT_NE(il, w);
  const size_t rb = dtype_row_size(base(), n);
  for (int64_t g = 0; g < kRows / 16; ++g) deinterleave_group(t(), il.data() + 16 * g * rb, n, back.data() + 16 * g * rb);
  EXPECT_EQ(back, w);
  TensorView wi = matrix_view(base(), kRows, n, il);
  wi.type = t();
  const TensorView wp = matrix_view(base(), kRows, n, w);
  std::vector<uint8_t> row(rb);
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t r : {0, 5, 15, 16, 31, 47}) {
    copy_row_bytes(wi, r, row.data());
    ASSERT_EQ(std::memcmp(row.data(), w.data() + r * rb, rb), 0) << "row " << r;
    dequantize_row(wi, r, a.data());
    dequantize_row(wp, r, b.data());
    ASSERT_EQ(a, b) << "row " << r;
  }
}

TEST(Interleave, Q4_0LayoutAsDocumented) {
  constexpr int64_t kRows = 16, n = 64;
  const std::vector<uint8_t> w = make_weights(DType::kQ4_0, kRows, n, 8);
  std::vector<uint8_t> il(w.size());
  interleave_rows(DType::kQ4_0, w.data(), kRows, n, il.data());
  for (int r = 0; r < 16; ++r)
    for (int b = 0; b < 2; ++b) {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(w.data() + r * 2 * sizeof(BlockQ4_0))[b];
      const uint8_t* sb = il.data() + b * 288;
      EXPECT_EQ(std::memcmp(sb + 2 * r, &blk.d, 2), 0);
      for (int c = 0; c < 4; ++c) ASSERT_EQ(std::memcmp(sb + 32 + 64 * c + 4 * r, blk.qs + 4 * c, 4), 0);
    }
}

TEST(Interleave, Q5_0LayoutAsDocumented) {
  constexpr int64_t kRows = 32, n = 64;
  const std::vector<uint8_t> w = make_weights(DType::kQ5_0, kRows, n, 12);
  std::vector<uint8_t> il(w.size());
  interleave_rows(DType::kQ5_0, w.data(), kRows, n, il.data());
  for (int g = 0; g < 2; ++g)
    for (int r = 0; r < 16; ++r)
      for (int b = 0; b < 2; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ5_0*>(w.data() + (16 * g + r) * 2 * sizeof(BlockQ5_0))[b];
        const uint8_t* sb = il.data() + g * 16 * 2 * sizeof(BlockQ5_0) + b * 352;
        EXPECT_EQ(std::memcmp(sb + 2 * r, &blk.d, 2), 0);
        // qh transposed: bit b of the row's qh = bit 4 r + b % 4 of mask b / 4.
        uint32_t qh, got = 0;
        std::memcpy(&qh, blk.qh, 4);
        for (int bit = 0; bit < 32; ++bit) {
          uint64_t m;
          std::memcpy(&m, sb + 32 + 8 * (bit / 4), 8);
          got |= static_cast<uint32_t>(m >> (4 * r + bit % 4) & 1) << bit;
        }
        EXPECT_EQ(got, qh) << "row " << 16 * g + r << " block " << b;
        for (int c = 0; c < 4; ++c) ASSERT_EQ(std::memcmp(sb + 96 + 64 * c + 4 * r, blk.qs + 4 * c, 4), 0);
      }
}

TEST_P(Interleaved, MatmulMatchesBaseType) {
  constexpr int64_t kRows = 160, n = 768;  // 10 groups: several row tasks on 2 threads
  // 134 = a 128-token block and 6 (a tile call below the AMX tile's
  // minimum, over 64 rows).
  expect_same_matmul(make_weights(base(), kRows, n, 21), kRows, n,
                     {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 33, 70, 134, 300});
}

// The integer sums at their extremes: largest quants and scales, +-127.
TEST_P(Interleaved, ExtremeBlocksMatchBaseType) {
  constexpr int64_t kRows = 32, n = 512;
  expect_same_matmul(extreme_weights(base(), kRows, n, 11), kRows, n, {1, 3, 6, 20, 70});
}

// `count` activation rows of n, quantized to `act`: random (every third row
// 50x larger) or extreme (+-1 everywhere). Returns the rows, row_bytes apart.
std::vector<uint8_t> quantized_activations(DType act, int64_t n, int count, bool extreme, uint32_t seed) {
  const size_t xrb = dtype_row_size(act, n);
  std::vector<uint8_t> xq(static_cast<size_t>(count) * xrb);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xf(static_cast<size_t>(n));
  for (int t = 0; t < count; ++t) {
    for (auto& v : xf) v = extreme ? (u(rng) < 0 ? -1.0f : 1.0f) : u(rng) * (t % 3 == 0 ? 50.0f : 1.0f);
    kernels(act).quantize_row(xf.data(), xq.data() + t * xrb, n);
  }
  return xq;
}

// The AMX tile kernels against the AVX-512 kernels of the same layouts, bit
// for bit, called directly: every token count of the few-token form (full,
// partial and paired token tiles, and the AVX-512 fallback below
// amx::kKquantsR16MinTokens) and tiles up to amx::kKquantsR16TileCols, on random and
// extreme blocks.
TEST(Interleave, AmxKernelsMatchAvx512) {
  if (cpu_max_isa() < Isa::kAmx) GTEST_SKIP() << "CPU without usable AMX-INT8";
  constexpr int64_t kRows = 48, n = 512;
  for (DType base : {DType::kQ4_K, DType::kQ6_K}) {
    const bool q4 = base == DType::kQ4_K;
    for (bool extreme : {false, true}) {
      const std::vector<uint8_t> w = extreme ? extreme_weights(base, kRows, n, 5) : make_weights(base, kRows, n, 6);
      std::vector<uint8_t> il(w.size());
      interleave_rows(base, w.data(), kRows, n, il.data());
      const size_t wrb = dtype_row_size(base, n), xrb = dtype_row_size(DType::kQ8_K, n);
      const int max_tokens = amx::kKquantsR16TileCols;
      const std::vector<uint8_t> xq = quantized_activations(DType::kQ8_K, n, max_tokens, extreme, extreme ? 3 : 4);
      const auto amx_tile = q4 ? amx::q4_K_r16_tile : amx::q6_K_r16_tile;
      for (int nc = 1; nc <= max_tokens; nc += nc < 40 ? 1 : 11) {
        std::vector<float> want(static_cast<size_t>(nc * kRows)), got(want.size(), -7.0f);
        const bool few = nc <= avx512::kInterleavedFewMax;
        if (few) {
          (q4 ? avx512::q4_K_r16_few : avx512::q6_K_r16_few)(
              n, want.data(), kRows, il.data(), wrb, xq.data(), xrb, kRows, nc);
          (q4 ? amx::q4_K_r16_few : amx::q6_K_r16_few)(n, got.data(), kRows, il.data(),
                                                                                 wrb, xq.data(), xrb, kRows, nc);
        } else {
          for (int64_t r = 0; r < kRows; r += 16)
            for (int t0 = 0; t0 < nc; t0 += kInterleavedTileCols) {  // the AVX-512 tile's width
              const int c = std::min(kInterleavedTileCols, nc - t0);
              (q4 ? avx512::q4_K_r16_tile : avx512::q6_K_r16_tile)(
                  n, want.data() + t0 * kRows + r, kRows, il.data() + r * wrb, wrb, xq.data() + t0 * xrb, xrb, 16, c);
            }
          // One call over 16 rows, one over the other 32 (several groups).
          amx_tile(n, got.data(), kRows, il.data(), wrb, xq.data(), xrb, 16, nc);
          amx_tile(n, got.data() + 16, kRows, il.data() + 16 * wrb, wrb, xq.data(), xrb, 32, nc);
        }
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_TRUE(same_bits(got[i], want[i])) << dtype_name(base) << (extreme ? " extreme" : "") << " nc=" << nc
                                                  << (few ? " few" : " tile") << " t=" << i / kRows
                                                  << " r=" << i % kRows << ": " << got[i] << " vs " << want[i];
        if (few) {  // the tile form too at these counts (its AVX-512 fallback below the minimum), 48 rows a call
          std::vector<float> tiled(want.size(), -7.0f);
          amx_tile(n, tiled.data(), kRows, il.data(), wrb, xq.data(), xrb, static_cast<int>(kRows), nc);
          for (size_t i = 0; i < tiled.size(); ++i)
            ASSERT_TRUE(same_bits(tiled[i], want[i])) << dtype_name(base) << " nc=" << nc << " tile over 48 rows t="
                                                      << i / kRows << " r=" << i % kRows;
        }
      }
    }
  }
}

// The AMX token lanes of Q4_0 / Q5_0 / Q8_0 against the AVX-512 token lanes,
// bit for bit, each with its own pack: every token count from the form's
// start past three token tiles (partial tiles, the Q4_0 / Q5_0 switch at
// amx::kLegacyR16NibbleTokensMin), then larger ones; an odd block count (the
// products go in block pairs), one call over 16 rows and one over 32.
TEST(Interleave, AmxLegacyTokensMatchAvx512) {
  if (cpu_max_isa() < Isa::kAmx) GTEST_SKIP() << "CPU without usable AMX-INT8";
  constexpr int64_t kRows = 48;
  for (DType base : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0}) {
    for (int64_t n : {int64_t{544}, int64_t{1024}, int64_t{2144}}) {  // 2144: 67 blocks, two passes
      for (bool extreme : {false, true}) {
        const std::vector<uint8_t> w = extreme ? extreme_weights(base, kRows, n, 7) : make_weights(base, kRows, n, 8);
        std::vector<uint8_t> il(w.size());
        interleave_rows(base, w.data(), kRows, n, il.data());
        const size_t wrb = dtype_row_size(base, n), xrb = dtype_row_size(DType::kQ8_0, n);
        constexpr int kMaxTokens = 150;
        const std::vector<uint8_t> xq = quantized_activations(DType::kQ8_0, n, kMaxTokens, extreme, extreme ? 5 : 6);
        const KernelSet& ka = kernels(interleaved_type(base), Isa::kAmx);
        const KernelSet& kv = kernels(interleaved_type(base), Isa::kAvx512);
        const int nb = static_cast<int>(n / 32);
        for (int nc = ka.tokens_min; nc <= kMaxTokens; nc += nc < 60 ? 1 : 29) {
          std::vector<uint8_t> pa(ka.tokens_pack_bytes(n, nc)), pv(kv.tokens_pack_bytes(n, nc));
          ka.pack_tokens(n, xq.data(), xrb, nc, pa.data(), 0, nb / 2);  // in two parts, as the driver's threads
          ka.pack_tokens(n, xq.data(), xrb, nc, pa.data(), nb / 2, nb);
          kv.pack_tokens(n, xq.data(), xrb, nc, pv.data(), 0, nb);
          std::vector<float> want(static_cast<size_t>(nc * kRows)), got(want.size(), -7.0f);
          kv.vec_dot_tokens(n, want.data(), kRows, il.data(), wrb, pv.data(), kRows, nc);
          ka.vec_dot_tokens(n, got.data(), kRows, il.data(), wrb, pa.data(), 16, nc);
          ka.vec_dot_tokens(n, got.data() + 16, kRows, il.data() + 16 * wrb, wrb, pa.data(), 32, nc);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << dtype_name(base) << " n=" << n << (extreme ? " extreme" : "")
                                                    << " nc=" << nc << " t=" << i / kRows << " r=" << i % kRows
                                                    << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember
