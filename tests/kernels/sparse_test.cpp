// Sparse int8 weights (kSQ8 | C, quant/sparse.h): the reference conversion
// against dense Q8_0, the scalar twin against the dequantized weights, the
// AVX2 and AVX-512 (VBMI2) kernels and the matmul driver against the twin
// bit for bit at every ISA level and batch size. GGUF: tests/model/
// sparse_gguf_test.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/ref/dot.h"
#include "kernels/registry.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace ember {
namespace {

// rows x n floats, row r with a fraction keep(r) of its inputs nonzero
// (all-zero rows, fully dense rows, rows of mixed scale).
std::vector<float> pruned_floats(int64_t rows, int64_t n, double keep, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> f(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const double k = r % 7 == 3 ? 0.0 : r % 7 == 5 ? 1.0 : keep;
    const float scale = r % 3 == 1 ? 40.f : r % 3 == 2 ? 0.02f : 1.f;
    for (int64_t i = 0; i < n; ++i) f[r * n + i] = u(rng) < k ? g(rng) * scale : 0.f;
  }
  return f;
}

struct Sparse {
  DType type;
  int64_t rows, n;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> q8;  // the dense Q8_0 export of the same floats
  TensorView view() const { return matrix_view(type, rows, n, bytes); }
};

Sparse make_sparse(int64_t rows, int64_t n, double keep, uint32_t seed) {
  const std::vector<float> f = pruned_floats(rows, n, keep, seed);
  Sparse s{DType::kF32, rows, n, {}, std::vector<uint8_t>(dtype_row_size(DType::kQ8_0, n) * rows)};
  const size_t qrb = dtype_row_size(DType::kQ8_0, n);
  for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0_ref(f.data() + r * n, s.q8.data() + r * qrb, n);
  const int cap = sparse_capacity_q8_0(s.q8.data(), rows, n);
  s.type = dtype_sq8(cap);
  const size_t rb = dtype_row_size(s.type, n);
  s.bytes.assign(rb * rows, 0xAB);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(quantize_row_sq8_ref(f.data() + r * n, s.bytes.data() + r * rb, n, cap).is_ok());
  return s;
}

TEST(SparseFormat, TypeFamilyAndRowSize) {
  EXPECT_FALSE(dtype_is_sparse(DType::kQ8_0));
  EXPECT_FALSE(dtype_is_sparse(kSQ8));
  for (int c : {1, 32, 64}) {
    const DType t = dtype_sq8(c);
    EXPECT_TRUE(dtype_is_sparse(t));
    EXPECT_TRUE(dtype_valid(static_cast<uint32_t>(t)));
    EXPECT_EQ(dtype_sparse_capacity(t), c);
    EXPECT_EQ(dtype_row_size(t, 2048), static_cast<size_t>(32 * (12 + c)));
    EXPECT_EQ(std::string(dtype_name(t)), "sq8_c" + std::to_string(c));
    EXPECT_EQ(vec_dot_type(t), DType::kQ8_0);
  }
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ8) + 65));
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ8)));
}

TEST(SparseFormat, DecodesToTheDenseQ8_0Export) {
  const int64_t rows = 21, n = 640;
  const Sparse s = make_sparse(rows, n, 0.5, 1);
  EXPECT_EQ(dtype_sparse_capacity(s.type), 64);  // the fully dense rows set the capacity
  const Sparse s30 = make_sparse(14, n, 0.3, 2);
  for (const Sparse* p : {&s, &s30}) {
    std::vector<float> a(n), b(n);
    for (int64_t r = 0; r < p->rows; ++r) {
      dequantize_row_ref(p->type, p->bytes.data() + r * dtype_row_size(p->type, n), a.data(), n);
      dequantize_row_q8_0_ref(p->q8.data() + r * dtype_row_size(DType::kQ8_0, n), b.data(), n);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float))) << "row " << r;
    }
  }
}

TEST(SparseFormat, CapacityIsTheDensestRow) {
  const int64_t n = 256;  // 4 blocks
  std::vector<float> f(2 * n, 0.f);
  for (int i = 0; i < 9; ++i) f[i * 7] = 1.f + i;       // row 0: 9 nonzeros -> ceil(9 / 4) = 3
  for (int i = 0; i < 3; ++i) f[n + i * 50] = -2.f - i;  // row 1: 3
  std::vector<uint8_t> q(2 * dtype_row_size(DType::kQ8_0, n));
  for (int r = 0; r < 2; ++r) quantize_row_q8_0_ref(f.data() + r * n, q.data() + r * q.size() / 2, n);
  EXPECT_EQ(sparse_capacity_q8_0(q.data(), 2, n), 3);
  std::vector<uint8_t> out(dtype_row_size(dtype_sq8(2), n));
  const Status st = quantize_row_sq8_ref(f.data(), out.data(), n, 2);  // 9 > 8
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("more than 8 nonzeros"), std::string::npos) << st.message();
}

// The twin against the dequantized operands (an independent formula).
TEST(SparseKernels, TwinMatchesDequantizedDot) {
  const int64_t rows = 14, n = 1024;
  const Sparse s = make_sparse(rows, n, 0.4, 3);
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(n), wd(n), xd(n);
  for (float& v : x) v = g(rng);
  std::vector<BlockQ8_0> xq(n / 32);
  quantize_row_q8_0_ref(x.data(), xq.data(), n);
  dequantize_row_q8_0_ref(xq.data(), xd.data(), n);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* w = s.bytes.data() + r * dtype_row_size(s.type, n);
    dequantize_row_ref(s.type, w, wd.data(), n);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(wd[i]) * xd[i];
      mag += std::fabs(static_cast<double>(wd[i]) * xd[i]);
    }
    float got = 0;
    ref::sq8_dot(n, &got, w, xq.data());
    EXPECT_NEAR(got, want, 1e-5 * mag + 1e-30) << "row " << r;
  }
}

// Every level's vec_dot and vec_dot_rows, and the matmul driver at 1, 5 and
// 70 tokens on 1 and 2 threads, give the twin's bits.
TEST(SparseKernels, EveryLevelAndBatchSizeIsBitIdenticalToTheTwin) {
  const Isa saved = active_isa();
  for (double keep : {0.5, 0.3, 0.05}) {
    const int64_t rows = 37, n = 704;  // 11 blocks; rows: groups of 4 and a tail
    const Sparse s = make_sparse(rows, n, keep, 7);
    const TensorView wv = s.view();
    const size_t rb = wv.row_bytes();
    const int64_t n_tokens = 70;
    std::mt19937 rng(8);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(n_tokens * n);
    for (float& v : x) v = g(rng);
    std::vector<BlockQ8_0> xq(n_tokens * n / 32);
    for (int64_t t = 0; t < n_tokens; ++t) quantize_row_q8_0_ref(x.data() + t * n, xq.data() + t * n / 32, n);
    std::vector<float> want(n_tokens * rows);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) ref::sq8_dot(n, &want[t * rows + r], s.bytes.data() + r * rb, &xq[t * n / 32]);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " keep " << keep);
      const KernelSet& k = kernels(s.type, isa);
      ASSERT_NE(k.vec_dot, nullptr);
      std::vector<float> got(rows);
      for (int64_t r = 0; r < rows; ++r) k.vec_dot(n, &got[r], s.bytes.data() + r * rb, xq.data());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), rows * sizeof(float))) << "vec_dot";
      if (isa != Isa::kScalar) {
        ASSERT_NE(k.vec_dot_rows, nullptr);
        for (int64_t nr : {rows, int64_t{1}, int64_t{6}}) {
          std::vector<float> y(nr);
          k.vec_dot_rows(n, y.data(), s.bytes.data(), rb, xq.data(), nr);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), nr * sizeof(float))) << "rows, nr " << nr;
        }
      }
      set_active_isa(isa);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        MatmulScratch scratch;
        for (int64_t nt : {int64_t{1}, int64_t{5}, n_tokens}) {
          std::vector<float> y(nt * rows);
          matmul(wv, x.data(), n, y.data(), rows, nt, pool, scratch);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), nt * rows * sizeof(float)))
              << nt << " tokens, " << threads << " threads";
        }
      }
      set_active_isa(saved);
    }
  }
  if (__builtin_cpu_supports("avx512vbmi2") && cpu_max_isa() >= Isa::kAvx512) {
    // The VBMI2 row is installed (not the AVX2 kernels carried up).
    EXPECT_NE(kernels(dtype_sq8(32), Isa::kAvx512).vec_dot, kernels(dtype_sq8(32), Isa::kAvx2).vec_dot);
  }
}

}  // namespace
}  // namespace ember
