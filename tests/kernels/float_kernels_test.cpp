// Float-weight (F32 / F16 / BF16) kernels beyond vec_dot: the decode rows
// kernel and the tile must give, for every output, the bits of vec_dot at the
// same ISA level (any row count, row length with and without a partial
// 16-element chunk), and the matmul driver must give the same bits for a
// token whether it is multiplied alone (rows kernel) or in a batch (tile).
// Tiles of every shape are also covered by gemm_tile_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/decode_batch_check.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"

namespace ember {
namespace {

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// rows x n weights of type t from gaussians of varying scale per row.
std::vector<uint8_t> make_weights(DType t, int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<uint8_t> out(dtype_row_size(t, n) * rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const float v = gauss(rng) * std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
      const size_t k = static_cast<size_t>(r * n + i);
      if (t == DType::kF32) std::memcpy(out.data() + 4 * k, &v, 4);
      else {
        const uint16_t h = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(out.data() + 2 * k, &h, 2);
      }
    }
  return out;
}

std::vector<float> make_x(int64_t tokens, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (auto& v : x) v = gauss(rng);
  return x;
}

TEST(FloatKernels, Avx512HasRowsAndTiles) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  for (DType t : kFloatTypes) {
    EXPECT_NE(kernels(t, Isa::kAvx512).vec_dot_rows, nullptr) << dtype_name(t);
    EXPECT_NE(kernels(t, Isa::kAvx512).vec_dot_tile, nullptr) << dtype_name(t);
  }
}

TEST(FloatKernels, RowsMatchVecDotBitForBit) {
  bool any = false;
  for (DType t : kFloatTypes)
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      const KernelSet& k = kernels(t, isa);
      if (!k.vec_dot_rows) continue;
      any = true;
      for (int64_t n : {1, 8, 15, 16, 17, 48, 640, 2049}) {
        const int64_t rows = 29;  // groups of 8 plus a partial one
        const auto w = make_weights(t, rows, n, static_cast<uint32_t>(n));
        const auto x = make_x(1, n, static_cast<uint32_t>(n) + 3);
        const size_t rb = dtype_row_size(t, n);
        std::vector<float> want(rows);
        for (int64_t r = 0; r < rows; ++r) k.vec_dot(n, &want[r], w.data() + rb * r, x.data());
        for (int64_t r0 = 0; r0 < rows; r0 += 5)
          for (int64_t nr = 1; r0 + nr <= rows; ++nr) {
            std::vector<float> got(nr, std::nanf(""));
            k.vec_dot_rows(n, got.data(), w.data() + rb * r0, rb, x.data(), nr);
            for (int64_t r = 0; r < nr; ++r)
              ASSERT_TRUE(same_bits(got[r], want[r0 + r]))
                  << dtype_name(t) << " n=" << n << " r0=" << r0 << " nr=" << nr << " r=" << r;
          }
        // And close to a double-precision dot (the kernels are not just
        // self-consistent).
        const KernelSet& ref = kernels(t, Isa::kScalar);
        std::vector<float> row(n);
        for (int64_t r = 0; r < rows; ++r) {
          ref.dequantize_row(w.data() + rb * r, row.data(), n);
          double d = 0, mag = 0;
          for (int64_t i = 0; i < n; ++i) {
            d += static_cast<double>(row[i]) * x[i];
            mag += std::fabs(static_cast<double>(row[i]) * x[i]);
          }
          EXPECT_NEAR(want[r], d, 1e-6 * mag + 1e-30) << dtype_name(t) << " n=" << n << " r=" << r;
        }
      }
    }
  if (!any) GTEST_SKIP() << "no float vec_dot_rows kernel at this CPU's levels";
}

TEST(FloatKernels, MatmulDecodeEqualsBatch) {
  const int64_t n = 200, rows = 77, tokens = 13;
  for (DType t : kFloatTypes)
    expect_decode_equals_batch(t, make_weights(t, rows, n, 9), rows, n, make_x(tokens, n, 4), tokens);
}

}  // namespace
}  // namespace ember
