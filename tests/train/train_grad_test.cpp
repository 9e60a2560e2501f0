// Every backward of the training kernels against central finite differences
// in double precision (the reference twins of kernels/ref/train.h
// instantiated for double): for a random projection r, L(x) = sum r * f(x)
// and the analytic gradient of L by the op's backward equals (L(x + h e_i) -
// L(x - h e_i)) / 2h for every (or a sample of) input i, to 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/ref/train.h"
#include "train/rng.h"

namespace ember {
namespace {

using Vec = std::vector<double>;

Vec randn(size_t n, uint64_t seed, double sd = 1.0) {
  Rng r(seed);
  Vec v(n);
  for (double& x : v) x = r.normal() * sd;
  return v;
}

double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks grad (analytic dL/dx) against finite differences of L at x, at
// every index when x is small, else at `samples` spread indices.
void check_grad(const char* what, Vec& x, const Vec& grad, const std::function<double()>& L, size_t samples = 64) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  const double h = 1e-6;
  const size_t step = x.size() <= samples ? 1 : x.size() / samples;
  for (size_t i = 0; i < x.size(); i += step) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = L();
    x[i] = x0 - h;
    const double lm = L();
    x[i] = x0;
    const double num = (lp - lm) / (2 * h);
    EXPECT_NEAR(grad[i], num, 1e-6 * (1 + std::fabs(num))) << what << " index " << i;
  }
}

TEST(TrainGrad, Gemm) {
  const int64_t M = 5, N = 4, K = 6;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Vec A = randn(M * K, 1), B = randn(K * N, 2), r = randn(M * N, 3);
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      auto L = [&] {
        Vec C(M * N);
        ref::train_gemm<double>(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, C.data(), N, false);
        return dotv(C, r);
      };
      // dA = r op(B)^T, dB = op(A)^T r, through the same GEMM with transposes.
      Vec dA(M * K), dB(K * N), dAt(M * K), dBt(K * N);
      ref::train_gemm<double>(M, K, N, r.data(), N, false, B.data(), ldb, !tb, dA.data(), K, false);  // [M, K]
      ref::train_gemm<double>(K, N, M, A.data(), lda, !ta, r.data(), N, false, dB.data(), N, false);  // [K, N]
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) dAt[ta ? k * M + m : m * K + k] = dA[m * K + k];
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) dBt[tb ? n * K + k : k * N + n] = dB[k * N + n];
      check_grad("gemm dA", A, dAt, L);
      check_grad("gemm dB", B, dBt, L);
    }
}

TEST(TrainGrad, RmsNormWithAndWithoutOffset) {
  const int64_t n = 3, dim = 10;
  for (double off : {0.0, 1.0}) {
    Vec x = randn(n * dim, 4), w = randn(dim, 5, 0.3), r = randn(n * dim, 6);
    auto L = [&] {
      Vec o(n * dim), rs(n);
      ref::train_rms_norm_forward<double>(x.data(), n, dim, w.data(), off, 1e-5, o.data(), rs.data());
      return dotv(o, r);
    };
    Vec o(n * dim), rs(n), dx(n * dim, 0.0), dw(dim, 0.0);
    ref::train_rms_norm_forward<double>(x.data(), n, dim, w.data(), off, 1e-5, o.data(), rs.data());
    ref::train_rms_norm_backward<double>(x.data(), rs.data(), n, dim, w.data(), off, r.data(), dx.data(), false,
                                         dw.data());
    check_grad("rms dx", x, dx, L);
    check_grad("rms dw", w, dw, L);
  }
}

TEST(TrainGrad, RopeBothStyles) {
  const int64_t n = 4, period = 3;
  const int heads = 2, hd = 8, n_rot = 6, half = n_rot / 2;
  Vec c(period * half), s(period * half);
  for (int64_t i = 0; i < period * half; ++i) {
    c[i] = std::cos(0.3 * i + 0.1);
    s[i] = std::sin(0.3 * i + 0.1);
  }
  for (RopeStyle st : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    Vec x = randn(n * heads * hd, 7), r = randn(n * heads * hd, 8);
    auto L = [&] {
      Vec y = x;
      ref::train_rope_forward<double>(y.data(), n, period, heads, hd, n_rot, st, c.data(), s.data());
      return dotv(y, r);
    };
    Vec g = r;
    ref::train_rope_backward<double>(g.data(), n, period, heads, hd, n_rot, st, c.data(), s.data());
    check_grad("rope", x, g, L);
  }
}

TEST(TrainGrad, GatedActivationsAndSoftcap) {
  const int64_t n = 40;
  for (TrainActivation a : {TrainActivation::kSilu, TrainActivation::kGeluTanh}) {
    Vec g = randn(n, 9, 2.0), u = randn(n, 10), r = randn(n, 11);
    auto L = [&] {
      Vec o(n);
      ref::train_gated_forward<double>(a, g.data(), u.data(), o.data(), n);
      return dotv(o, r);
    };
    Vec dg(n), du(n);
    ref::train_gated_backward<double>(a, g.data(), u.data(), r.data(), dg.data(), du.data(), n);
    check_grad("gated dg", g, dg, L);
    check_grad("gated du", u, du, L);
  }
  Vec x = randn(n, 12, 4.0), r = randn(n, 13);
  auto L = [&] {
    Vec y = x;
    ref::train_softcap_forward<double>(y.data(), n, 3.0);
    return dotv(y, r);
  };
  Vec y = x, d = r;
  ref::train_softcap_forward<double>(y.data(), n, 3.0);
  ref::train_softcap_backward<double>(y.data(), d.data(), n, 3.0);
  check_grad("softcap", x, d, L);
}

TEST(TrainGrad, AttentionCausalWindowSoftcapGqa) {
  for (int window : {0, 3})
    for (double cap : {0.0, 2.0}) {
      SCOPED_TRACE(testing::Message() << "window " << window << " cap " << cap);
      TrainAttentionShape s;
      s.n_seq = 2;
      s.seq_len = 6;
      s.n_head = 4;
      s.n_head_kv = 2;
      s.head_dim = 4;
      s.head_dim_v = 3;
      s.scale = 0.7f;
      s.softcap = static_cast<float>(cap);
      s.window = window;
      const int64_t N = s.n_seq * s.seq_len;
      Vec q = randn(N * s.n_head * s.head_dim, 14), k = randn(N * s.n_head_kv * s.head_dim, 15);
      Vec v = randn(N * s.n_head_kv * s.head_dim_v, 16), r = randn(N * s.n_head * s.head_dim_v, 17);
      auto L = [&] {
        Vec o(N * s.n_head * s.head_dim_v), l(N * s.n_head);
        ref::train_attention_forward<double>(s, q.data(), k.data(), v.data(), o.data(), l.data());
        return dotv(o, r);
      };
      Vec o(N * s.n_head * s.head_dim_v), l(N * s.n_head), dq(q.size()), dk(k.size()), dv(v.size());
      ref::train_attention_forward<double>(s, q.data(), k.data(), v.data(), o.data(), l.data());
      ref::train_attention_backward<double>(s, q.data(), k.data(), v.data(), o.data(), l.data(), r.data(), dq.data(),
                                            dk.data(), dv.data());
      check_grad("attention dq", q, dq, L, 1000);
      check_grad("attention dk", k, dk, L, 1000);
      check_grad("attention dv", v, dv, L, 1000);
    }
}

TEST(TrainGrad, EmbeddingAndBias) {
  const int64_t rows = 5, dim = 3, vocab = 4;
  const std::vector<int32_t> ids = {2, 0, 2, 3, 2};
  Vec table = randn(vocab * dim, 18), b = randn(dim, 19), r = randn(rows * dim, 20);
  auto L = [&] {
    double s = 0;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t i = 0; i < dim; ++i) s += r[t * dim + i] * (1.5 * table[ids[t] * dim + i] + b[i]);
    return s;
  };
  Vec dt(vocab * dim, 0.0), db(dim, 0.0);
  ref::train_embedding_backward<double>(ids.data(), r.data(), rows, dim, 1.5, dt.data());
  ref::train_bias_backward<double>(r.data(), rows, dim, db.data());
  check_grad("embedding", table, dt, L);
  check_grad("bias", b, db, L);
}

TEST(TrainGrad, LossRowDenseSparseAndCrossEntropy) {
  const int64_t V = 9;
  Vec zt = randn(V, 21, 1.5);
  const std::vector<int32_t> ids = {1, 4, 4, 8};
  const Vec w = {0.2, 0.3, 0.1, 0.4}, lp = {-2.0, -1.0, -1.0, -0.5};
  for (int mode = 0; mode < 3; ++mode)
    for (double tau : {1.0, 2.0}) {
      SCOPED_TRACE(testing::Message() << "mode " << mode << " tau " << tau);
      ref::KdRowTeacherT<double> t;
      if (mode == 0) t.logits = zt.data();
      if (mode == 1) {
        t.ids = ids.data();
        t.weights = w.data();
        t.logp = lp.data();
        t.n_samples = 4;
      }
      const int32_t target = mode == 2 ? 5 : 3;
      Vec z = randn(V, 22, 1.5);
      auto L = [&] {
        Vec zz = z;
        return ref::train_kd_row<double>(zz.data(), V, t, tau, 0.8, target, 0.6, 1.0).loss;
      };
      Vec g = z;
      ref::train_kd_row<double>(g.data(), V, t, tau, 0.8, target, 0.6, 1.0);
      check_grad("loss row", z, g, L);
    }
}

}  // namespace
}  // namespace ember
