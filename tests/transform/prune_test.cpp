// Unstructured and N:M pruning (transform/prune.h, transform/sparsegpt.h):
// masks with exactly the requested counts and patterns; Wanda's score
// against a hand-computed case; SparseGPT's masks and error-fed weights
// against an independent NumPy port of the reference implementation
// (tools/gen_sparsegpt_fixture.py), and on a matrix larger than its thread
// and cache tiles against the plain loop; joint pruning and quantization keeps
// exact zeros; the error feedback lowers the layer's output error; OWL's
// allocation; whole-model pruning on a tiny llama, layer by layer; bad
// options give errors.
#include "transform/prune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "eval/model_compare.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "quant/sparse.h"
#include "transform/gen_model.h"
#include "transform/gptq.h"
#include "transform/imatrix.h"
#include "transform/sparsegpt.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

std::vector<float> random_matrix(int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> w(static_cast<size_t>(n_out * n_in));
  for (float& x : w) x = d(rng);
  return w;
}

int64_t count(const uint8_t* m, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += m[i];
  return c;
}

TEST(PruneMasks, ExactCountsAndPatterns) {
  const int64_t n_out = 24, n_in = 96;
  const std::vector<float> w = random_matrix(n_out, n_in, 1);
  std::vector<double> col_sq(n_in);
  for (int64_t j = 0; j < n_in; ++j) col_sq[j] = 0.1 + j % 7;
  std::vector<uint8_t> m(n_out * n_in);
  for (double s : {0.0, 0.3, 0.5, 0.7, 0.93}) {
    magnitude_mask(w.data(), n_out, n_in, s, {}, m.data());
    EXPECT_EQ(count(m.data(), m.size()), static_cast<int64_t>(s * n_out * n_in)) << s;
    wanda_mask(w.data(), n_out, n_in, col_sq.data(), s, {}, m.data());
    for (int64_t r = 0; r < n_out; ++r)
      EXPECT_EQ(count(m.data() + r * n_in, n_in), static_cast<int64_t>(s * n_in)) << "row " << r << " s " << s;
  }
  for (PrunePattern p : {PrunePattern{2, 4}, PrunePattern{4, 8}, PrunePattern{1, 4}}) {
    for (int which = 0; which < 2; ++which) {
      if (which == 0) magnitude_mask(w.data(), n_out, n_in, 0, p, m.data());
      else wanda_mask(w.data(), n_out, n_in, col_sq.data(), 0, p, m.data());
      for (int64_t r = 0; r < n_out; ++r)
        for (int64_t g = 0; g < n_in; g += p.m) ASSERT_EQ(count(m.data() + r * n_in + g, p.m), p.n);
    }
  }
  // Magnitude keeps the largest |w|: every pruned one is <= every kept one.
  magnitude_mask(w.data(), n_out, n_in, 0.5, {}, m.data());
  float max_pruned = 0, min_kept = 1e30f;
  for (size_t i = 0; i < w.size(); ++i)
    (m[i] ? max_pruned : min_kept) = m[i] ? std::max(max_pruned, std::fabs(w[i])) : std::min(min_kept, std::fabs(w[i]));
  EXPECT_LE(max_pruned, min_kept);
}

// The per-row quota (PruneOptions::per_row): every row of a matrix whose
// rows differ in scale loses exactly floor(s * n_in) (magnitude) or
// floor(s * B) per batch (SparseGPT), where one quota per matrix leaves the
// large rows denser; and the sparse format's capacity (set by the densest
// row) falls to the target's.
TEST(PruneMasks, PerRowQuota) {
  const int64_t n_out = 24, n_in = 256;
  std::vector<float> w = random_matrix(n_out, n_in, 5);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t c = 0; c < n_in; ++c) w[r * n_in + c] *= 1.0f + static_cast<float>(r % 4);
  std::vector<uint8_t> m(n_out * n_in);
  for (double s : {0.5, 0.7}) {
    SCOPED_TRACE(s);
    magnitude_mask(w.data(), n_out, n_in, s, {}, m.data(), true);
    for (int64_t r = 0; r < n_out; ++r) {
      ASSERT_EQ(count(m.data() + r * n_in, n_in), static_cast<int64_t>(s * n_in)) << "row " << r;
      float max_pruned = 0, min_kept = 1e30f;  // within a row, the smallest |w| go
      for (int64_t c = 0; c < n_in; ++c) {
        const float a = std::fabs(w[r * n_in + c]);
        if (m[r * n_in + c]) max_pruned = std::max(max_pruned, a);
        else min_kept = std::min(min_kept, a);
      }
      EXPECT_LE(max_pruned, min_kept) << "row " << r;
    }
    // Bytes: the densest row sets the sparse capacity (kept values per 64).
    auto capacity = [&](const std::vector<uint8_t>& mask) {
      std::vector<float> pruned = w;
      for (size_t i = 0; i < w.size(); ++i)
        if (mask[i]) pruned[i] = 0;
      std::vector<uint8_t> q(dtype_row_size(DType::kQ8_0, n_in) * n_out);
      for (int64_t r = 0; r < n_out; ++r)
        quantize_row_q8_0_ref(pruned.data() + r * n_in, q.data() + r * dtype_row_size(DType::kQ8_0, n_in), n_in);
      return sparse_capacity_q8_0(q.data(), n_out, n_in);
    };
    const int per_row = capacity(m);
    EXPECT_LE(per_row, (n_in - static_cast<int64_t>(s * n_in) + 3) / 4);
    magnitude_mask(w.data(), n_out, n_in, s, {}, m.data(), false);
    EXPECT_GT(capacity(m), per_row + 4) << "one quota per matrix: the large rows stay dense";
  }
  // SparseGPT: per row and batch of 128.
  std::vector<double> H(n_in * n_in, 0.0);
  const std::vector<float> x = random_matrix(300, n_in, 6);
  for (int64_t t = 0; t < 300; ++t)
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j) H[i * n_in + j] += double{x[t * n_in + i]} * x[t * n_in + j];
  ThreadPool pool(2);
  for (bool per_row : {true, false}) {
    SparseGptOptions o;
    o.sparsity = 0.7;
    o.per_row = per_row;
    std::vector<float> sg = w;
    ASSERT_TRUE(sparsegpt_prune(sg.data(), n_out, n_in, H.data(), o, nullptr, DType::kF32, nullptr, m.data(), pool)
                    .is_ok());
    int64_t lo = n_in, hi = 0;
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t b = 0; b < n_in; b += 128) {
        const int64_t c = count(m.data() + r * n_in + b, 128);
        if (per_row) {
          ASSERT_EQ(c, static_cast<int64_t>(0.7 * 128)) << "row " << r << " batch " << b;
        }
        lo = std::min(lo, c), hi = std::max(hi, c);
      }
    if (!per_row) {
      EXPECT_GT(hi - lo, 10) << "one quota per batch: rows differ";
    }
    for (size_t i = 0; i < sg.size(); ++i)
      if (m[i]) {
        ASSERT_EQ(sg[i], 0.0f);
      }
  }
}

TEST(PruneMasks, LayerSparsityNamesRoundTrip) {
  for (LayerSparsity l : {LayerSparsity::kUniform, LayerSparsity::kOwl, LayerSparsity::kKl})
    EXPECT_EQ(layer_sparsity_from_name(layer_sparsity_name(l)), l);
  EXPECT_FALSE(layer_sparsity_from_name("outlier").has_value());
}

TEST(PruneMasks, WandaScoreByHand) {
  // One row [1, -2, 3, -4] with column energies [100, 1, 1, 0.01]:
  // |w| * sqrt(col_sq) = [10, 2, 3, 0.4] -> half pruned: columns 3 and 1;
  // magnitude would prune columns 0 and 1.
  const float w[4] = {1, -2, 3, -4};
  const double col_sq[4] = {100, 1, 1, 0.01};
  uint8_t m[4];
  wanda_mask(w, 1, 4, col_sq, 0.5, {}, m);
  EXPECT_EQ(std::vector<uint8_t>(m, m + 4), (std::vector<uint8_t>{0, 1, 0, 1}));
  magnitude_mask(w, 1, 4, 0.5, {}, m);
  EXPECT_EQ(std::vector<uint8_t>(m, m + 4), (std::vector<uint8_t>{1, 1, 0, 0}));
  // 1:2 per group: [10, 2 | 3, 0.4] -> columns 1 and 3.
  wanda_mask(w, 1, 4, col_sq, 0, {1, 2}, m);
  EXPECT_EQ(std::vector<uint8_t>(m, m + 4), (std::vector<uint8_t>{0, 1, 0, 1}));
  // Comparison within each row: a row of large weights keeps its share.
  const float w2[8] = {100, 200, 300, 400, 1, 2, 3, 4};
  const double ones[4] = {1, 1, 1, 1};
  uint8_t m2[8];
  wanda_mask(w2, 2, 4, ones, 0.5, {}, m2);
  EXPECT_EQ(std::vector<uint8_t>(m2, m2 + 8), (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0}));
}

TEST(SparseGpt, MatchesTheReferenceImplementation) {
  std::ifstream f(EMBER_SOURCE_DIR "/tests/data/transform/sparsegpt_ref.bin", std::ios::binary);
  ASSERT_TRUE(f.good());
  auto rd = [&](void* p, size_t n) { f.read(static_cast<char*>(p), static_cast<std::streamsize>(n)); };
  int32_t hdr[3];
  rd(hdr, sizeof(hdr));
  const int64_t n_out = hdr[0], n_in = hdr[1];
  std::vector<float> w0(n_out * n_in);
  std::vector<double> H(n_in * n_in);
  rd(w0.data(), w0.size() * 4);
  rd(H.data(), H.size() * 8);
  ThreadPool pool(2);
  for (int c = 0; c < hdr[2]; ++c) {
    SCOPED_TRACE(c);
    int32_t kind, n, m, block;
    double s, damp;
    rd(&kind, 4), rd(&s, 8), rd(&n, 4), rd(&m, 4), rd(&block, 4), rd(&damp, 8);
    std::vector<uint8_t> fixed(n_out * n_in), want_mask(n_out * n_in), mask(n_out * n_in);
    if (kind == 2) rd(fixed.data(), fixed.size());
    std::vector<double> want(n_out * n_in);
    rd(want.data(), want.size() * 8);
    rd(want_mask.data(), want_mask.size());
    ASSERT_TRUE(f.good());
    SparseGptOptions o;
    o.sparsity = s, o.prune_n = n, o.prune_m = m, o.block_size = block, o.damp = damp;
    std::vector<float> w = w0;
    ASSERT_TRUE(sparsegpt_prune(w.data(), n_out, n_in, H.data(), o, kind == 2 ? fixed.data() : nullptr, DType::kF32,
                                nullptr, mask.data(), pool)
                    .is_ok());
    EXPECT_EQ(mask, want_mask);
    double scale = 0;
    for (double x : want) scale = std::max(scale, std::fabs(x));
    for (int64_t i = 0; i < n_out * n_in; ++i) {
      ASSERT_NEAR(w[i], want[i], 1e-5 * scale) << i;
      if (mask[i]) {
        ASSERT_EQ(w[i], 0.0f);
      }
    }
  }
}

// Output error of W' against W on inputs with Hessian H: tr((W - W') H (W - W')^T).
double output_error(const std::vector<float>& w, const std::vector<float>& p, const std::vector<double>& H,
                    int64_t n_out, int64_t n_in) {
  double e = 0;
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j)
        e += (w[r * n_in + i] - p[r * n_in + i]) * H[i * n_in + j] * (w[r * n_in + j] - p[r * n_in + j]);
  return e;
}

TEST(SparseGpt, ErrorFeedbackAndJointQuantization) {
  // Inputs near a 24-dimensional subspace (as real activations are): the
  // kept weights can make up for most of what the pruned ones did.
  const int64_t n_out = 16, n_in = 256, n_tok = 400, rank = 24;
  const std::vector<float> w = random_matrix(n_out, n_in, 7);
  const std::vector<float> basis = random_matrix(n_in, rank, 8);
  std::mt19937 rng(3);
  std::normal_distribution<double> d(0, 1);
  std::vector<double> x(n_tok * n_in), H(n_in * n_in, 0.0), col_sq(n_in, 0.0), z(rank);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (double& v : z) v = d(rng);
    for (int64_t j = 0; j < n_in; ++j) {
      double v = 0.1 * d(rng);
      for (int64_t k = 0; k < rank; ++k) v += basis[j * rank + k] * z[k];
      x[t * n_in + j] = v * (1 + j % 5);
    }
  }
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j) H[i * n_in + j] += x[t * n_in + i] * x[t * n_in + j];
  for (int64_t j = 0; j < n_in; ++j) col_sq[j] = H[j * n_in + j];
  ThreadPool pool(2);
  std::vector<uint8_t> mask(n_out * n_in), out_mask(n_out * n_in);
  wanda_mask(w.data(), n_out, n_in, col_sq.data(), 0.5, {}, mask.data());
  std::vector<float> zeroed = w;
  for (size_t i = 0; i < w.size(); ++i)
    if (mask[i]) zeroed[i] = 0;
  // The same mask with the error fed back: a lower output error.
  std::vector<float> fed = w;
  SparseGptOptions o;
  ASSERT_TRUE(sparsegpt_prune(fed.data(), n_out, n_in, H.data(), o, mask.data(), DType::kF32, nullptr, out_mask.data(),
                              pool)
                  .is_ok());
  EXPECT_EQ(out_mask, mask);
  const double e_zero = output_error(w, zeroed, H, n_out, n_in), e_fed = output_error(w, fed, H, n_out, n_in);
  EXPECT_LT(e_fed, 0.5 * e_zero) << e_fed << " vs " << e_zero;
  // SparseGPT's own masks at 50%: exactly half of every batch of 128.
  std::vector<float> sg = w;
  ASSERT_TRUE(sparsegpt_prune(sg.data(), n_out, n_in, H.data(), o, nullptr, DType::kF32, nullptr, out_mask.data(), pool)
                  .is_ok());
  EXPECT_EQ(count(out_mask.data(), out_mask.size()), n_out * n_in / 2);
  EXPECT_LT(output_error(w, sg, H, n_out, n_in), e_fed);
  // Joint pruning and Q4_0 / Q8_0 / Q6_K rounding: masked weights decode to
  // exactly 0, the others to the returned values; 2:4 kept.
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<float> q = w;
    std::vector<uint8_t> dst(dtype_row_size(t, n_in) * n_out);
    SparseGptOptions nm;
    nm.prune_n = 2, nm.prune_m = 4;
    ASSERT_TRUE(sparsegpt_prune(q.data(), n_out, n_in, H.data(), nm, nullptr, t, dst.data(), out_mask.data(), pool)
                    .is_ok());
    std::vector<float> dec(n_in);
    for (int64_t r = 0; r < n_out; ++r) {
      dequantize_row_ref(t, dst.data() + r * dtype_row_size(t, n_in), dec.data(), n_in);
      for (int64_t j = 0; j < n_in; ++j) {
        ASSERT_EQ(dec[j], q[r * n_in + j]) << r << "," << j;
        if (out_mask[r * n_in + j]) {
          ASSERT_EQ(dec[j], 0.0f);
        }
      }
      for (int64_t g = 0; g < n_in; g += 4) ASSERT_EQ(count(out_mask.data() + r * n_in + g, 4), 2);
    }
  }
  // Types without an exact zero, bad options.
  std::vector<float> q = w;
  std::vector<uint8_t> dst(dtype_row_size(DType::kQ4_K, n_in) * n_out);
  EXPECT_FALSE(sparsegpt_prune(q.data(), n_out, n_in, H.data(), o, nullptr, DType::kQ4_K, dst.data(), nullptr, pool)
                   .is_ok());
  SparseGptOptions bad;
  bad.sparsity = 1.0;
  EXPECT_FALSE(sparsegpt_prune(q.data(), n_out, n_in, H.data(), bad, nullptr, DType::kF32, nullptr, nullptr, pool).is_ok());
  bad = {};
  bad.prune_n = 3, bad.prune_m = 2;
  EXPECT_FALSE(sparsegpt_prune(q.data(), n_out, n_in, H.data(), bad, nullptr, DType::kF32, nullptr, nullptr, pool).is_ok());
}

TEST(SparseGpt, LargerThanItsTilesMatchesThePlainLoop) {
  // Rows over several thread chunks, columns over several batches and
  // tiles of the lazy update: the same masks and (to rounding) weights as
  // the plain algorithm (every later column updated after each column), and
  // the same bits with 1 or 3 threads.
  const int64_t n_out = 40, n_in = 640, n_tok = 700;
  const std::vector<float> w0 = random_matrix(n_out, n_in, 21);
  const std::vector<float> x = random_matrix(n_tok, n_in, 22);
  std::vector<double> H(n_in * n_in, 0.0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t i = 0; i < n_in; ++i) {
      const double xi = x[t * n_in + i] + 0.5 * x[t * n_in + (i + 1) % n_in];
      for (int64_t j = 0; j < n_in; ++j) H[i * n_in + j] += xi * (x[t * n_in + j] + 0.5 * x[t * n_in + (j + 1) % n_in]);
    }
  SparseGptOptions o;
  o.sparsity = 0.6;
  GptqHinv hv;
  ASSERT_TRUE(gptq_prepare_hinv(H.data(), n_in, o.damp, false, &hv).is_ok());
  const std::vector<double>& U = hv.U;
  std::vector<double> want(w0.begin(), w0.end());
  std::vector<uint8_t> want_mask(n_out * n_in, 0);
  for (int64_t p1 = 0; p1 < n_in; p1 += 128) {
    const int64_t p2 = std::min(n_in, p1 + 128), nb = p2 - p1, k = static_cast<int64_t>(o.sparsity * n_out * nb);
    std::vector<std::pair<double, int64_t>> sc;
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t j = 0; j < nb; ++j) {
        const double v = want[r * n_in + p1 + j];
        const double u = U[(p1 + j) * n_in + p1 + j];
        sc.push_back({v * v * (1.0 / (u * u)), r * nb + j});
      }
    std::sort(sc.begin(), sc.end());
    for (int64_t i = 0; i < k; ++i) want_mask[(sc[i].second / nb) * n_in + p1 + sc[i].second % nb] = 1;
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t p = p1; p < p2; ++p) {
        double* wr = &want[r * n_in];
        const double q = want_mask[r * n_in + p] ? 0.0 : wr[p], e = (wr[p] - q) / U[p * n_in + p];
        wr[p] = q;
        for (int64_t c = p + 1; c < n_in; ++c) wr[c] -= e * U[p * n_in + c];
      }
  }
  std::vector<float> got[2];
  std::vector<uint8_t> mask[2];
  for (int t = 0; t < 2; ++t) {
    ThreadPool pool(t == 0 ? 1 : 3);
    got[t] = w0;
    mask[t].assign(n_out * n_in, 0);
    ASSERT_TRUE(sparsegpt_prune(got[t].data(), n_out, n_in, H.data(), o, nullptr, DType::kF32, nullptr,
                                mask[t].data(), pool)
                    .is_ok());
  }
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(mask[0], mask[1]);
  EXPECT_EQ(mask[0], want_mask);
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (int64_t i = 0; i < n_out * n_in; ++i) ASSERT_NEAR(got[0][i], want[i], 1e-5 * scale) << i;
}

TEST(Owl, LayerSparsityAndOutlierRatio) {
  const std::vector<double> s = owl_layer_sparsity({1, 2, 3}, 0.7, 0.08);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_NEAR(s[0], 0.78, 1e-12);  // the fewest outliers: pruned most
  EXPECT_NEAR(s[1], 0.70, 1e-12);
  EXPECT_NEAR(s[2], 0.62, 1e-12);
  for (double x : owl_layer_sparsity({4, 4}, 0.5, 0.08)) EXPECT_EQ(x, 0.5);
  // The reference's mapping (luuyin/OWL lib/prune_all.py): the ratios scaled
  // to [0, 2 lambda], shifted so their mean is 1 - S, over layers (not
  // parameters). The spread is 2 lambda, not +-lambda around S: with one
  // outlier-rich layer among four it keeps 0.12 more density than S gives.
  const std::vector<double> k = owl_layer_sparsity({0.01, 0.01, 0.01, 0.05}, 0.7, 0.08);
  ASSERT_EQ(k.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(k[i], 0.74, 1e-12);
  EXPECT_NEAR(k[3], 0.58, 1e-12);
  // Scores |w| sqrt(col_sq): [1, 1, 1, 1, 1, 1, 1, 100] -> mean 13.375; above 5x: one of eight.
  const float w[8] = {1, 1, 1, 1, 1, 1, 1, 10};
  const double cs[4] = {1, 1, 1, 100};
  EXPECT_DOUBLE_EQ(owl_outlier_ratio({{w, 2, 4, cs}}, 5.0), 1.0 / 8);
  EXPECT_DOUBLE_EQ(owl_outlier_ratio({{w, 2, 4, cs}}, 10.0), 0.0);
}

TEST(PrunePattern, Parse) {
  EXPECT_TRUE(parse_prune_pattern("unstructured")->unstructured());
  EXPECT_EQ(parse_prune_pattern("2:4")->n, 2);
  EXPECT_EQ(parse_prune_pattern("4:8")->m, 8);
  for (const char* bad : {"", "2:2", "0:4", "4:2", "2:", "x:4", "2:4:8", "2:100"})
    EXPECT_FALSE(parse_prune_pattern(bad).is_ok()) << bad;
}

class PruneModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_prune_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    GenModelShape s = *gen_model_arch_defaults("llama");
    s.n_layer = 2, s.n_embd = 128, s.n_ff = 256, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 256;
    GenModelOptions o;
    o.type = DType::kF32;
    o.seed = 5;
    o.weight_std = 0.08f;
    path_ = (dir_ / "tiny.gguf").string();
    ASSERT_TRUE(write_random_model(s, o, path_, pool_).is_ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<int32_t> tokens(int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 17 + 3 + (i * i) % 7) % 300);
    return t;
  }

  ThreadPool pool_{2};
  fs::path dir_;
  std::string path_;
};

TEST_F(PruneModelTest, EveryMethodPrunesEveryBlockMatrix) {
  for (PruneMethod m : {PruneMethod::kMagnitude, PruneMethod::kWanda, PruneMethod::kSparseGpt}) {
    for (bool joint : {false, true}) {
      for (PrunePattern pat : {PrunePattern{}, PrunePattern{2, 4}}) {
        SCOPED_TRACE(std::string(prune_method_name(m)) + (joint ? " joint q8_0 " : " ") + prune_pattern_name(pat));
        auto src = open_model_file(path_);
        ASSERT_TRUE(src.is_ok());
        ConvertOptions co;
        co.type = joint ? DType::kQ8_0 : DType::kF32;
        auto plan = plan_quantization(**src, co);
        ASSERT_TRUE(plan.is_ok());
        if (joint)
          for (QuantPlanEntry& e : plan->entries)
            if (e.layer >= 0 && e.ne.size() == 2) e.method = QuantMethod::kGptq;
        PruneOptions o;
        o.method = m;
        o.pattern = pat;
        o.sparsity = pat.unstructured() ? 0.6 : pat.sparsity();
        o.window = 64;
        PruneReport rep;
        auto out = prune_model(std::move(src.value()), &*plan, tokens(256), o, pool_, &rep);
        ASSERT_TRUE(out.is_ok()) << out.status().message();
        EXPECT_EQ(rep.matrices, 14);
        EXPECT_EQ(rep.joint, joint ? 14 : 0);
        int64_t zeros = 0, total = 0;
        for (const QuantPlanEntry& e : plan->entries) {
          if (e.layer < 0 || e.ne.size() != 2) continue;
          const TensorView& t = *(*out)->tensor(e.name);
          EXPECT_EQ(t.type, joint ? DType::kQ8_0 : DType::kF32) << e.name;
          EXPECT_EQ(e.method, QuantMethod::kCopy) << e.name;
          std::vector<float> row(t.ne[0]);
          for (int64_t r = 0; r < t.nrows(); ++r) {
            dequantize_row_ref(t.type, t.row(r), row.data(), t.ne[0]);
            for (int64_t j = 0; j < t.ne[0]; ++j) zeros += row[j] == 0.0f;
            if (!pat.unstructured())
              for (int64_t g = 0; g < t.ne[0]; g += 4) {
                int z = 0;
                for (int k = 0; k < 4; ++k) z += row[g + k] == 0.0f;
                ASSERT_GE(z, 2);
              }
          }
          total += t.nelements();
        }
        EXPECT_EQ(rep.weights, total);
        EXPECT_GE(zeros, rep.pruned);  // pruned weights are exact zeros
        EXPECT_NEAR(static_cast<double>(rep.pruned) / total, pat.unstructured() ? 0.6 : 0.5, 0.01);
        auto model = Model::from_file(std::move(out.value()));
        EXPECT_TRUE(model.is_ok());
      }
    }
  }
}

TEST_F(PruneModelTest, OwlSpreadsSparsityAndErrors) {
  auto src = open_model_file(path_);
  ConvertOptions f32;
  f32.type = DType::kF32;
  auto plan = plan_quantization(**src, f32);
  PruneOptions o;
  o.method = PruneMethod::kWanda;
  o.sparsity = 0.7;
  o.layers = LayerSparsity::kOwl;
  o.owl_lambda = 0.05;
  o.window = 64;
  PruneReport rep;
  auto out = prune_model(std::move(src.value()), &*plan, tokens(256), o, pool_, &rep);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  ASSERT_EQ(rep.layer_sparsity.size(), 2u);
  ASSERT_EQ(rep.outlier_ratio.size(), 2u);
  EXPECT_NEAR(rep.layer_sparsity[0] + rep.layer_sparsity[1], 1.4, 1e-9);
  for (double s : rep.layer_sparsity) EXPECT_LE(std::fabs(s - 0.7), 0.05 + 1e-9);
  // More outliers, less pruning.
  EXPECT_EQ(rep.outlier_ratio[0] > rep.outlier_ratio[1], rep.layer_sparsity[0] < rep.layer_sparsity[1]);

  auto bad = [&](PruneOptions b, std::vector<int32_t> toks, DType joint_type) {
    auto s = open_model_file(path_);
    ConvertOptions co;
    co.type = joint_type;
    auto p = plan_quantization(**s, co);
    if (joint_type != DType::kF32)
      for (QuantPlanEntry& e : p->entries)
        if (e.layer >= 0 && e.ne.size() == 2) e.method = QuantMethod::kGptq;
    return prune_model(std::move(s.value()), &*p, toks, b, pool_, nullptr).status();
  };
  PruneOptions b = o;
  b.layers = LayerSparsity::kUniform;
  b.sparsity = 1.0;
  EXPECT_FALSE(bad(b, tokens(256), DType::kF32).is_ok());  // sparsity out of range
  b = o;
  b.pattern = {2, 4};
  EXPECT_FALSE(bad(b, tokens(256), DType::kF32).is_ok());  // OWL with N:M
  b = o;
  b.layers = LayerSparsity::kUniform;
  EXPECT_FALSE(bad(b, tokens(32), DType::kF32).is_ok());   // no whole window
  Status st = bad(b, tokens(256), DType::kQ4_K);           // joint into a type without an exact zero
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("zero exactly"), std::string::npos) << st.message();
  b.pattern = {3, 7};  // rows of 128 are not a multiple of 7
  EXPECT_FALSE(bad(b, tokens(256), DType::kF32).is_ok());
}

// The kl layer rule: block l's probe is the KL of the model with only block
// l pruned (Wanda's masks of the dense statistics) against the dense model,
// the same as a plain comparison of the two models; the sensitive block is
// pruned less and the mean stays S.
TEST_F(PruneModelTest, KlRuleProbesEachBlockAlone) {
  auto src = open_model_file(path_);
  ASSERT_TRUE(src.is_ok());
  ConvertOptions f32;
  f32.type = DType::kF32;
  auto plan = plan_quantization(**src, f32);
  ASSERT_TRUE(plan.is_ok());
  PruneOptions o;
  o.method = PruneMethod::kWanda;
  o.sparsity = 0.7;
  o.layers = LayerSparsity::kKl;
  o.owl_lambda = 0.05;
  o.window = 64;
  o.kl_windows = 1;
  const std::vector<int32_t> toks = tokens(256);
  PruneReport rep;
  auto out = prune_model(std::move(src.value()), &*plan, toks, o, pool_, &rep);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  ASSERT_EQ(rep.block_kl.size(), 2u);
  ASSERT_EQ(rep.layer_sparsity.size(), 2u);
  EXPECT_TRUE(rep.outlier_ratio.empty());
  EXPECT_NEAR(rep.layer_sparsity[0] + rep.layer_sparsity[1], 1.4, 1e-9);
  EXPECT_NE(rep.block_kl[0], rep.block_kl[1]);
  EXPECT_EQ(rep.block_kl[0] > rep.block_kl[1], rep.layer_sparsity[0] < rep.layer_sparsity[1]);
  for (double s : rep.layer_sparsity) EXPECT_NEAR(std::fabs(s - 0.7), 0.05, 1e-9);

  // Independently: the dense statistics, one block pruned, compare_models over
  // the first window (and the token after it, so its 64 positions are scored).
  auto dense_file = open_model_file(path_);
  auto dense = Model::from_file(std::make_unique<ModelFile>(**dense_file));
  ASSERT_TRUE(dense.is_ok());
  CalibrationOptions co;
  co.chunk_size = 64;
  auto im = collect_importance(**dense, toks, co, pool_);
  ASSERT_TRUE(im.is_ok());
  const std::vector<int32_t> window(toks.begin(), toks.begin() + 65);
  for (int l = 0; l < 2; ++l) {
    auto f = std::make_unique<ModelFile>(**dense_file);
    for (const char* role : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      const std::string name = "blk." + std::to_string(l) + "." + role + ".weight";
      const TensorView& t = *f->tensor(name);
      std::vector<float> w = read_f32_rows(t);
      std::vector<uint8_t> mask(w.size());
      wanda_mask(w.data(), t.nrows(), t.ne[0], im->entries.at(name).sums.data(), 0.7, PrunePattern{}, mask.data());
      for (size_t i = 0; i < w.size(); ++i)
        if (mask[i]) w[i] = 0.0f;
      replace_with_f32(f.get(), name, std::move(w));
    }
    auto pruned = Model::from_file(std::move(f));
    ASSERT_TRUE(pruned.is_ok());
    auto cmp = compare_models(**dense, **pruned, window, pool_);
    ASSERT_TRUE(cmp.is_ok()) << cmp.status().message();
    EXPECT_NEAR(rep.block_kl[l], cmp->kl_mean, 1e-9 * cmp->kl_mean) << l;
    EXPECT_GT(cmp->kl_mean, 0.0);
  }
}

}  // namespace
}  // namespace ember
