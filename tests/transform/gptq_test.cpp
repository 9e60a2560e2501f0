// GPTQ on GGUF blocks (transform/gptq.h) against a plain in-test reference:
// the textbook algorithm (explicit inverse by Gauss-Jordan, lower Cholesky of
// the inverse, every later column updated after each column, no lazy
// batches), on small matrices with correlated activations. Also: the
// reconstruction loss ||(W - Q) X||^2 is below round-to-nearest's and
// importance-weighted rounding's in every type, with and without act-order.
#include "transform/gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/block_levels.h"
#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"

namespace ember {
namespace {

struct Problem {
  int64_t n_out, n_in;
  std::vector<float> W;   // [n_out, n_in]
  std::vector<double> H;  // [n_in, n_in] X^T X
};

// Activations with correlated channels and a few large ones, as in real
// layers: X = Z M with Z Gaussian [n_tok, n_in] and M mixing neighbours.
Problem make_problem(int64_t n_out, int64_t n_in, int64_t n_tok, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  Problem p{n_out, n_in, std::vector<float>(n_out * n_in), std::vector<double>(n_in * n_in, 0.0)};
  for (float& v : p.W) v = static_cast<float>(0.05 * g(rng));
  std::vector<double> scale(n_in);
  for (int64_t i = 0; i < n_in; ++i) scale[i] = (i % 17 == 3) ? 8.0 : 1.0;
  std::vector<double> z(n_in), x(n_in);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (double& v : z) v = g(rng);
    for (int64_t i = 0; i < n_in; ++i)
      x[i] = scale[i] * (z[i] + 0.8 * z[(i + 1) % n_in] + 0.5 * z[(i + 5) % n_in]);
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j) p.H[i * n_in + j] += x[i] * x[j];
  }
  return p;
}

// sum over rows of (w - q)^T H (w - q).
double loss(const Problem& p, DType t, const std::vector<uint8_t>& q) {
  std::vector<float> y(p.n_in);
  const size_t rb = dtype_row_size(t, p.n_in);
  double s = 0;
  std::vector<double> d(p.n_in);
  for (int64_t r = 0; r < p.n_out; ++r) {
    dequantize_row_ref(t, q.data() + r * rb, y.data(), p.n_in);
    for (int64_t i = 0; i < p.n_in; ++i) d[i] = p.W[r * p.n_in + i] - y[i];
    for (int64_t i = 0; i < p.n_in; ++i)
      for (int64_t j = 0; j < p.n_in; ++j) s += d[i] * p.H[i * p.n_in + j] * d[j];
  }
  return s;
}

// The plain reference. Returns U (upper, H^-1 = U^T U) through *u_out.
// scale_src (non-null): every block's scales from these values ([n_out, n])
// instead of the current ones; rounded (non-null): each value when rounded.
std::vector<uint8_t> reference_gptq(const Problem& p, DType t, double damp, std::vector<double>* u_out,
                                    const std::vector<float>* scale_src = nullptr,
                                    std::vector<float>* rounded = nullptr) {
  const int64_t n = p.n_in, G = dtype_block_size(t);
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += p.H[i * n + i];
  mean /= n;
  // Inverse of A = H + damp * mean * I by Gauss-Jordan with partial pivoting.
  std::vector<double> A(p.H), inv(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) A[i * n + i] += damp * mean, inv[i * n + i] = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t piv = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(A[r * n + c]) > std::fabs(A[piv * n + c])) piv = r;
    for (int64_t k = 0; k < n; ++k) std::swap(A[c * n + k], A[piv * n + k]), std::swap(inv[c * n + k], inv[piv * n + k]);
    const double d = A[c * n + c];
    for (int64_t k = 0; k < n; ++k) A[c * n + k] /= d, inv[c * n + k] /= d;
    for (int64_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = A[r * n + c];
      for (int64_t k = 0; k < n; ++k) A[r * n + k] -= f * A[c * n + k], inv[r * n + k] -= f * inv[c * n + k];
    }
  }
  // Lower Cholesky of the inverse, L L^T = inv; U = L^T.
  std::vector<double> Lc(n * n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    double s = inv[j * n + j];
    for (int64_t k = 0; k < j; ++k) s -= Lc[j * n + k] * Lc[j * n + k];
    Lc[j * n + j] = std::sqrt(s);
    for (int64_t i = j + 1; i < n; ++i) {
      double v = inv[i * n + j];
      for (int64_t k = 0; k < j; ++k) v -= Lc[i * n + k] * Lc[j * n + k];
      Lc[i * n + j] = v / Lc[j * n + j];
    }
  }
  std::vector<double> U(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) U[i * n + j] = Lc[j * n + i];
  *u_out = U;

  std::vector<float> qw(n);
  for (int64_t i = 0; i < n; ++i) qw[i] = static_cast<float>(p.H[i * n + i]);
  const size_t rb = dtype_row_size(t, n), bb = dtype_row_size(t, G);
  std::vector<uint8_t> out(rb * p.n_out);
  int lo, hi;
  block_level_range(t, &lo, &hi);
  for (int64_t r = 0; r < p.n_out; ++r) {
    std::vector<double> w(p.W.begin() + r * n, p.W.begin() + (r + 1) * n);
    std::vector<float> a(G), b(G), xg(G);
    std::vector<int> L(G);
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* blk = out.data() + r * rb + (i / G) * bb;
      if (i % G == 0) {
        for (int64_t e = 0; e < G; ++e) xg[e] = scale_src ? (*scale_src)[r * n + i + e] : static_cast<float>(w[i + e]);
        quantize_row_imatrix(t, xg.data(), blk, G, qw.data() + i);
        block_affine(t, blk, a.data(), b.data());
      }
      const int64_t e = i % G;
      if (rounded) (*rounded)[r * n + i] = static_cast<float>(w[i]);
      int l = a[e] != 0 ? static_cast<int>(std::nearbyint(std::clamp((w[i] - b[e]) / a[e], lo - 1.0, hi + 1.0))) : 0;
      l = std::max(lo, std::min(hi, l));
      L[e] = l;
      const double err = (w[i] - (static_cast<double>(a[e]) * l + b[e])) / U[i * n + i];
      for (int64_t k = i + 1; k < n; ++k) w[k] -= err * U[i * n + k];
      if (e == G - 1) pack_levels(t, L.data(), blk);
    }
  }
  return out;
}

TEST(Gptq, InverseCholeskyMatchesExplicitInverse) {
  const Problem p = make_problem(1, 64, 200, 1);
  std::vector<double> u(64 * 64), want;
  ASSERT_TRUE(gptq_inverse_cholesky(p.H.data(), 64, 0.0, u.data()));
  Problem q = p;
  (void)reference_gptq(q, DType::kQ8_0, 0.0, &want);
  double max_rel = 0;
  for (size_t i = 0; i < u.size(); ++i) max_rel = std::max(max_rel, std::fabs(u[i] - want[i]) / (std::fabs(want[i]) + 1e-3));
  EXPECT_LT(max_rel, 1e-8);
  // Not positive definite: refused.
  std::vector<double> bad(4 * 4, 0.0);
  bad[0] = -1;
  EXPECT_FALSE(gptq_inverse_cholesky(bad.data(), 4, 0.0, u.data()));
  EXPECT_EQ(gptq_scales_from_name("refit"), GptqOptions::Scales::kRefit);
  EXPECT_EQ(gptq_scales_from_name("static"), GptqOptions::Scales::kStatic);
  EXPECT_EQ(gptq_scales_from_name("dynamic"), GptqOptions::Scales::kDynamic);
  EXPECT_FALSE(gptq_scales_from_name("after"));
}

TEST(Gptq, InverseCholeskyThreadedIsTheSameAndInverts) {
  // Large enough that the columns and rows are spread over the pool.
  const int64_t n = 300;
  const Problem p = make_problem(1, n, 400, 5);
  const double lambda = 0.5;
  std::vector<double> u1(n * n), u3(n * n);
  ThreadPool pool(3);
  ASSERT_TRUE(gptq_inverse_cholesky(p.H.data(), n, lambda, u1.data()));
  ASSERT_TRUE(gptq_inverse_cholesky(p.H.data(), n, lambda, u3.data(), &pool));
  ASSERT_EQ(u1, u3);
  // U^T U (H + lambda I) = I, U upper triangular (row k nonzero from column k on).
  std::vector<double> inv(n * n, 0.0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = k; i < n; ++i)
      for (int64_t j = k; j < n; ++j) inv[i * n + j] += u1[k * n + i] * u1[k * n + j];
  double max_err = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double v = 0;
      for (int64_t k = 0; k < n; ++k) v += inv[i * n + k] * (p.H[k * n + j] + (k == j ? lambda : 0.0));
      max_err = std::max(max_err, std::fabs(v - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(max_err, 1e-9);
}

TEST(Gptq, MatchesPlainReferenceAndBeatsRoundingInEveryType) {
  ThreadPool pool(2);
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ3_K, DType::kQ2_K, DType::kQ6_K,
                  DType::kQ5_K}) {
    SCOPED_TRACE(dtype_name(t));
    // Several lazy batches for the 32-element types; two super-blocks for Q4_K.
    const int64_t n_in = dtype_block_size(t) == 32 ? 128 : (t == DType::kQ4_K ? 512 : 256);
    const Problem p = make_problem(16, n_in, n_in + 96, 7);
    const size_t bytes = dtype_row_size(t, n_in) * p.n_out;
    std::vector<uint8_t> got(bytes), rtn(bytes), imx(bytes);
    GptqOptions o;
    o.block_size = 64;  // rounded up to whole blocks; lazy batches of several blocks for Q4_0
    ASSERT_TRUE(gptq_quantize(p.W.data(), p.n_out, n_in, p.H.data(), t, o, got.data(), pool));
    std::vector<double> u;
    const std::vector<uint8_t> want = reference_gptq(p, t, o.damp, &u);
    // Same levels and scales up to float rounding at exact ties: nearly every byte equal.
    size_t same = 0;
    for (size_t i = 0; i < bytes; ++i) same += got[i] == want[i];
    EXPECT_GE(static_cast<double>(same) / bytes, 0.995);
    const double l_gptq = loss(p, t, got), l_ref = loss(p, t, want);
    EXPECT_NEAR(l_gptq, l_ref, 0.01 * l_ref);

    ASSERT_TRUE(quantize_rows(t, p.W.data(), rtn.data(), p.n_out, n_in));
    std::vector<float> qw(n_in);
    for (int64_t i = 0; i < n_in; ++i) qw[i] = static_cast<float>(p.H[i * n_in + i]);
    ASSERT_TRUE(quantize_rows_imatrix(t, p.W.data(), imx.data(), p.n_out, n_in, qw.data()));
    const double l_rtn = loss(p, t, rtn), l_imx = loss(p, t, imx);
    EXPECT_LT(l_gptq, 0.9 * l_imx) << "gptq " << l_gptq << " imatrix " << l_imx << " rtn " << l_rtn;
    EXPECT_LT(l_imx, l_rtn);

    // Scales before the pass (from the original weights) and refit after it
    // (from what a first pass rounded, then a second pass), each against the
    // reference doing the same.
    std::vector<float> rounded(p.W.size());
    (void)reference_gptq(p, t, o.damp, &u, nullptr, &rounded);
    for (auto [mode, src] : {std::pair{GptqOptions::Scales::kStatic, &p.W}, std::pair{GptqOptions::Scales::kRefit,
                                                                                   static_cast<const std::vector<float>*>(&rounded)}}) {
      SCOPED_TRACE(mode == GptqOptions::Scales::kStatic ? "static" : "refit");
      GptqOptions so = o;
      so.scales = mode;
      std::vector<uint8_t> st(bytes);
      ASSERT_TRUE(gptq_quantize(p.W.data(), p.n_out, n_in, p.H.data(), t, so, st.data(), pool));
      const std::vector<uint8_t> want_st = reference_gptq(p, t, o.damp, &u, src);
      size_t same_st = 0, differ = 0;
      for (size_t i = 0; i < bytes; ++i) same_st += st[i] == want_st[i], differ += st[i] != got[i];
      EXPECT_GE(static_cast<double>(same_st) / bytes, 0.995);
      // Static scales differ from the default pass's from the second block of a row on.
      if (mode == GptqOptions::Scales::kRefit || n_in > dtype_block_size(t)) {
        EXPECT_GT(differ, 0u);
      }
      EXPECT_LT(loss(p, t, st), 0.9 * l_imx);
      std::printf("%s %s: loss %.5g (dynamic %.5g, imatrix %.5g)\n", dtype_name(t),
                  mode == GptqOptions::Scales::kStatic ? "static" : "refit", loss(p, t, st), l_gptq, l_imx);
    }

    GptqOptions ao = o;
    ao.act_order = true;
    std::vector<uint8_t> act(bytes);
    ASSERT_TRUE(gptq_quantize(p.W.data(), p.n_out, n_in, p.H.data(), t, ao, act.data(), pool));
    EXPECT_LT(loss(p, t, act), 0.9 * l_imx);
  }
}

TEST(Gptq, DeadColumnsAndBadInput) {
  ThreadPool pool(1);
  Problem p = make_problem(4, 64, 100, 3);
  for (int64_t j = 0; j < 64; ++j) p.H[5 * 64 + j] = p.H[j * 64 + 5] = 0;  // channel 5 never active
  std::vector<uint8_t> q(dtype_row_size(DType::kQ4_0, 64) * 4);
  ASSERT_TRUE(gptq_quantize(p.W.data(), 4, 64, p.H.data(), DType::kQ4_0, {}, q.data(), pool));
  std::vector<float> y(64);
  for (int r = 0; r < 4; ++r) {
    dequantize_row_ref(DType::kQ4_0, q.data() + r * dtype_row_size(DType::kQ4_0, 64), y.data(), 64);
    EXPECT_NEAR(y[5], 0.0f, 0.02f);  // a zero weight, up to one quantization step
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
  }
  EXPECT_FALSE(gptq_quantize(p.W.data(), 4, 48, p.H.data(), DType::kQ4_0, {}, q.data(), pool));
  EXPECT_FALSE(gptq_quantize(p.W.data(), 4, 64, p.H.data(), DType::kF16, {}, q.data(), pool));
}

}  // namespace
}  // namespace ember
