// Kernel registry tests: every op x dtype x ISA level this CPU supports is
// checked against the scalar reference (kernels/ref, quant/quantize.h).
// Quantizers and dequantizers must be bit-identical; dot products must agree
// within 1e-5 of sum |w * x| (SIMD kernels sum in a different order).
// Levels above cpu_max_isa() are skipped.
#include "kernels/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/ref/dot.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {
namespace {

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                              DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kMXFP4};
const DType kActivationTypes[] = {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K};
const DType kDequantTypes[] = {DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                               DType::kQ5_1, DType::kQ8_0, DType::kQ8_1, DType::kQ2_K, DType::kQ3_K,
                               DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kMXFP4};

std::vector<Isa> levels() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa <= cpu_max_isa()) v.push_back(isa);
  return v;
}

// Every block count used: one block, the kernels' tail paths (legacy
// kernels step 8 blocks, then 4, then 1: 4, 7, 12 = 8+4, 13, 20 = 640
// elements), and a row of 4096 floats.
std::vector<int64_t> block_counts(DType t) {
  const int64_t bs = dtype_block_size(t);
  if (bs == 1) return {1, 7, 32, 33, 100, 4096, 4096 + 13};
  if (bs == kQK) return {1, 3, 4, 7, 12, 13, 20, 4096 / bs};
  return {1, 3, 4096 / bs};
}

enum class Pattern { kGaussian, kZeroBlocks, kExtremeScales, kTies, kUniform };
const Pattern kPatterns[] = {Pattern::kGaussian, Pattern::kZeroBlocks, Pattern::kExtremeScales, Pattern::kTies,
                             Pattern::kUniform};

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kGaussian: return "gaussian";
    case Pattern::kZeroBlocks: return "zero-blocks";
    case Pattern::kExtremeScales: return "extreme-scales";
    case Pattern::kTies: return "ties";
    case Pattern::kUniform: return "uniform";
  }
  return "?";
}

// Floats with the given structure; `block` is the span that shares a scale.
std::vector<float> make_floats(int64_t n, int64_t block, Pattern p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = p == Pattern::kUniform ? uni(rng) : gauss(rng);
  const int64_t nb = (n + block - 1) / block;
  for (int64_t b = 0; b < nb; ++b) {
    float* blk = x.data() + b * block;
    const int64_t len = std::min(block, n - b * block);
    switch (p) {
      case Pattern::kZeroBlocks:
        if (b % 2 == 0) std::fill(blk, blk + len, 0.0f);
        if (b % 3 == 1 && len > 1) std::fill(blk + len / 2, blk + len, 0.0f);  // half-zero block
        break;
      case Pattern::kExtremeScales: {
        // Block magnitudes from ~1e-6 to ~2e3 with one outlier of 8x per
        // block (largest 1.6e4: f16 scales, mins and values stay finite).
        const float scales[] = {1e-6f, 3e-4f, 1.0f, 50.0f, 400.0f, 2e3f};
        const float sc = scales[b % 6];
        for (int64_t j = 0; j < len; ++j) blk[j] *= sc;
        blk[(b * 7) % len] = sc * 8.0f * ((b & 1) ? -1.0f : 1.0f);
        break;
      }
      case Pattern::kTies:
        // Quantizer ties: with max |x| = 127 the Q8_0 and Q8_K scales are 1,
        // so every x = k + 0.5 sits exactly between two quants.
        for (int64_t j = 0; j < len; ++j) {
          blk[j] = std::floor(gauss(rng) * 30.0f) + 0.5f;
          blk[j] = std::max(-126.5f, std::min(126.5f, blk[j]));
        }
        blk[0] = (b & 1) ? 127.0f : -127.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

std::string label(DType t, Isa isa, int64_t n, Pattern p) {
  return std::string(dtype_name(t)) + " isa=" + isa_name(isa) + " n=" + std::to_string(n) + " " + pattern_name(p);
}

// Random raw bytes in every quant field, with sane scale fields (finite,
// moderate f16/f32 scales): covers quant values the RTN quantizers never
// emit (e.g. Q8_0 -128 weights, Q6_K/Q3_K extremes).
void randomize_blocks(DType t, void* data, int64_t nblocks, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t bytes = static_cast<size_t>(nblocks) * dtype_type_size(t);
  auto* p = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto h = [&]() { return f32_to_f16(uni(rng) * 0.05f); };
  for (int64_t b = 0; b < nblocks; ++b) {
    switch (t) {
      case DType::kQ4_0: static_cast<BlockQ4_0*>(data)[b].d = h(); break;
      case DType::kQ4_1: static_cast<BlockQ4_1*>(data)[b].d = h(); static_cast<BlockQ4_1*>(data)[b].m = h(); break;
      case DType::kQ5_0: static_cast<BlockQ5_0*>(data)[b].d = h(); break;
      case DType::kQ5_1: static_cast<BlockQ5_1*>(data)[b].d = h(); static_cast<BlockQ5_1*>(data)[b].m = h(); break;
      case DType::kQ8_0: static_cast<BlockQ8_0*>(data)[b].d = h(); break;
      case DType::kMXFP4: static_cast<BlockMXFP4*>(data)[b].e = static_cast<uint8_t>(118 + rng() % 12); break;
      case DType::kQ8_1: static_cast<BlockQ8_1*>(data)[b].d = h(); static_cast<BlockQ8_1*>(data)[b].s = h(); break;
      case DType::kQ2_K: static_cast<BlockQ2_K*>(data)[b].d = h(); static_cast<BlockQ2_K*>(data)[b].dmin = h(); break;
      case DType::kQ3_K: static_cast<BlockQ3_K*>(data)[b].d = h(); break;
      case DType::kQ4_K: static_cast<BlockQ4_K*>(data)[b].d = h(); static_cast<BlockQ4_K*>(data)[b].dmin = h(); break;
      case DType::kQ5_K: static_cast<BlockQ5_K*>(data)[b].d = h(); static_cast<BlockQ5_K*>(data)[b].dmin = h(); break;
      case DType::kQ6_K: static_cast<BlockQ6_K*>(data)[b].d = h(); break;
      case DType::kQ8_K: {
        auto& blk = static_cast<BlockQ8_K*>(data)[b];
        blk.d = uni(rng) * 0.01f;
        for (auto& q : blk.qs) q = std::max<int8_t>(q, -127);  // activation range
        for (int g = 0; g < kQK_K / 16; ++g) {
          int sum = 0;
          for (int j = 0; j < 16; ++j) sum += blk.qs[g * 16 + j];
          blk.bsums[g] = static_cast<int16_t>(sum);
        }
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        auto* u = static_cast<uint16_t*>(data);
        const int64_t n = nblocks;
        for (int64_t i = 0; i < n; ++i)
          u[i] = t == DType::kF16 ? f32_to_f16(uni(rng) * 4.0f) : f32_to_bf16(uni(rng) * 4.0f);
        return;
      }
      default:
        break;
    }
  }
}

TEST(KernelRegistry, VecDotTypes) {
  EXPECT_EQ(vec_dot_type(DType::kQ4_0), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kQ5_0), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kQ8_0), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kMXFP4), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kQ4_1), DType::kQ8_1);
  EXPECT_EQ(vec_dot_type(DType::kQ5_1), DType::kQ8_1);
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K})
    EXPECT_EQ(vec_dot_type(t), DType::kQ8_K) << dtype_name(t);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) EXPECT_EQ(vec_dot_type(t), DType::kF32);
}

TEST(KernelRegistry, EveryLevelHasEveryOp) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    for (DType t : kWeightTypes) {
      const KernelSet& k = kernels(t, isa);
      EXPECT_NE(k.vec_dot, nullptr) << label(t, isa, 0, Pattern::kGaussian);
      EXPECT_NE(k.dequantize_row, nullptr) << label(t, isa, 0, Pattern::kGaussian);
      EXPECT_NE(k.quantize_row, nullptr) << label(t, isa, 0, Pattern::kGaussian);
      EXPECT_NE(kernels(vec_dot_type(t), isa).quantize_row, nullptr) << label(t, isa, 0, Pattern::kGaussian);
    }
  }
}

TEST(KernelRegistry, LevelsAboveTheCpuClampAndUnknownTypesAreEmpty) {
  const KernelSet& top = kernels(DType::kQ8_0, Isa::kAvx512);
  const KernelSet& max = kernels(DType::kQ8_0, cpu_max_isa());
  EXPECT_EQ(top.vec_dot, max.vec_dot);
  const KernelSet& bad = kernels(static_cast<DType>(77), Isa::kAvx2);
  EXPECT_EQ(bad.vec_dot, nullptr);
  EXPECT_EQ(bad.quantize_row, nullptr);
  EXPECT_EQ(kernels(DType::kI32, Isa::kAvx2).vec_dot, nullptr);
}

// The folding rules of the one table (kernels/cpu/registry.cpp), at every
// level whatever this CPU has (registry_entry folds the table for a given
// highest level): a form is carried up with the vec_dot it reproduces, never
// past a new one; a level's entry does not depend on the levels above it.
TEST(KernelRegistry, FormsCarryUpWithTheirVecDot) {
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,     DType::kQ4_1,     DType::kQ5_0,
                         DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,     DType::kQ4_K,     DType::kQ5_K,
                         DType::kQ6_K, DType::kQ8_K, DType::kQ4_0_R16, DType::kQ5_0_R16, DType::kQ8_0_R16,
                         DType::kQ4_K_R16, DType::kQ6_K_R16, DType::kMXFP4};
  for (DType t : types) {
    for (int l = 1; l < kNumIsaLevels; ++l) {
      const Isa isa = static_cast<Isa>(l), lower_isa = static_cast<Isa>(l - 1);
      const KernelSet k = registry_entry(t, isa, Isa::kAmx), lower = registry_entry(t, lower_isa, Isa::kAmx);
      const std::string at = std::string(dtype_name(t)) + " at " + isa_name(isa);
      EXPECT_TRUE(k.vec_dot || !lower.vec_dot) << at;
      EXPECT_TRUE(k.dequantize_row || !lower.dequantize_row) << at;
      if (k.vec_dot != lower.vec_dot) continue;
      // The same vec_dot: every form of the level below is still there (the
      // AMX level, which adds no plain-type kernels, once lost the decode rows).
      EXPECT_TRUE(k.vec_dot_rows || !lower.vec_dot_rows) << at;
      EXPECT_TRUE(k.vec_dot_few || !lower.vec_dot_few) << at;
      EXPECT_TRUE(k.vec_dot_tokens || !lower.vec_dot_tokens) << at;
      EXPECT_TRUE(k.vec_dot_tile || !lower.vec_dot_tile) << at;
    }
    for (int l = 0; l < kNumIsaLevels; ++l)
      for (int m = l; m < kNumIsaLevels; ++m) {
        const KernelSet a = registry_entry(t, static_cast<Isa>(l), static_cast<Isa>(l));
        const KernelSet b = registry_entry(t, static_cast<Isa>(l), static_cast<Isa>(m));
        const bool same = a.dequantize_row == b.dequantize_row && a.quantize_row == b.quantize_row &&
                          a.quantize_row_int4 == b.quantize_row_int4 && a.vec_dot == b.vec_dot &&
                          a.vec_dot_rows == b.vec_dot_rows && a.vec_dot_few == b.vec_dot_few &&
                          a.few_max == b.few_max && a.vec_dot_tokens == b.vec_dot_tokens &&
                          a.pack_tokens == b.pack_tokens && a.tokens_pack_bytes == b.tokens_pack_bytes &&
                          a.tokens_min == b.tokens_min && a.tokens_max == b.tokens_max &&
                          a.vec_dot_tile == b.vec_dot_tile && a.tile_rows == b.tile_rows &&
                          a.tile_cols == b.tile_cols && a.interleaved_native == b.interleaved_native;
        EXPECT_TRUE(same) << dtype_name(t) << " level " << l << " folded up to " << m;
      }
  }
  // The AMX level holds the AVX-512 decode of the plain types.
  EXPECT_EQ(registry_entry(DType::kQ4_K, Isa::kAmx, Isa::kAmx).vec_dot_rows, &avx512::q4_K_rows);
  EXPECT_EQ(registry_entry(DType::kQ5_0, Isa::kAmx, Isa::kAmx).vec_dot_rows, &avx512::q5_0_rows);
  EXPECT_EQ(registry_entry(DType::kQ4_K_R16, Isa::kAmx, Isa::kAmx).vec_dot_tile, &amx::q4_K_r16_tile);
  EXPECT_EQ(registry_entry(DType::kQ4_K_R16, Isa::kAmx, Isa::kAmx).vec_dot_rows, &avx512::q4_K_r16_rows);
  // No level holds a kernel of a level above it.
  EXPECT_EQ(registry_entry(DType::kQ4_K_R16, Isa::kAvx512, Isa::kAmx).vec_dot_tile, &avx512::q4_K_r16_tile);
  EXPECT_EQ(registry_entry(DType::kQ4_K, Isa::kAmx, Isa::kAvx512).vec_dot, nullptr);
}

TEST(KernelRegistry, ScalarLevelIsTheReference) {
  EXPECT_EQ(kernels(DType::kQ8_0, Isa::kScalar).vec_dot, &ref::q8_0_dot);
  EXPECT_EQ(kernels(DType::kQ4_K, Isa::kScalar).vec_dot, &ref::q4_K_dot);
  EXPECT_EQ(kernels(DType::kQ8_K, Isa::kScalar).quantize_row, &quantize_row_q8_K_ref);
}

TEST(KernelRegistry, SimdLevelsReplaceTheHotKernels) {
  if (cpu_max_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K, DType::kF32, DType::kF16,
                  DType::kMXFP4}) {
    EXPECT_NE(kernels(t, Isa::kAvx2).vec_dot, kernels(t, Isa::kScalar).vec_dot) << dtype_name(t);
    EXPECT_NE(kernels(t, cpu_max_isa()).vec_dot, kernels(t, Isa::kScalar).vec_dot) << dtype_name(t);
  }
  for (DType t : kActivationTypes)
    EXPECT_NE(kernels(t, Isa::kAvx2).quantize_row, kernels(t, Isa::kScalar).quantize_row) << dtype_name(t);
}

TEST(KernelRegistry, DefaultLookupFollowsActiveIsa) {
  const Isa saved = active_isa();
  EXPECT_EQ(set_active_isa(Isa::kScalar), Isa::kScalar);
  EXPECT_EQ(kernels(DType::kQ8_0).vec_dot, kernels(DType::kQ8_0, Isa::kScalar).vec_dot);
  set_active_isa(Isa::kAvx512);
  EXPECT_EQ(kernels(DType::kQ8_0).vec_dot, kernels(DType::kQ8_0, cpu_max_isa()).vec_dot);
  set_active_isa(saved);
}

// Activation quantizers: bit-identical to the reference on every pattern.
TEST(Kernels, ActivationQuantizersMatchReferenceBitForBit) {
  for (DType t : kActivationTypes) {
    const int64_t bs = dtype_block_size(t);
    for (Isa isa : levels()) {
      const QuantizeRowFn fn = kernels(t, isa).quantize_row;
      ASSERT_NE(fn, nullptr);
      for (int64_t nb : {int64_t{1}, int64_t{3}, 4096 / bs}) {
        for (Pattern p : kPatterns) {
          const int64_t n = nb * bs;
          const std::vector<float> x = make_floats(n, bs, p, static_cast<uint32_t>(n * 31 + static_cast<int>(p)));
          const size_t bytes = dtype_row_size(t, n);
          std::vector<uint8_t> got(bytes, 0), want(bytes, 0);
          quantize_row_ref(t, x.data(), want.data(), n);
          fn(x.data(), got.data(), n);
          size_t first = 0;
          while (first < bytes && got[first] == want[first]) ++first;
          EXPECT_EQ(first, bytes) << label(t, isa, n, p) << ": first difference at byte " << first << " (block "
                                  << first / dtype_type_size(t) << ")";
        }
      }
    }
  }
}

// Dequantizers: bit-identical to the reference, on quantized data and on
// raw random blocks.
TEST(Kernels, DequantizersMatchReferenceBitForBit) {
  for (DType t : kDequantTypes) {
    const int64_t bs = dtype_block_size(t);
    for (Isa isa : levels()) {
      const DequantizeRowFn fn = kernels(t, isa).dequantize_row;
      ASSERT_NE(fn, nullptr);
      for (int64_t nb : block_counts(t)) {
        const int64_t n = nb * bs;
        for (int variant = 0; variant < 2; ++variant) {
          std::vector<uint8_t> q(dtype_row_size(t, n));
          if (variant == 0) {
            const std::vector<float> x = make_floats(n, bs, Pattern::kExtremeScales, static_cast<uint32_t>(n));
            quantize_row_ref(t, x.data(), q.data(), n);
          } else {
            randomize_blocks(t, q.data(), bs == 1 ? n : nb, static_cast<uint32_t>(n + 5));
          }
          std::vector<float> got(static_cast<size_t>(n), -1.0f), want(static_cast<size_t>(n), -2.0f);
          dequantize_row_ref(t, q.data(), want.data(), n);
          fn(q.data(), got.data(), n);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << label(t, isa, n, Pattern::kExtremeScales) << " variant " << variant;
        }
      }
    }
  }
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

void check_vec_dot(DType t, Isa isa, int64_t n, const void* w, const std::vector<uint8_t>& x, const char* what,
                   Pattern p) {
  const DType xt = vec_dot_type(t);
  float want = 0, got = 0;
  kernels(t, Isa::kScalar).vec_dot(n, &want, w, x.data());
  kernels(t, isa).vec_dot(n, &got, w, x.data());
  const double scale = abs_dot(t, w, xt, x.data(), n);
  const double tol = 1e-5 * scale + 1e-30;
  EXPECT_NEAR(got, want, tol) << label(t, isa, n, p) << " " << what << " (sum|w*x| = " << scale << ")";
}

TEST(Kernels, VecDotMatchesReference) {
  for (DType t : kWeightTypes) {
    const DType xt = vec_dot_type(t);
    const int64_t bs = dtype_block_size(t);
    for (int64_t nb : block_counts(t)) {
      const int64_t n = nb * bs;
      for (Pattern p : kPatterns) {
        const uint32_t seed = static_cast<uint32_t>(n * 7 + static_cast<int>(p) + static_cast<int>(t) * 1000);
        // Weights: the reference quantizer's output, and raw random blocks.
        const std::vector<float> wf = make_floats(n, bs, p, seed);
        std::vector<uint8_t> wq(dtype_row_size(t, n)), wr(dtype_row_size(t, n));
        if (t == DType::kF32) {
          std::memcpy(wq.data(), wf.data(), wq.size());
        } else {
          quantize_row_ref(t, wf.data(), wq.data(), n);
        }
        randomize_blocks(t, wr.data(), bs == 1 ? n : nb, seed + 1);
        // Activations: the reference quantizer of the activation type.
        const std::vector<float> xf = make_floats(n, dtype_block_size(xt), Pattern::kGaussian, seed + 2);
        std::vector<uint8_t> xq(dtype_row_size(xt, n));
        if (xt == DType::kF32) {
          std::memcpy(xq.data(), xf.data(), xq.size());
        } else {
          quantize_row_ref(xt, xf.data(), xq.data(), n);
        }
        for (Isa isa : levels()) {
          check_vec_dot(t, isa, n, wq.data(), xq, "quantized weights", p);
          if (t != DType::kF32) check_vec_dot(t, isa, n, wr.data(), xq, "random blocks", p);
        }
      }
    }
  }
}

// The SIMD activation quantizer feeding the SIMD dot product gives the same
// answer as the all-reference path (end-to-end for the matmul driver).
TEST(Kernels, SimdPipelineMatchesReferencePipeline) {
  for (DType t : kWeightTypes) {
    const DType xt = vec_dot_type(t);
    if (xt == DType::kF32) continue;
    const int64_t n = 4096;
    const std::vector<float> wf = make_floats(n, dtype_block_size(t), Pattern::kGaussian, 11);
    const std::vector<float> xf = make_floats(n, dtype_block_size(xt), Pattern::kGaussian, 12);
    std::vector<uint8_t> wq(dtype_row_size(t, n)), xr(dtype_row_size(xt, n)), xs(dtype_row_size(xt, n));
    quantize_row_ref(t, wf.data(), wq.data(), n);
    quantize_row_ref(xt, xf.data(), xr.data(), n);
    float want = 0;
    kernels(t, Isa::kScalar).vec_dot(n, &want, wq.data(), xr.data());
    for (Isa isa : levels()) {
      kernels(xt, isa).quantize_row(xf.data(), xs.data(), n);
      float got = 0;
      kernels(t, isa).vec_dot(n, &got, wq.data(), xs.data());
      EXPECT_NEAR(got, want, 1e-5 * abs_dot(t, wq.data(), xt, xr.data(), n)) << label(t, isa, n, Pattern::kGaussian);
    }
  }
}

}  // namespace
}  // namespace ember
