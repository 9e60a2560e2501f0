// Multi-row decode kernels (KernelSet::vec_dot_rows): every output must be
// bit-identical to vec_dot of the same ISA level for that row, for any row
// count (partial groups, groups spanning calls) and row length (pairs of
// blocks plus 1..3 tail blocks), including raw random quant bytes; and the
// matmul driver's one-token path (which uses it) must equal the batched path.
// Legacy blocks (Q4_0 / Q5_0 / Q8_0 x Q8_0) and K-quants (Q2_K..Q6_K x Q8_K,
// the Q4_K_M files' types), at every ISA level that has the kernel.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ember
