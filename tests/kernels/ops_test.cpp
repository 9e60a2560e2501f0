// Row ops (activations, norms, RoPE, softmax) against double-precision
// scalar references.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace ember {
namespace {

std::vector<float> inputs() {
  std::vector<float> v;
  for (float x = -30.f; x <= 30.f; x += 0.013f) v.push_back(x);
  for (float x : {0.f, -0.f, 1e-30f, -1e-30f, 88.f, -88.f, 100.f, -100.f, 1e6f, -1e6f}) v.push_back(x);
  return v;
}

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double silu_ref(double x) { return x / (1 + std::exp(-x)); }

TEST(Ops, GeluAndSiluMatchDoubleReference) {
  std::vector<float> x = inputs();
  std::vector<float> g = x, s = x;
  gelu_tanh_row(g.data(), static_cast<int64_t>(g.size()));
  silu_row(s.data(), static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(g[i], gelu_ref(x[i]), 1e-6 + 2e-6 * std::fabs(gelu_ref(x[i]))) << x[i];
    ASSERT_NEAR(s[i], silu_ref(x[i]), 1e-6 + 2e-6 * std::fabs(silu_ref(x[i]))) << x[i];
  }
}

TEST(Ops, GatedActivationsEqualActivationTimesUp) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> gate(1003), up(1003);
  for (auto& v : gate) v = nd(rng);
  for (auto& v : up) v = nd(rng);
  std::vector<float> a = gate, b = gate, ga = gate, sa = gate;
  geglu_tanh_row(a.data(), up.data(), 1003);
  swiglu_row(b.data(), up.data(), 1003);
  gelu_tanh_row(ga.data(), 1003);
  silu_row(sa.data(), 1003);
  for (int i = 0; i < 1003; ++i) {
    EXPECT_FLOAT_EQ(a[i], ga[i] * up[i]);
    EXPECT_FLOAT_EQ(b[i], sa[i] * up[i]);
  }
}

// gpt-oss's clamped SwiGLU against its definition (transformers
// GptOssExperts), the clamps included: gate above 7 and up outside [-7, 7].
TEST(Ops, SwiGluOaiClampsThenGates) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 6.f);
  std::vector<float> gate(1003), up(1003);
  for (auto& v : gate) v = nd(rng);
  for (auto& v : up) v = nd(rng);
  gate[0] = 50.f, up[0] = -50.f, gate[1] = -50.f, up[1] = 9.f, gate[2] = 7.f, up[2] = 7.f;
  std::vector<float> got = gate;
  swiglu_oai_row(got.data(), up.data(), 1003);
  for (int i = 0; i < 1003; ++i) {
    const double x = std::min(static_cast<double>(gate[i]), 7.0);
    const double y = std::max(-7.0, std::min(static_cast<double>(up[i]), 7.0));
    const double want = x / (1 + std::exp(-1.702 * x)) * (y + 1);
    ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::fabs(want))) << gate[i] << " " << up[i];
  }
  EXPECT_NEAR(got[0], 7.0 / (1 + std::exp(-1.702 * 7.0)) * -6.0, 1e-5);
}

TEST(Ops, RmsNormSoftmaxRope) {
  std::vector<float> x = {1, -2, 3, -4, 5, 6, 7, 8};
  std::vector<float> w = {1, 1, 1, 1, 2, 2, 2, 2}, out(8);
  rms_norm_row(x.data(), w.data(), out.data(), 8, 1e-6f);
  double ss = 0;
  for (float v : x) ss += v * v;
  const double sc = 1 / std::sqrt(ss / 8 + 1e-6);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(out[i], x[i] * sc * w[i], 1e-6);

  std::vector<float> p = {1000.f, 1001.f, -50.f};
  softmax_row(p.data(), 3);
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0, 1e-6);

  // RoPE: normal pairs (0,1),(2,3); NeoX pairs (0,2),(1,3). Rotation keeps norms.
  const float inv_freq[2] = {1.0f, 0.01f};
  float cs[2], sn[2];
  rope_angles(3.0f, inv_freq, 4, cs, sn);
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};
  rope_head(a, 4, RopeStyle::kNormal, cs, sn);
  rope_head(b, 4, RopeStyle::kNeox, cs, sn);
  EXPECT_NEAR(a[0], std::cos(3.0) * 1 - std::sin(3.0) * 2, 1e-6);
  EXPECT_NEAR(a[1], std::sin(3.0) * 1 + std::cos(3.0) * 2, 1e-6);
  EXPECT_NEAR(b[0], std::cos(3.0) * 1 - std::sin(3.0) * 3, 1e-6);
  EXPECT_NEAR(b[2], std::sin(3.0) * 1 + std::cos(3.0) * 3, 1e-6);
  EXPECT_NEAR(b[1], std::cos(0.03) * 2 - std::sin(0.03) * 4, 1e-6);
}


// Vectorized softmax / log-sum-exp against float64 on a vocabulary-sized row
// with a wide range and masked (-inf) entries, every length mod 8.
TEST(Ops, SoftmaxAndLogSumExpMatchDouble) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 6.f);
  for (int n : {1, 7, 8, 13, 262144}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    if (n > 8) x[3] = x[n - 1] = -INFINITY;
    double mx = -INFINITY;
    for (float v : x) mx = std::max<double>(mx, v);
    double sum = 0;
    for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
    const double lse = mx + std::log(sum);
    EXPECT_NEAR(log_sum_exp_row(x.data(), n), lse, 1e-5 * std::max(1.0, std::abs(lse))) << n;
    std::vector<float> p = x;
    softmax_row(p.data(), n);
    double total = 0;
    for (int i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x[i]) - lse);
      ASSERT_NEAR(p[i], want, 1e-6 * want + 1e-12) << n << " " << i;
      total += p[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
    if (n > 8) {
      EXPECT_EQ(p[3], 0.f);
      EXPECT_EQ(p[n - 1], 0.f);
    }
  }
}

}  // namespace
}  // namespace ember
