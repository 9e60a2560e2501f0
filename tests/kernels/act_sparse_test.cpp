// Activation-sparse column kernels (kernels/act_sparse.h): the union active
// list of several tokens; at every ISA level the CPU has, the column product
// of thresholded activations equals the dense kernel of that level on the
// same activations bit for bit (Q8_0, Q4_K, Q6_K; panels of 128 to 2048
// rows, a padded last panel, row ranges inside a panel; several tokens in one
// union list and each alone); the AVX-512 kernel equals its scalar twin; a
// list that drops one active channel is caught (the comparison can fail);
// the matmul driver gives the same bits with the column path forced on or
// off, for every token count and thread count (threads splitting one tall
// panel's rows), and each token the bits it gets alone; the column copy of
// an interleaved matrix equals that of its base rows; bad inputs are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
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
#include "quant/blocks.h"

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

// The union list of `tokens` rows of xq (x_row_bytes apart), owning its bytes.
struct Lists {
  std::vector<uint32_t> buf;  // 4-byte aligned
  ColActive a;
  int64_t n_union = 0;
};
Lists build(DType act, const uint8_t* xq, size_t x_row_bytes, int tokens, int64_t n) {
  Lists l;
  l.buf.resize(col_active_bytes(n, tokens) / 4 + 1);
  l.a = col_active_build(act, xq, x_row_bytes, tokens, n, reinterpret_cast<uint8_t*>(l.buf.data()), &l.n_union);
  return l;
}

std::vector<Isa> levels() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (cpu_max_isa() >= i) out.push_back(i);
  return out;
}

TEST(ActSparse, ActiveListsHoldTheUnionOfTheTokensInPaddedGroups) {
  float t;
  const int tokens = 4;
  const std::vector<float> x = make_x(tokens, kIn, 3, &t);
  const size_t xb = dtype_row_size(DType::kQ8_0, kIn);
  std::vector<uint8_t> xq(xb * tokens);
  for (int k = 0; k < tokens; ++k) kernels(DType::kQ8_0).quantize_row(x.data() + k * kIn, xq.data() + k * xb, kIn);
  auto quant = [&](int k, int64_t c) { return reinterpret_cast<const BlockQ8_0*>(xq.data() + k * xb)[c / 32].qs[c % 32]; };
  for (int first : {0, 3}) {  // tokens 0..3 together; token 3 alone
    const int n_tok = first == 0 ? tokens : 1;
    const Lists l = build(DType::kQ8_0, xq.data() + first * xb, xb, n_tok, kIn);
    const ColActive& a = l.a;
    ASSERT_EQ(a.n_tok, n_tok);
    std::vector<int> seen(kIn, 0);
    for (int64_t g = 0; g < kIn / kColGroup; ++g) {
      EXPECT_EQ((a.start[g + 1] - a.start[g]) % 4, 0);
      for (int k = 0; k < n_tok; ++k) {
        int32_t s = 0;
        for (int32_t e = a.start[g]; e < a.start[g + 1]; ++e) s += a.val[k * a.cap + e];
        EXPECT_EQ(s, a.gsum[k * (kIn / kColGroup) + g]);
      }
      for (int32_t e = a.start[g]; e < a.start[g + 1]; ++e) {
        EXPECT_EQ(a.idx[e] / kColGroup, g);
        bool any = false;
        for (int k = 0; k < n_tok; ++k) {
          EXPECT_EQ(a.val[k * a.cap + e], quant(first + k, a.idx[e]) * (a.val[k * a.cap + e] != 0));
          any |= a.val[k * a.cap + e] != 0;
        }
        seen[a.idx[e]] += any;
      }
    }
    int64_t want = 0;
    for (int64_t c = 0; c < kIn; ++c) {
      bool any = false;
      for (int k = 0; k < n_tok; ++k) any |= quant(first + k, c) != 0;
      want += any;
      EXPECT_EQ(seen[c], any ? 1 : 0) << "channel " << c;
    }
    EXPECT_EQ(l.n_union, want);
    if (first == 3) {
      EXPECT_EQ(a.start[16], 0);  // token 3: the first 256 inputs are zero, no entries
    }
    if (first == 0) {
      EXPECT_EQ(l.n_union, kIn);  // token 2 is dense
    }
  }
}

TEST(ActSparse, ColumnsEqualTheDenseKernelOfEveryLevel) {
  struct Shape {
    int64_t rows, max_panel;
  };
  // 200 rows in one padded panel of 256, in two of 128; 700 rows in one of
  // 768 (passes of several tokens split it); 2100 rows in two of 1152.
  for (Shape sh : {Shape{200, kColMaxPanelRows}, Shape{200, 128}, Shape{700, kColMaxPanelRows},
                   Shape{2100, kColMaxPanelRows}}) {
    for (DType t : kTypes) {
      if (sh.rows == 2100 && t == DType::kQ6_K) continue;  // the 8-bit kernel: Q8_0 covers it
      const std::vector<uint8_t> w = make_weights(t, sh.rows, kIn, 11);
      const TensorView wv = view(t, sh.rows, kIn, w);
      auto cols = make_column_weights(wv, sh.max_panel);
      ASSERT_TRUE(cols.is_ok()) << cols.status().message();
      EXPECT_EQ(cols->n_panels, (sh.rows + sh.max_panel - 1) / sh.max_panel);
      EXPECT_GE(cols->panel_rows * cols->n_panels, sh.rows);
      EXPECT_LT(cols->panel_rows * (cols->n_panels - 1), sh.rows);
      float thr;
      const int tokens = 5;
      const std::vector<float> x = make_x(tokens, kIn, 5, &thr);
      const DType act = vec_dot_type(t);
      const size_t xb = dtype_row_size(act, kIn);
      for (Isa isa : levels()) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " at " + isa_name(isa) + ", rows " + std::to_string(sh.rows) +
                     ", panels of " + std::to_string(cols->panel_rows));
        std::vector<uint8_t> xq(xb * tokens);
        for (int k = 0; k < tokens; ++k) kernels(act, isa).quantize_row(x.data() + k * kIn, xq.data() + k * xb, kIn);
        const Lists all = build(act, xq.data(), xb, tokens, kIn);
        const ColKernel ck = col_kernel(t, isa);
        ASSERT_NE(ck.fn, nullptr);
        EXPECT_EQ(ck.fast, isa >= Isa::kAvx512);
        const int64_t rows = sh.rows;
        std::vector<float> y(static_cast<size_t>(tokens * rows), NAN);
        col_matmul_rows(*cols, ck.fn, all.a, 0, rows, y.data(), rows);
        const KernelSet& dense = kernels(t, isa);
        for (int k = 0; k < tokens; ++k)
          for (int64_t r = 0; r < rows; ++r) {
            float s;
            dense.vec_dot(kIn, &s, w.data() + r * wv.row_bytes(), xq.data() + k * xb);
            ASSERT_TRUE(same_bits(s, y[k * rows + r]))
                << "token " << k << " row " << r << ": " << s << " vs " << y[k * rows + r];
          }
        // Each token alone, rows from the second row unit on: the same bits.
        for (int k = 0; k < tokens; ++k) {
          const Lists one = build(act, xq.data() + k * xb, xb, 1, kIn);
          std::vector<float> y1(rows, NAN);
          col_matmul_rows(*cols, ck.fn, one.a, kColRowUnit, rows, y1.data(), rows);
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_TRUE(r < kColRowUnit ? std::isnan(y1[r]) : same_bits(y1[r], y[k * rows + r])) << "row " << r;
        }
        if (isa >= Isa::kAvx512) {  // the SIMD kernel against its twin, panel by panel
          std::vector<float> b(y.size(), NAN);
          for (int64_t p = 0; p < cols->n_panels; ++p)
            ref::act_cols_lanes(*cols, p, 0, cols->panel_rows, all.a, b.data(), rows);
          for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(same_bits(y[i], b[i])) << "element " << i;
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
    Lists l = build(act, xq.data(), xq.size(), 1, kIn);
    // The first non-zero entry of group 5 skipped (a consistent list without it).
    auto* val = const_cast<int8_t*>(l.a.val);
    auto* gsum = const_cast<int32_t*>(l.a.gsum);
    for (int32_t e = l.a.start[5]; e < l.a.start[6]; ++e)
      if (val[e]) {
        gsum[5] -= val[e];
        val[e] = 0;
        break;
      }
    std::vector<float> y(kRows);
    col_matmul_rows(*cols, col_kernel(t).fn, l.a, 0, kRows, y.data(), kRows);
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
  // 200 rows in panels of 128 and in one of 256; 700 rows in one panel of
  // 768 that the threads split by rows.
  for (auto [rows, max_panel] : {std::pair<int64_t, int64_t>{200, 128}, {200, kColMaxPanelRows}, {700, kColMaxPanelRows}})
    for (DType t : kTypes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + ", rows " + std::to_string(rows));
      const std::vector<uint8_t> w = make_weights(t, rows, kIn, 13);
      const TensorView wv = view(t, rows, kIn, w);
      auto cols = make_column_weights(wv, max_panel);
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
      std::vector<float> ref(static_cast<size_t>(max_tok * rows));
      for (int k = 0; k < max_tok; ++k)
        matmul(wv, xs.data() + k * kIn, kIn, ref.data() + k * rows, rows, 1, one, scratch);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (ActSkip skip : {ActSkip::kOn, ActSkip::kOff, ActSkip::kAuto})
          for (int n = 1; n <= max_tok; ++n) {
            std::vector<float> y(static_cast<size_t>(n * rows), NAN);
            const MatmulTarget tg{&wv, y.data(), rows, 0, thr, &*cols, skip};
            matmul(x.data(), kIn, n, &tg, 1, pool, scratch);
            for (int64_t i = 0; i < n * rows; ++i)
              ASSERT_TRUE(same_bits(y[i], ref[i])) << "threads " << threads << " tokens " << n << " skip "
                                                   << static_cast<int>(skip) << " element " << i;
          }
      }
    }
}

// The auto rule (col_auto_rule): with a deliberately wrong column copy the
// path a call takes shows in its bits: auto takes the columns for one Q8_0
// token (union about 50% <= 0.55), not for two tokens, nor for a dense token, nor
// for Q4_K / Q6_K; skip always does.
TEST(ActSparse, AutoTakesTheColumnsOnlyWhereItsRuleSays) {
  if (!col_kernel(DType::kQ8_0).fast) GTEST_SKIP() << "no SIMD column kernel on this CPU: auto stays dense";
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> w = make_weights(t, kRows, kIn, 15);
    const TensorView wv = view(t, kRows, kIn, w);
    auto cols = make_column_weights(wv);
    ASSERT_TRUE(cols.is_ok());
    std::memset(cols->data.get() + cols->bytes() / 2, 0x5a, cols->bytes() / 4);  // wrong levels and scales
    float thr;
    const std::vector<float> x = make_x(2, kIn, 17, &thr);  // token 0: half zero
    ThreadPool pool(1);
    MatmulScratch scratch;
    auto differs = [&](const float* xs, int n, ActSkip skip) {
      std::vector<float> y(static_cast<size_t>(n * kRows)), ref(y.size());
      const MatmulTarget tg{&wv, y.data(), kRows, 0, thr, &*cols, skip};
      matmul(xs, kIn, n, &tg, 1, pool, scratch);
      const MatmulTarget td{&wv, ref.data(), kRows, 0, thr, nullptr, ActSkip::kOff};
      matmul(xs, kIn, n, &td, 1, pool, scratch);
      for (size_t i = 0; i < y.size(); ++i)
        if (!same_bits(y[i], ref[i])) return true;
      return false;
    };
    EXPECT_TRUE(differs(x.data(), 1, ActSkip::kOn));
    EXPECT_EQ(differs(x.data(), 1, ActSkip::kAuto), t == DType::kQ8_0);
    EXPECT_FALSE(differs(x.data(), 2, ActSkip::kAuto));
    const std::vector<float> dense_x(kIn, 1.0f);  // every input above the threshold: union 100%
    EXPECT_FALSE(differs(dense_x.data(), 1, ActSkip::kAuto));
    EXPECT_FALSE(differs(x.data(), 1, ActSkip::kOff));
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

// Panels cut for the decode threads: each thread's task is whole panels.
TEST(ActSparse, PanelsAreCutForTheDecodeThreads) {
  EXPECT_EQ(col_panel_rows(2048, 1), 2048);
  EXPECT_EQ(col_panel_rows(2048, 2), 1024);
  EXPECT_EQ(col_panel_rows(8192, 2), kColMaxPanelRows);
  EXPECT_EQ(col_panel_rows(512, 2), 256);
  EXPECT_EQ(col_panel_rows(100, 4), kColRowUnit);
  EXPECT_EQ(col_panel_rows(3000, 2), 1536);  // 1500 rounded up to whole units
  EXPECT_EQ(col_panel_rows(2048, 0), 2048);   // no threads: one
  const std::vector<uint8_t> w = make_weights(DType::kQ8_0, 2048, 256, 5);
  auto c = make_column_weights(view(DType::kQ8_0, 2048, 256, w), col_panel_rows(2048, 2));
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->panel_rows, 1024);
  EXPECT_EQ(c->n_panels, 2);
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
// --gtest_filter='*ActSparseTiming*'): one thread, the column kernel against
// the dense decode kernel of the level on the same thresholded activations
// (1, 2, 4 and 8 tokens of independent gaussians: their union grows), cold
// (a 64 MiB buffer is read between calls, so the weights come from DRAM as
// in decode), the median and best of 15 alternating runs. The bytes floor:
// dense / columns >= 1 / (the fraction of the union's columns read).
// EMBER_ACT_TIMING_TOKENS (e.g. "1") restricts the token counts,
// EMBER_ACT_TIMING_TYPE (q8_0, q4_K, q6_K) the type,
// EMBER_ACT_TIMING_SHAPE (e.g. "2048x1024") sets the shape, and
// EMBER_ACT_TIMING_WARM=1 leaves the weights in the caches (compute, not bytes),
// EMBER_ACT_TIMING_THREADS (default 1) sets the pool (decode runs on 2).
TEST(ActSparse, DISABLED_ActSparseTiming) {
  std::vector<uint8_t> flush(size_t{64} << 20, 1);
  volatile uint64_t sink = 0;
  const bool warm = std::getenv("EMBER_ACT_TIMING_WARM") != nullptr;  // no eviction: the kernels' compute
  auto evict = [&] {
    if (warm) return;
    uint64_t s = 0;
    for (size_t i = 0; i < flush.size(); i += 64) s += flush[i]++;
    sink = sink + s;
  };
  std::vector<int> token_counts = {1, 2, 4, 8};
  if (const char* e = std::getenv("EMBER_ACT_TIMING_TOKENS")) token_counts = {std::atoi(e)};
  std::vector<DType> types = {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K};
  if (const char* e = std::getenv("EMBER_ACT_TIMING_TYPE")) types = {std::string(e) == "q4_K" ? DType::kQ4_K : std::string(e) == "q6_K" ? DType::kQ6_K : DType::kQ8_0};
  for (DType t : types) {
    std::vector<std::pair<int64_t, int64_t>> shapes = {{8192, 2048}, {2048, 8192}};
    if (const char* e = std::getenv("EMBER_ACT_TIMING_SHAPE")) {  // ROWSxINPUTS
      long long r = 0, i = 0;
      if (std::sscanf(e, "%lldx%lld", &r, &i) == 2) shapes = {{r, i}};
    }
    for (auto [rows, n] : shapes) {
      const std::vector<uint8_t> w = make_weights(t, rows, n, 21);
      std::vector<uint8_t> wi(w.size());
      interleave_rows(t, w.data(), rows, n, wi.data());
      const TensorView wv = view(interleaved_type(t), rows, n, wi);
      auto cols = make_column_weights(wv);
      ASSERT_TRUE(cols.is_ok());
      for (int tokens : token_counts) {
        std::mt19937 rng(3);
        std::normal_distribution<float> gauss(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(n * tokens));
        for (auto& v : x) v = gauss(rng);
        std::vector<float> ax(x.size());
        for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
        for (double s : {0.4, 0.5}) {
          std::vector<float> sorted = ax;
          std::nth_element(sorted.begin(), sorted.begin() + static_cast<int64_t>(s * sorted.size()), sorted.end());
          const float thr = sorted[static_cast<size_t>(s * sorted.size())];
          int64_t active = 0;
          for (int64_t c = 0; c < n; ++c) {
            bool any = false;
            for (int k = 0; k < tokens; ++k) any |= ax[k * n + c] > thr;
            active += any;
          }
          const char* th = std::getenv("EMBER_ACT_TIMING_THREADS");
          ThreadPool pool(th ? std::max(1, std::atoi(th)) : 1);
          MatmulScratch scratch;
          std::vector<float> y(static_cast<size_t>(rows * tokens));
          std::vector<double> times[2];
          for (int r = 0; r < 15; ++r)
            for (int k = 0; k < 2; ++k) {
              const MatmulTarget tg{&wv, y.data(), rows, 0, thr, &*cols, k ? ActSkip::kOn : ActSkip::kOff};
              evict();
              const auto t0 = std::chrono::steady_clock::now();
              matmul(x.data(), n, tokens, &tg, 1, pool, scratch);
              times[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
          double med[2], best[2];
          for (int k = 0; k < 2; ++k) {
            std::sort(times[k].begin(), times[k].end());
            med[k] = times[k][times[k].size() / 2];
            best[k] = times[k][0];
          }
          const double frac = static_cast<double>(active) / static_cast<double>(n);
          std::printf(
              "%s [%lld x %lld] %d token(s) sparsity %.1f (union %.0f%% of columns): dense %.3f ms (best %.3f), "
              "columns %.3f ms (best %.3f): %.2fx (best %.2fx); bytes floor %.2fx; dense %.1f GB/s, columns %.1f GB/s\n",
              dtype_name(t), static_cast<long long>(rows), static_cast<long long>(n), tokens, s, 100 * frac,
              med[0] * 1e3, best[0] * 1e3, med[1] * 1e3, best[1] * 1e3, med[0] / med[1], best[0] / best[1],
              1.0 / frac, static_cast<double>(w.size()) / med[0] * 1e-9,
              frac * static_cast<double>(cols->bytes()) / med[1] * 1e-9);
          std::fflush(stdout);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember
