// Tile kernels (KernelSet::vec_dot_tile) and the matmul driver that uses them.
//
// Batch invariance is the contract: every tile output must be bit-identical
// to the single vec_dot of the same ISA level for that (row, token) pair,
// for every tile shape (partial tiles included), and must agree with the
// scalar reference within rounding. The matmul driver must give the same bits
// whatever the number of tokens in a call and the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/registry.h"
#include "kernels/test_weights.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {
namespace {

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                              DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

std::vector<Isa> levels() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa <= cpu_max_isa()) v.push_back(isa);
  return v;
}

// Row lengths: legacy kernels step 2 blocks at a time below nb rounded to a
// multiple of 4, then single tail blocks (1, 2, 3 tail blocks: 5, 6, 7, 15
// blocks); k-quants one super-block at a time.
std::vector<int64_t> row_lengths(DType t) {
  const int64_t bs = dtype_block_size(t);
  if (bs == 1) return {8, 37, 640};
  // 2144 = 67 blocks: several 16-pair chunks of the wide tiles plus a tail.
  if (bs == kQK) return {32, 64, 96, 128, 160, 192, 224, 480, 640, 1024, 1056, 2144};
  return {256, 512, 768, 2048};
}

// Activations [tokens, n] as floats (varying magnitudes, one all-zero row).
std::vector<float> make_activations(int64_t tokens, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (int64_t t = 0; t < tokens; ++t) {
    const float mag = t == 3 ? 0.0f : std::ldexp(1.0f, static_cast<int>(t % 9) - 4);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(t * n + i)] = gauss(rng) * mag;
  }
  return x;
}

// Activation rows converted with the level's quantizer, as the driver does.
std::vector<uint8_t> quantize_activations(DType t, Isa isa, const std::vector<float>& x, int64_t tokens, int64_t n) {
  const DType xt = vec_dot_type(t);
  if (xt == DType::kF32) {
    std::vector<uint8_t> out(x.size() * sizeof(float));
    std::memcpy(out.data(), x.data(), out.size());
    return out;
  }
  const size_t rb = dtype_row_size(xt, n);
  std::vector<uint8_t> out(rb * static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) kernels(xt, isa).quantize_row(x.data() + i * n, out.data() + rb * i, n);
  return out;
}

// sum |w_i * x_i| over the dequantized rows: the scale of rounding error.
double abs_dot(DType wt, const void* w, DType xt, const void* x, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n)), xf(static_cast<size_t>(n));
  dequantize_row_ref(wt, w, wf.data(), n);
  if (xt == DType::kF32) {
    std::memcpy(xf.data(), x, static_cast<size_t>(n) * sizeof(float));
  } else {
    dequantize_row_ref(xt, x, xf.data(), n);
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * xf[i]);
  return s;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::string label(DType t, Isa isa, int64_t n) {
  return std::string(dtype_name(t)) + " isa=" + isa_name(isa) + " n=" + std::to_string(n);
}

TEST(GemmTile, TileShapesAreDeclared) {
  for (DType t : kWeightTypes) {
    for (Isa isa : levels()) {
      const KernelSet& k = kernels(t, isa);
      if (!k.vec_dot_tile) {
        EXPECT_EQ(k.tile_rows, 0) << label(t, isa, 0);
        continue;
      }
      EXPECT_GE(k.tile_rows, 1) << label(t, isa, 0);
      EXPECT_GE(k.tile_cols, 1) << label(t, isa, 0);
      EXPECT_LE(k.tile_rows, 32) << label(t, isa, 0);
      EXPECT_LE(k.tile_cols, 256) << label(t, isa, 0);
    }
  }
}

// The hot model types get tile kernels on AVX-512 machines.
TEST(GemmTile, PriorityTypesHaveTilesOnAvx512) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ2_K,
                  DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4})
    EXPECT_NE(kernels(t, Isa::kAvx512).vec_dot_tile, nullptr) << dtype_name(t);
}

// The hot model types (the Gemma 3 Q4_K_M body is Q5_0, Q8_0, Q4_K and Q6_K;
// gpt-oss's experts are MXFP4) get tile kernels on AVX2-only machines too.
TEST(GemmTile, PriorityTypesHaveTilesOnAvx2) {
  if (cpu_max_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ2_K,
                  DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4}) {
    const KernelSet& k = kernels(t, Isa::kAvx2);
    EXPECT_NE(k.vec_dot_tile, nullptr) << dtype_name(t);
    // Its own tile, not one inherited from the scalar level.
    EXPECT_NE(k.vec_dot, kernels(t, Isa::kScalar).vec_dot) << dtype_name(t);
  }
}

// Tile column counts to test: all small ones, around the register block
// sizes (4, 16), and the largest ones.
std::vector<int> col_counts(int tile_cols) {
  std::vector<int> v;
  for (int nc = 1; nc <= tile_cols; ++nc)
    if (nc <= 9 || (nc >= 15 && nc <= 17) || nc == 31 || nc == 33 || nc >= tile_cols - 1) v.push_back(nc);
  return v;
}

// Every tile shape, at the corners of a 17 x 69 (rows x tokens) problem:
// bit-identical to vec_dot, nothing written outside the tile, and within
// rounding of the scalar reference.
TEST(GemmTile, TilesMatchVecDotBitForBit) {
  constexpr int64_t kRows = 33, kTokens = 69;  // kRows > the largest tile_rows (32)
  constexpr int64_t kRefTokens = 8;            // tokens also checked against the scalar reference
  int tested = 0;
  for (DType t : kWeightTypes) {
    for (int64_t n : row_lengths(t)) {
      const uint32_t seed = static_cast<uint32_t>(n * 31 + static_cast<int>(t));
      const std::vector<uint8_t> w = make_weights(t, kRows, n, seed);
      const std::vector<float> xf = make_activations(kTokens, n, seed + 1);
      const size_t wrb = dtype_row_size(t, n);
      const DType xt = vec_dot_type(t);
      const size_t xrb = dtype_row_size(xt, n);
      for (Isa isa : levels()) {
        const KernelSet& k = kernels(t, isa);
        if (!k.vec_dot_tile) continue;
        const std::vector<uint8_t> x = quantize_activations(t, isa, xf, kTokens, n);
        // want[c][r] from vec_dot; scalar reference for tolerance checks.
        std::vector<float> want(kRows * kTokens), ref(kRows * kTokens);
        for (int64_t c = 0; c < kTokens; ++c) {
          for (int64_t r = 0; r < kRows; ++r) {
            k.vec_dot(n, &want[c * kRows + r], w.data() + wrb * r, x.data() + xrb * c);
            kernels(t, Isa::kScalar).vec_dot(n, &ref[c * kRows + r], w.data() + wrb * r, x.data() + xrb * c);
          }
        }
        for (int64_t c = 0; c < kRefTokens; ++c) {
          for (int64_t r = 0; r < kRows; ++r) {
            const double scale = abs_dot(t, w.data() + wrb * r, xt, x.data() + xrb * c, n);
            ASSERT_NEAR(want[c * kRows + r], ref[c * kRows + r], 1e-5 * scale + 1e-30)
                << label(t, isa, n) << " r=" << r << " c=" << c;
          }
        }
        const float kSentinel = std::numeric_limits<float>::quiet_NaN();
        for (int nr = 1; nr <= k.tile_rows; ++nr) {
          for (int nc : col_counts(k.tile_cols)) {
            ASSERT_LE(nc, kTokens);
            for (int64_t r0 : {int64_t{0}, kRows - nr}) {
              for (int64_t c0 : {int64_t{0}, kTokens - nc}) {
                // Output laid out like the driver's y: [tokens, rows], stride lds.
                const int64_t lds = kRows + 3;
                std::vector<float> s(static_cast<size_t>(lds * kTokens), kSentinel);
                k.vec_dot_tile(n, s.data() + c0 * lds + r0, lds, w.data() + wrb * r0, wrb, x.data() + xrb * c0, xrb, nr,
                               nc);
                for (int64_t c = 0; c < kTokens; ++c) {
                  for (int64_t r = 0; r < lds; ++r) {
                    const float got = s[static_cast<size_t>(c * lds + r)];
                    const bool inside = r >= r0 && r < r0 + nr && c >= c0 && c < c0 + nc;
                    if (!inside) {
                      ASSERT_TRUE(std::isnan(got)) << label(t, isa, n) << " wrote outside the tile at r=" << r
                                                   << " c=" << c << " (tile " << nr << "x" << nc << ")";
                      continue;
                    }
                    const float expect = want[static_cast<size_t>(c * kRows + r)];
                    ASSERT_TRUE(same_bits(got, expect))
                        << label(t, isa, n) << " tile " << nr << "x" << nc << " at (" << r0 << "," << c0 << "): r=" << r
                        << " c=" << c << " got " << got << " vec_dot " << expect;
                  }
                }
                ++tested;
              }
            }
          }
        }
      }
    }
  }
  if (cpu_max_isa() >= Isa::kAvx2) {
    EXPECT_GT(tested, 0);
  }
}

// The matmul driver: y computed for all tokens at once equals y computed
// one token at a time (decode path), bit for bit, for 1..3 threads, and
// equals the per-pair vec_dot of the active level.
TEST(GemmTile, MatmulIsBatchInvariant) {
  constexpr int64_t kRows = 37, kTokens = 75;
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  MatmulScratch scratch;
  // Long rows: several token blocks of the driver (L2-sized) per call.
  for (const auto& [t, n] : std::vector<std::pair<DType, int64_t>>{{DType::kF32, 160},
                                                                   {DType::kF16, 160},
                                                                   {DType::kBF16, 160},
                                                                   {DType::kQ4_0, 160},
                                                                   {DType::kQ4_1, 160},
                                                                   {DType::kQ5_0, 160},
                                                                   {DType::kQ5_1, 160},
                                                                   {DType::kQ8_0, 160},
                                                                   {DType::kQ8_0, 4096},
                                                                   {DType::kMXFP4, 160},
                                                                   {DType::kMXFP4, 2880},
                                                                   {DType::kQ5_0, 4096},
                                                                   {DType::kQ2_K, 512},
                                                                   {DType::kQ3_K, 512},
                                                                   {DType::kQ4_K, 512},
                                                                   {DType::kQ4_K, 4096},
                                                                   {DType::kQ5_K, 512},
                                                                   {DType::kQ6_K, 512},
                                                                   {DType::kQ6_K, 4096}}) {
    const std::vector<uint8_t> wbytes = make_weights(t, kRows, n, 7 + static_cast<uint32_t>(t));
    const TensorView w = matrix_view(t, kRows, n, wbytes);
    const std::vector<float> x = make_activations(kTokens, n, 99);
    const std::vector<uint8_t> xq = quantize_activations(t, active_isa(), x, kTokens, n);
    const KernelSet& k = kernels(t);
    const size_t wrb = w.row_bytes(), xrb = xq.size() / kTokens;
    const int64_t ldy = kRows + 5;
    std::vector<float> want(static_cast<size_t>(ldy * kTokens), 0.0f);
    for (int64_t c = 0; c < kTokens; ++c)
      for (int64_t r = 0; r < kRows; ++r)
        k.vec_dot(n, &want[c * ldy + r], wbytes.data() + wrb * r, xq.data() + xrb * c);
    for (ThreadPool* pool : pools) {
      std::vector<float> batch(want.size(), 0.0f), single(want.size(), 0.0f);
      matmul(w, x.data(), n, batch.data(), ldy, kTokens, *pool, scratch);
      for (int64_t c = 0; c < kTokens; ++c)
        matmul(w, x.data() + c * n, n, single.data() + c * ldy, ldy, 1, *pool, scratch);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(same_bits(batch[i], want[i])) << dtype_name(t) << " threads=" << pool->size() << " i=" << i
                                                  << " batch " << batch[i] << " vec_dot " << want[i];
        ASSERT_TRUE(same_bits(single[i], want[i])) << dtype_name(t) << " threads=" << pool->size() << " i=" << i
                                                   << " single " << single[i] << " vec_dot " << want[i];
      }
      // A view of rows [5, 30) gives the same bits as the full product.
      std::vector<float> slice(static_cast<size_t>(ldy * kTokens), 0.0f);
      matmul(row_range(w, 5, 30), x.data(), n, slice.data(), ldy, kTokens, *pool, scratch);
      for (int64_t c = 0; c < kTokens; ++c) {
        for (int64_t r = 5; r < 30; ++r) {
          ASSERT_TRUE(same_bits(slice[c * ldy + r - 5], want[c * ldy + r])) << dtype_name(t) << " slice r=" << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember
