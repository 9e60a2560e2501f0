// 4-bit activations through the int8 kernels (KernelSet::quantize_row_int4,
// MatmulTarget::act_bits): the quantizer at every ISA level equals the
// scalar reference (quant/quantize.h quantize_row_q8_0_int4_ref) bit for
// bit, levels in [-7, 7] with scale amax / 7; and a matmul with act_bits 4
// at every level of every backend is the reference dot of the weight rows
// with those quantized activations, bit-identical across batch shapes and
// thread counts, a format of its own beside the 8-bit one in a shared call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/backend_under_test.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/ref/dot.h"
#include "kernels/registry.h"
#include "kernels/test_weights.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {
namespace {

using testing_backend::BackendTest;
using testing_backend::gaussian;
using testing_backend::same_all;

class Int4MatmulTest : public BackendTest {};
INSTANTIATE_TEST_SUITE_P(Backends, Int4MatmulTest, ::testing::ValuesIn(testing_backend::backends_under_test()),
                         testing_backend::backend_test_name);

// Rows with the cases that matter: ties at k + 0.5 levels, an all-zero
// block, one outlier block, negative extremes, tiny values.
std::vector<float> tricky_row(int64_t n, uint32_t seed) {
  std::vector<float> x = gaussian(n, 1.f, seed);
  for (int j = 0; j < 32; ++j) x[j] = 0.f;                      // block 0: zeros (d = 0)
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.25f * (j % 29) - 3.5f;  // block 1: ties (amax 3.5: d = 0.5)
  x[64] = -40.f;                                                // block 2: one outlier
  for (int j = 0; j < 32; ++j) x[96 + j] *= 1e-30f;             // block 3: tiny
  return x;
}

TEST(ActInt4, QuantizerEqualsReferenceAtEveryLevel) {
  const int64_t n = 32 * 40;
  const std::vector<float> x = tricky_row(n, 3);
  std::vector<BlockQ8_0> want(n / 32), got(n / 32);
  quantize_row_q8_0_int4_ref(x.data(), want.data(), n);
  for (const BlockQ8_0& b : want)
    for (int8_t q : b.qs) ASSERT_TRUE(q >= -7 && q <= 7);
  EXPECT_EQ(want[0].d, f32_to_f16(0.f));
  EXPECT_EQ(want[1].d, f32_to_f16(0.5f));
  EXPECT_EQ(want[1].qs[0], -7);  // -3.5 / 0.5
  EXPECT_EQ(want[1].qs[1], -7);  // -3.25 / 0.5 = -6.5: half away from zero
  EXPECT_EQ(want[1].qs[2], -6);  // -3.0
  EXPECT_EQ(want[1].qs[3], -6);  // -5.5
  EXPECT_EQ(want[2].qs[0], -7);
  EXPECT_EQ(want[2].d, f32_to_f16(40.f / 7.f));
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > cpu_max_isa()) continue;
    SCOPED_TRACE(isa_name(isa));
    QuantizeRowFn f = kernels(DType::kQ8_0, isa).quantize_row_int4;
    ASSERT_NE(f, nullptr);
    std::memset(got.data(), 0x5a, got.size() * sizeof(BlockQ8_0));
    f(x.data(), got.data(), n);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(BlockQ8_0)), 0);
  }
  // Only the Q8_0 activation type has a 4-bit form.
  EXPECT_EQ(kernels(DType::kQ8_K).quantize_row_int4, nullptr);
  EXPECT_EQ(kernels(DType::kF32).quantize_row_int4, nullptr);
}

TEST_P(Int4MatmulTest, MatmulWithInt4ActivationsIsTheReferenceDotAndBatchInvariant) {
  const int64_t rows = 67, n_tokens = 70, n = 32 * 24, ldx = n + 5, ldy = rows + 3;
  for (DType t : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> bytes = make_weights(t, rows, n, 21 + static_cast<uint32_t>(t));
    const TensorView w = matrix_view(t, rows, n, bytes);
    std::vector<float> x = gaussian(n_tokens * ldx, 1.f, 7);
    for (int64_t j = 0; j < n; j += 97) x[j] = 25.f;  // outliers, as in real activations
    // The reference: each token quantized by the scalar twin, the scalar dot.
    VecDotFn ref = t == DType::kQ4_0 ? ref::q4_0_dot : t == DType::kQ5_0 ? ref::q5_0_dot
                                                                                   : ref::q8_0_dot;
    std::vector<float> want(n_tokens * rows), mag(n_tokens * rows), wf(n), xf(n);
    std::vector<BlockQ8_0> xq(n / 32);
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      quantize_row_q8_0_int4_ref(x.data() + tk * ldx, xq.data(), n);
      dequantize_row_q8_0_ref(xq.data(), xf.data(), n);
      for (int64_t r = 0; r < rows; ++r) {
        ref(n, &want[tk * rows + r], w.row(r), xq.data());
        dequantize_row_ref(t, w.row(r), wf.data(), n);
        for (int64_t j = 0; j < n; ++j) mag[tk * rows + r] += std::fabs(wf[j] * xf[j]);
      }
    }
    auto run = [&](Backend& be, const float* xs, int64_t nt, int bits) {
      std::vector<float> y(nt * ldy, std::nanf(""));
      const MatmulTarget tg{&w, y.data(), ldy, bits};
      be.matmul(xs, ldx, nt, &tg, 1);
      std::vector<float> c(nt * rows);
      for (int64_t tk = 0; tk < nt; ++tk) std::memcpy(&c[tk * rows], &y[tk * ldy], rows * sizeof(float));
      return c;
    };
    const std::vector<float> got = run(*backend_, x.data(), n_tokens, 4);
    for (size_t i = 0; i < got.size(); ++i) {
      // The SIMD dots add the same integer block sums in another float order:
      // a few roundings of the magnitude per block.
      const double tol = exact() ? 0.0 : 64 * testing_backend::kUlp * mag[i];
      ASSERT_LE(std::fabs(got[i] - want[i]), tol) << "element " << i;
    }
    EXPECT_TRUE(same_all(run(*backend1_, x.data(), n_tokens, 4), got));  // one thread
    for (int64_t tk : {int64_t{0}, int64_t{33}, n_tokens - 1})
      EXPECT_TRUE(same_all(run(*backend_, x.data() + tk * ldx, 1, 4).data(), got.data() + tk * rows, rows));
    EXPECT_TRUE(same_all(run(*backend_, x.data() + 30 * ldx, 5, 4).data(), got.data() + 30 * rows, 5 * rows));
    // 8-bit and 4-bit targets in one call: each gets what it gets alone.
    std::vector<float> y4(n_tokens * ldy), y8(n_tokens * ldy);
    const MatmulTarget both[] = {{&w, y8.data(), ldy, 0}, {&w, y4.data(), ldy, 4}};
    backend_->matmul(x.data(), ldx, n_tokens, both, 2);
    const std::vector<float> alone8 = run(*backend_, x.data(), n_tokens, 0);
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      ASSERT_TRUE(same_all(&y4[tk * ldy], &got[tk * rows], rows));
      ASSERT_TRUE(same_all(&y8[tk * ldy], &alone8[tk * rows], rows));
    }
    // 4-bit levels are coarser: further from the f32 product than 8-bit.
    double e4 = 0, e8 = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row_ref(t, w.row(r), wf.data(), n);
      for (int64_t tk = 0; tk < n_tokens; ++tk) {
        double exact_dot = 0;
        for (int64_t j = 0; j < n; ++j) exact_dot += static_cast<double>(wf[j]) * x[tk * ldx + j];
        e4 += std::pow(got[tk * rows + r] - exact_dot, 2);
        e8 += std::pow(alone8[tk * rows + r] - exact_dot, 2);
      }
    }
    EXPECT_GT(e4, 4 * e8);
  }
}

// The driver converts the 4-bit form once per call, as a format of its own.
TEST(MatmulDriver, ConvertsInt4ActivationsAsTheirOwnFormat) {
  const int64_t n = 256, n_tokens = 5;
  const std::vector<uint8_t> a = make_weights(DType::kQ4_0, 8, n, 1), b = make_weights(DType::kQ8_0, 4, n, 2);
  const TensorView va = matrix_view(DType::kQ4_0, 8, n, a), vb = matrix_view(DType::kQ8_0, 4, n, b);
  const std::vector<float> x = gaussian(n_tokens * n, 1.f, 5);
  std::vector<float> ya(n_tokens * 8), yb(n_tokens * 4), yc(n_tokens * 4);
  const MatmulTarget targets[] = {{&va, ya.data(), 8, 4}, {&vb, yb.data(), 4, 4}, {&vb, yc.data(), 4, 0}};
  ThreadPool pool(2);
  MatmulScratch s;
  matmul(x.data(), n, n_tokens, targets, 3, pool, s);
  EXPECT_EQ(s.converted_rows(), 2 * n_tokens);  // Q8_0 in 4-bit levels once, Q8_0 once
}

}  // namespace
}  // namespace ember
