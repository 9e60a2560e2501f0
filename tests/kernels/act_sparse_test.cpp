// Activation-sparse column kernels (kernels/act_sparse.h): at every ISA
// level the CPU has, the column product of thresholded activations equals
// the dense kernel of that level on the same activations bit for bit (Q8_0,
// Q4_K, Q6_K; a partial last panel; random and extreme weight rows); the
// AVX-512 kernel equals its scalar twin; a list that drops one active
// channel is caught (the comparison can fail); the matmul driver gives the
// same bits with the column path forced on or off, for every token count
// and thread count, and each token the bits it gets alone; the column copy
// of an interleaved matrix equals that of its base rows; bad inputs are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/act_sparse.h"
#include "kernels/interleave.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"
#include "kernels/test_weights.h"

namespace ember {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K};
constexpr int64_t kRows = 200;  // a whole panel and a partial one
constexpr int64_t kIn = 512;

TensorView view(DType t, int64_t rows, int64_t n, const std::vector<uint8_t>& w) {
  TensorView v;
  v.type = t;
  v.n_dims = 2;
  v.ne[0] = n;
  v.ne[1] = rows;
  v.data = w.data();
  v.nbytes = w.size();
  return v;
}

// Activations [tokens, n]: gaussians thresholded at |x| <= t (about half
// zero), then: token 1 all zero; token 2 dense (no threshold); token 3 a
// whole 256-input block zero and a lone channel kept in another block.
std::vector<float> make_x(int tokens, int64_t n, uint32_t seed, float* threshold) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (auto& v : x) v = gauss(rng);
  *threshold = 0.6745f;  // the median of |N(0, 1)|
  for (int t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i) {
      float& v = x[static_cast<size_t>(t * n + i)];
      if (t == 1) v = 0;
      if (t != 2 && std::fabs(v) <= *threshold) v = 0;
      if (t == 3 && i < 256) v = 0;
      if (t == 3 && i >= 256 && i < 288) v = i == 270 ? 1.5f : 0.0f;
    }
  return x;
}

struct Lists {
  std::vector<uint16_t> idx;
  std::vector<int8_t> val;
  std::vector<int32_t> start, gsum;
  ColActive view(const void* xq) const { return {idx.data(), val.data(), start.data(), gsum.data(), xq}; }
};

Lists build(DType act, const void* xq, int64_t n) {
  Lists l;
  l.idx.resize(col_active_capacity(n));
  l.val.resize(col_active_capacity(n));
  l.start.resize(n / kColGroup + 1);
  l.gsum.resize(n / kColGroup);
  col_active_build(act, xq, n, l.idx.data(), l.val.data(), l.start.data(), l.gsum.data());
  return l;
}

std::vector<Isa> levels() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (cpu_max_isa() >= i) out.push_back(i);
  return out;
}

TEST(ActSparse, ActiveListsHoldTheNonZeroChannelsInPaddedGroups) {
  float t;
  const std::vector<float> x = make_x(4, kIn, 3, &t);
  std::vector<uint8_t> xq(dtype_row_size(DType::kQ8_0, kIn));
  kernels(DType::kQ8_0).quantize_row(x.data() + 3 * kIn, xq.data(), kIn);
  const Lists l = build(DType::kQ8_0, xq.data(), kIn);
  int64_t nonzero = 0;
  for (int64_t g = 0; g < kIn / kColGroup; ++g) {
    EXPECT_EQ((l.start[g + 1] - l.start[g]) % 4, 0);
    int32_t s = 0;
    for (int32_t e = l.start[g]; e < l.start[g + 1]; ++e) {
      EXPECT_EQ(l.idx[e] / kColGroup, g);
      s += l.val[e];
      nonzero += l.val[e] != 0;
    }
    EXPECT_EQ(s, l.gsum[g]);
  }
  int64_t want = 0;
  for (int64_t i = 0; i < kIn; ++i) want += x[3 * kIn + i] != 0;
  EXPECT_EQ(nonzero, want);
  EXPECT_EQ(l.start[0], 0);
  EXPECT_EQ(l.start[16], 0);  // the first 256 inputs are zero: no entries
}

TEST(ActSparse, ColumnsEqualTheDenseKernelOfEveryLevel) {
  for (DType t : kTypes) {
    const std::vector<uint8_t> w = make_weights(t, kRows, kIn, 11);
    const TensorView wv = view(t, kRows, kIn, w);
    auto cols = make_column_weights(wv);
    ASSERT_TRUE(cols.is_ok()) << cols.status().message();
    EXPECT_EQ(cols->n_panels, 2);
    float thr;
    const int tokens = 5;
    const std::vector<float> x = make_x(tokens, kIn, 5, &thr);
    const DType act = vec_dot_type(t);
    const size_t xb = dtype_row_size(act, kIn);
    for (Isa isa : levels()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " at " + isa_name(isa));
      std::vector<uint8_t> xq(xb * tokens);
      for (int k = 0; k < tokens; ++k) kernels(act, isa).quantize_row(x.data() + k * kIn, xq.data() + k * xb, kIn);
      std::vector<Lists> lists;
      std::vector<ColActive> views;
      for (int k = 0; k < tokens; ++k) lists.push_back(build(act, xq.data() + k * xb, kIn));
      for (int k = 0; k < tokens; ++k) views.push_back(lists[k].view(xq.data() + k * xb));
      const ColKernel ck = col_kernel(t, isa);
      ASSERT_NE(ck.fn, nullptr);
      EXPECT_EQ(ck.fast, isa >= Isa::kAvx512);
      std::vector<float> y(static_cast<size_t>(tokens * kRows), NAN);
      col_matmul_rows(*cols, ck.fn, views.data(), tokens, 0, kRows, y.data(), kRows);
      const KernelSet& dense = kernels(t, isa);
      for (int k = 0; k < tokens; ++k)
        for (int64_t r = 0; r < kRows; ++r) {
          float s;
          dense.vec_dot(kIn, &s, w.data() + r * wv.row_bytes(), xq.data() + k * xb);
          ASSERT_TRUE(same_bits(s, y[k * kRows + r])) << "token " << k << " row " << r << ": " << s << " vs "
                                                       << y[k * kRows + r];
        }
      // One token at a time, rows from the second panel only: the same bits.
      for (int k = 0; k < tokens; ++k) {
        std::vector<float> y1(kRows, NAN);
        col_matmul_rows(*cols, ck.fn, &views[k], 1, 128, kRows, y1.data(), kRows);
        for (int64_t r = 128; r < kRows; ++r) ASSERT_TRUE(same_bits(y1[r], y[k * kRows + r]));
      }
      if (isa == Isa::kAvx512) {  // the SIMD kernel against its twin, on the raw state
        for (int k = 0; k < tokens; ++k)
          for (int64_t p = 0; p < 2; ++p) {
            std::vector<float> a(2 * kColPanelRows, 0.0f), b(2 * kColPanelRows, 0.0f);
            ck.fn(*cols, p, views[k], 0, kIn / col_block_inputs(t), a.data());
            ref::act_cols_lanes(*cols, p, views[k], 0, kIn / col_block_inputs(t), b.data());
            for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_bits(a[i], b[i])) << "state " << i;
          }
      }
    }
  }
}

TEST(ActSparse, DroppingAnActiveChannelIsCaught) {
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> w = make_weights(t, kRows, kIn, 12);
    const TensorView wv = view(t, kRows, kIn, w);
    auto cols = make_column_weights(wv);
    ASSERT_TRUE(cols.is_ok());
    float thr;
    const std::vector<float> x = make_x(1, kIn, 7, &thr);
    const DType act = vec_dot_type(t);
    std::vector<uint8_t> xq(dtype_row_size(act, kIn));
    kernels(act).quantize_row(x.data(), xq.data(), kIn);
    Lists l = build(act, xq.data(), kIn);
    // The first non-zero entry of group 5 skipped (a consistent list without it).
    for (int32_t e = l.start[5]; e < l.start[6]; ++e)
      if (l.val[e]) {
        l.gsum[5] -= l.val[e];
        l.val[e] = 0;
        break;
      }
    const ColActive a = l.view(xq.data());
    std::vector<float> y(kRows);
    col_matmul_rows(*cols, col_kernel(t).fn, &a, 1, 0, kRows, y.data(), kRows);
    int differ = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      float s;
      kernels(t).vec_dot(kIn, &s, w.data() + r * wv.row_bytes(), xq.data());
      differ += !same_bits(s, y[r]);
    }
    EXPECT_GT(differ, kRows / 2);
  }
}

TEST(ActSparse, DriverGivesTheSameBitsOnOrOffForAnyBatchAndThreads) {
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> w = make_weights(t, kRows, kIn, 13);
    const TensorView wv = view(t, kRows, kIn, w);
    auto cols = make_column_weights(wv);
    ASSERT_TRUE(cols.is_ok());
    std::mt19937 rng(9);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    const int max_tok = 7;
    std::vector<float> x(static_cast<size_t>(max_tok * kIn));
    for (auto& v : x) v = gauss(rng);
    const float thr = 0.5f;
    // Reference: each token alone, dense kernels, one thread, x thresholded by hand.
    std::vector<float> xs(x.size());
    for (size_t i = 0; i < x.size(); ++i) xs[i] = std::fabs(x[i]) > thr ? x[i] : 0.0f;
    ThreadPool one(1);
    MatmulScratch scratch;
    std::vector<float> ref(static_cast<size_t>(max_tok * kRows));
    for (int k = 0; k < max_tok; ++k) matmul(wv, xs.data() + k * kIn, kIn, ref.data() + k * kRows, kRows, 1, one, scratch);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (ActSkip skip : {ActSkip::kOn, ActSkip::kOff, ActSkip::kAuto})
        for (int n = 1; n <= max_tok; ++n) {
          std::vector<float> y(static_cast<size_t>(n * kRows), NAN);
          const MatmulTarget tg{&wv, y.data(), kRows, 0, thr, &*cols, skip};
          matmul(x.data(), kIn, n, &tg, 1, pool, scratch);
          for (int64_t i = 0; i < n * kRows; ++i)
            ASSERT_TRUE(same_bits(y[i], ref[i])) << "threads " << threads << " tokens " << n << " skip "
                                                 << static_cast<int>(skip) << " element " << i;
        }
    }
  }
}

TEST(ActSparse, InterleavedRowsGiveTheSameColumns) {
  for (DType t : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 160;
    const std::vector<uint8_t> w = make_weights(t, rows, kIn, 14);
    std::vector<uint8_t> wi(w.size());
    interleave_rows(t, w.data(), rows, kIn, wi.data());
    auto a = make_column_weights(view(t, rows, kIn, w));
    auto b = make_column_weights(view(interleaved_type(t), rows, kIn, wi));
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    ASSERT_EQ(a->bytes(), b->bytes());
    EXPECT_EQ(std::memcmp(a->data.get(), b->data.get(), a->bytes()), 0);
  }
}

TEST(ActSparse, BadMatricesAreRefused) {
  const std::vector<uint8_t> f(64 * 64 * 4);
  auto r = make_column_weights(view(DType::kF32, 64, 64, f));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no column layout"), std::string::npos);
  const std::vector<uint8_t> q(dtype_row_size(DType::kQ8_0, 96) * 4);
  EXPECT_TRUE(make_column_weights(view(DType::kQ8_0, 4, 96, q)).is_ok());
  const std::vector<uint8_t> k(dtype_row_size(DType::kQ4_K, 512) * 4);
  TensorView bad = view(DType::kQ4_K, 4, 512, k);
  bad.ne[0] = 320;  // not a multiple of 256
  EXPECT_FALSE(make_column_weights(bad).is_ok());
  EXPECT_FALSE(col_kernel(DType::kQ4_0).fn);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Kernel-level timing (not a test: run with --gtest_also_run_disabled_tests
// --gtest_filter='*ActSparseTiming*'): one thread, one token, the column
// kernel against the dense decode kernel of the level on the same
// thresholded activations, best of 30 alternating runs (robust to load).
TEST(ActSparse, DISABLED_ActSparseTiming) {
  for (DType t : {DType::kQ8_0, DType::kQ4_K}) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{8192, 2048}, {2048, 8192}}) {
      const std::vector<uint8_t> w = make_weights(t, rows, n, 21);
      std::vector<uint8_t> wi(w.size());
      interleave_rows(t, w.data(), rows, n, wi.data());
      const TensorView wv = view(interleaved_type(t), rows, n, wi);
      auto cols = make_column_weights(wv);
      ASSERT_TRUE(cols.is_ok());
      std::mt19937 rng(3);
      std::normal_distribution<float> gauss(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = gauss(rng);
      std::vector<float> ax(x.size());
      for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
      for (double s : {0.4, 0.5}) {
        std::vector<float> sorted = ax;
        std::nth_element(sorted.begin(), sorted.begin() + static_cast<int64_t>(s * n), sorted.end());
        const float thr = sorted[static_cast<size_t>(s * n)];
        ThreadPool one(1);
        MatmulScratch scratch;
        std::vector<float> y(static_cast<size_t>(rows));
        double best[2] = {1e9, 1e9};
        for (int r = 0; r < 30; ++r)
          for (int k = 0; k < 2; ++k) {
            const MatmulTarget tg{&wv, y.data(), rows, 0, thr, &*cols, k ? ActSkip::kOn : ActSkip::kOff};
            const auto t0 = std::chrono::steady_clock::now();
            matmul(x.data(), n, 1, &tg, 1, one, scratch);
            const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best[k] = std::min(best[k], dt);
          }
        std::printf("%s [%lld x %lld] sparsity %.1f: dense %.3f ms, columns %.3f ms: %.2fx\n", dtype_name(t),
                    static_cast<long long>(rows), static_cast<long long>(n), s, best[0] * 1e3, best[1] * 1e3,
                    best[0] / best[1]);
      }
    }
  }
}

}  // namespace
}  // namespace ember
