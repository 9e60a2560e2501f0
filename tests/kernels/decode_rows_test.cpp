// Multi-row decode kernels (KernelSet::vec_dot_rows): every output must be
// bit-identical to vec_dot of the same ISA level for that row, for any row
// count (partial groups, groups spanning calls) and row length (pairs of
// blocks plus 1..3 tail blocks), including raw random quant bytes; and the
// matmul driver's one-token path (which uses it) must equal the batched path.
// Legacy blocks (Q4_0 / Q5_0 / Q8_0 x Q8_0) and K-quants (Q2_K..Q6_K x Q8_K,
// the Q4_K_M files' types), at every ISA level that has the kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/decode_batch_check.h"
#include "kernels/legacy_weights.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"
#include "kernels/test_weights.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }


std::vector<float> make_x(int64_t tokens, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(t * n + i)] = gauss(rng) * std::ldexp(1.0f, static_cast<int>(t % 5) - 2);
  return x;
}

const DType kTypes[] = {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0};

TEST(DecodeRows, RowsKernelsOnAvx512) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  for (DType t : kTypes) EXPECT_NE(kernels(t, Isa::kAvx512).vec_dot_rows, nullptr) << dtype_name(t);
}

// AVX2: one vec_dot per row with the next 16 rows prefetched into L2.
TEST(DecodeRows, RowsKernelsOnAvx2) {
  if (cpu_max_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  for (DType t : kTypes) EXPECT_NE(kernels(t, Isa::kAvx2).vec_dot_rows, nullptr) << dtype_name(t);
}

// vec_dot_rows vs vec_dot for every start row and count of `rows` rows of
// each length in `lengths`, so partial groups land everywhere.
void expect_rows_match_vec_dot(DType t, const std::vector<int64_t>& lengths, int64_t rows, bool& any) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > cpu_max_isa()) continue;
    const KernelSet& k = kernels(t, isa);
    if (!k.vec_dot_rows) continue;
    any = true;
    const DType xt = vec_dot_type(t);
    const KernelSet& xk = kernels(xt, isa);
    for (int64_t n : lengths) {
      const auto w = dtype_block_size(t) == kQK_K ? make_weights(t, rows, n, static_cast<uint32_t>(n))
                                                   : make_legacy_weights(t, rows, n, static_cast<uint32_t>(n));
      const auto xf = make_x(1, n, static_cast<uint32_t>(n) + 7);
      std::vector<uint8_t> xq(dtype_row_size(xt, n));
      xk.quantize_row(xf.data(), xq.data(), n);
      const size_t rb = dtype_row_size(t, n);
      std::vector<float> want(rows);
      for (int64_t r = 0; r < rows; ++r) k.vec_dot(n, &want[r], w.data() + rb * r, xq.data());
      for (int64_t r0 = 0; r0 < rows; r0 += 3) {
        for (int64_t nr = 1; r0 + nr <= rows; nr += (nr < 10 ? 1 : 7)) {
          std::vector<float> got(nr, std::nanf(""));
          k.vec_dot_rows(n, got.data(), w.data() + rb * r0, rb, xq.data(), nr);
          for (int64_t r = 0; r < nr; ++r)
            ASSERT_TRUE(same_bits(got[r], want[r0 + r]))
                << dtype_name(t) << " isa=" << static_cast<int>(isa) << " n=" << n << " r0=" << r0 << " nr=" << nr
                << " r=" << r << " got " << got[r] << " want " << want[r0 + r];
        }
      }
    }
  }
}

TEST(DecodeRows, MatchesVecDotBitForBit) {
  bool any = false;
  for (DType t : kTypes)  // 37 rows: several groups of 8 plus a partial one
    expect_rows_match_vec_dot(t, {32, 64, 96, 128, 160, 192, 224, 480, 640, 1056, 2144}, 37, any);
  if (!any) GTEST_SKIP() << "no vec_dot_rows kernel at this CPU's levels";
}

const DType kKTypes[] = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

TEST(DecodeRows, KQuantRowsKernelsOnAvx512) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  for (DType t : kKTypes) EXPECT_NE(kernels(t, Isa::kAvx512).vec_dot_rows, nullptr) << dtype_name(t);
}

// 41 rows: two groups of 16 plus a partial one; 1..9 super-blocks per row.
// (vec_dot itself is held to the scalar reference twin in gemm_tile_test.)
TEST(DecodeRows, KQuantMatchesVecDotBitForBit) {
  bool any = false;
  for (DType t : kKTypes) expect_rows_match_vec_dot(t, {256, 512, 768, 2304}, 41, any);
  if (!any) GTEST_SKIP() << "no K-quant vec_dot_rows kernel at this CPU's levels";
}

// One token at a time through the driver (the vec_dot_rows path) equals the
// batched product (tile kernels) bit for bit, for 1-3 threads.
TEST(DecodeRows, MatmulDecodeEqualsBatch) {
  const int64_t n = 640, rows = 203, tokens = 5;
  for (DType t : kTypes)
    expect_decode_equals_batch(t, make_legacy_weights(t, rows, n, 11), rows, n, make_x(tokens, n, 5), tokens);
}

TEST(DecodeRows, KQuantMatmulDecodeEqualsBatch) {
  const int64_t n = 1280, rows = 203, tokens = 5;
  for (DType t : kKTypes)
    expect_decode_equals_batch(t, make_weights(t, rows, n, 12), rows, n, make_x(tokens, n, 6), tokens);
}

// MXFP4 x Q8_0: the decode and tile forms reach vec_dot's integer sums
// another way (unsigned weights, the activations' sums subtracted; see
// avx512/mxfp4_dot.cpp), so they are held to vec_dot's bits on raw bytes:
// every exponent 0 .. 255 (the subnormal half scales of e = 0, 1 and the
// largest ones, sums overflowing to inf), every code, activation quants
// anywhere in [-127, 127] with scales of both signs; odd block counts (a
// lone last block), a row longer than the decode kernel's prepared pairs
// (the fallbacks of decode and few), every token count of the few-token
// form and every tile shape at the corners of the problem.
TEST(DecodeRows, Mxfp4RawBytesMatchVecDotBitForBit) {
  constexpr int64_t kRows = 35, kTokens = 11;
  bool any = false;
  for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{1056}, int64_t{2880}, int64_t{16416}}) {
    const int64_t nb = n / kQK;
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::vector<uint8_t> w(static_cast<size_t>(kRows * nb) * sizeof(BlockMXFP4));
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    auto* wb = reinterpret_cast<BlockMXFP4*>(w.data());
    for (int64_t b = 0; b < kRows * nb; ++b) wb[b].e = static_cast<uint8_t>(b * 7 % 256);
    std::vector<BlockQ8_0> x(static_cast<size_t>(kTokens * nb));
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    for (BlockQ8_0& blk : x) {
      blk.d = f32_to_f16(uni(rng));
      for (int8_t& q : blk.qs) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    }
    const size_t wrb = dtype_row_size(DType::kMXFP4, n), xrb = dtype_row_size(DType::kQ8_0, n);
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      const KernelSet& k = kernels(DType::kMXFP4, isa);
      std::vector<float> want(static_cast<size_t>(kRows * kTokens));
      for (int64_t c = 0; c < kTokens; ++c)
        for (int64_t r = 0; r < kRows; ++r) k.vec_dot(n, &want[c * kRows + r], w.data() + wrb * r, &x[c * nb]);
      auto label = [&] { return ::testing::Message() << "isa=" << static_cast<int>(isa) << " n=" << n; };
      if (k.vec_dot_rows) {
        any = true;
        for (int64_t c = 0; c < kTokens; c += 5)
          for (int64_t r0 : {int64_t{0}, int64_t{1}, int64_t{4}})
            for (int64_t nr : {int64_t{1}, int64_t{2}, int64_t{3}, kRows - r0}) {
              std::vector<float> got(static_cast<size_t>(nr), std::nanf(""));
              k.vec_dot_rows(n, got.data(), w.data() + wrb * r0, wrb, &x[c * nb], nr);
              for (int64_t r = 0; r < nr; ++r)
                ASSERT_TRUE(same_bits(got[r], want[c * kRows + r0 + r]))
                    << label() << " rows c=" << c << " r0=" << r0 << " nr=" << nr << " r=" << r << " got " << got[r]
                    << " want " << want[c * kRows + r0 + r];
            }
      }
      if (k.vec_dot_few) {  // every token count at the corners, rows as for decode
        any = true;
        for (int nc = 1; nc <= std::min<int>(k.few_max, kTokens); ++nc)
          for (int64_t c0 : {int64_t{0}, kTokens - nc})
            for (int64_t r0 : {int64_t{0}, int64_t{1}, int64_t{4}})
              for (int64_t nr : {int64_t{1}, int64_t{2}, int64_t{3}, kRows - r0}) {
                std::vector<float> got(static_cast<size_t>(kRows * kTokens), std::nanf(""));
                k.vec_dot_few(n, got.data() + c0 * kRows + r0, kRows, w.data() + wrb * r0, wrb,
                              reinterpret_cast<const uint8_t*>(x.data()) + xrb * c0, xrb, nr, nc);
                for (int64_t c = c0; c < c0 + nc; ++c)
                  for (int64_t r = r0; r < r0 + nr; ++r)
                    ASSERT_TRUE(same_bits(got[c * kRows + r], want[c * kRows + r]))
                        << label() << " few nr=" << nr << " nc=" << nc << " at (" << r0 << "," << c0 << "): r=" << r
                        << " c=" << c << " got " << got[c * kRows + r] << " want " << want[c * kRows + r];
              }
      }
      if (k.vec_dot_tile) {
        any = true;
        for (int nr = 1; nr <= std::min<int>(k.tile_rows, kRows); ++nr)
          for (int nc = 1; nc <= std::min<int>(k.tile_cols, kTokens); ++nc)
            for (int64_t r0 : {int64_t{0}, kRows - nr})
              for (int64_t c0 : {int64_t{0}, kTokens - nc}) {
                std::vector<float> got(static_cast<size_t>(kRows * kTokens), std::nanf(""));
                k.vec_dot_tile(n, got.data() + c0 * kRows + r0, kRows, w.data() + wrb * r0, wrb,
                               reinterpret_cast<const uint8_t*>(x.data()) + xrb * c0, xrb, nr, nc);
                for (int64_t c = c0; c < c0 + nc; ++c)
                  for (int64_t r = r0; r < r0 + nr; ++r)
                    ASSERT_TRUE(same_bits(got[c * kRows + r], want[c * kRows + r]))
                        << label() << " tile " << nr << "x" << nc << " at (" << r0 << "," << c0 << "): r=" << r
                        << " c=" << c << " got " << got[c * kRows + r] << " want " << want[c * kRows + r];
              }
      }
    }
  }
  if (!any) GTEST_SKIP() << "no MXFP4 decode or tile kernel at this CPU's levels";
}

// MXFP4 through the driver at every token count around the few-token form's
// range (batched decode: a few tokens per expert) and into the tile's: each
// token's bits as when it is multiplied alone, for 1-3 threads.
TEST(DecodeRows, Mxfp4MatmulFewTokensEqualSingle) {
  const int64_t n = 2880, rows = 203;
  const auto w = make_weights(DType::kMXFP4, rows, n, 13);
  for (int64_t tokens = 2; tokens <= 10; ++tokens)
    expect_decode_equals_batch(DType::kMXFP4, w, rows, n, make_x(tokens, n, 20 + static_cast<uint32_t>(tokens)),
                               tokens);
}

}  // namespace
}  // namespace ember
