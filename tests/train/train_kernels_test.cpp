// The training kernels (kernels/train.h) at every ISA level against their
// scalar reference twins (kernels/ref/train.h, float), on shapes with
// tails in every blocking dimension; and the determinism contract: the same
// bits with 1 and 2 threads, and (the GEMM) at the AVX2 and AVX-512 levels.
// Tolerances: relative to the size of the terms summed (about k * ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/ref/train.h"
#include "kernels/train.h"
#include "train/rng.h"

namespace ember {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float sd = 1.f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(r.normal() * sd);
  return v;
}

// max |a - b| / (scale + |b|) <= tol.
void expect_near_all(const std::vector<float>& a, const std::vector<float>& b, double tol, double scale,
                     const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]) / (scale + std::fabs(b[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, tol) << what << " at " << at << ": " << a[at] << " vs " << b[at];
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs f at every level the CPU has above scalar.
template <typename F>
void at_fast_levels(F f) {
  const Isa saved = active_isa();
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa > cpu_max_isa()) continue;
    set_active_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    f(isa);
  }
  set_active_isa(saved);
}

TEST(TrainKernels, GemmMatchesReferenceEveryLayoutAndIsBitStable) {
  ThreadPool one(1), two(2);
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape sh : {Shape{37, 53, 300}, Shape{200, 45, 17}, Shape{5, 700, 600}, Shape{1, 1, 1}, Shape{9, 70, 4500},
                         Shape{200, 4200, 24}, Shape{13, 17, 66000}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc) {
          SCOPED_TRACE(testing::Message() << sh.M << "x" << sh.N << "x" << sh.K << " ta " << ta << " tb " << tb
                                          << " acc " << acc);
          const int64_t lda = (ta ? sh.M : sh.K) + 3, ldb = (tb ? sh.K : sh.N) + 5, ldc = sh.N + 2;
          const auto A = randn(static_cast<size_t>((ta ? sh.K : sh.M) * lda), 1);
          const auto B = randn(static_cast<size_t>((tb ? sh.N : sh.K) * ldb), 2);
          const auto C0 = randn(static_cast<size_t>(sh.M * ldc), 3);
          std::vector<float> ref = C0;
          ref::train_gemm<float>(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, ref.data(), ldc, acc);
          std::vector<float> first;
          at_fast_levels([&](Isa) {
            std::vector<float> c1 = C0, c2 = C0;
            train_gemm(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, c1.data(), ldc, acc, one);
            train_gemm(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, c2.data(), ldc, acc, two);
            expect_near_all(c1, ref, 4e-6 * std::sqrt(static_cast<double>(sh.K)), std::sqrt(static_cast<double>(sh.K)),
                            "gemm");
            EXPECT_TRUE(same_bits(c1, c2)) << "1 vs 2 threads";
            if (first.empty()) first = c1;
            EXPECT_TRUE(same_bits(first, c1)) << "AVX2 vs AVX-512";
          });
        }
  }
}

TEST(TrainKernels, Bf16GemmMatchesItsReferenceAndIsBitStable) {
  ThreadPool one(1), two(2);
  const Isa saved = active_isa();
  if (cpu_max_isa() < Isa::kAvx512 || !cpu_features().avx512bf16) GTEST_SKIP() << "no AVX512_BF16";
  set_active_isa(Isa::kAvx512);
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape sh : {Shape{37, 53, 301}, Shape{200, 45, 17}, Shape{5, 700, 600}, Shape{13, 17, 66000}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(testing::Message() << sh.M << "x" << sh.N << "x" << sh.K << " ta " << ta << " tb " << tb);
        const int64_t lda = ta ? sh.M : sh.K, ldb = tb ? sh.K : sh.N;
        const auto A = randn(static_cast<size_t>((ta ? sh.K : sh.M) * lda), 1);
        const auto B = randn(static_cast<size_t>((tb ? sh.N : sh.K) * ldb), 2);
        std::vector<float> ref(static_cast<size_t>(sh.M * sh.N)), c1(ref.size()), c2(ref.size()), f32(ref.size());
        ref::train_gemm_bf16(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, ref.data(), sh.N, false);
        train_gemm_bf16(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, c1.data(), sh.N, false, one);
        train_gemm_bf16(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, c2.data(), sh.N, false, two);
        // Products of bf16 values are exact in f32: only the f32 sums differ.
        const double sk = std::sqrt(static_cast<double>(sh.K));
        expect_near_all(c1, ref, 4e-6 * sk, sk, "bf16 gemm");
        EXPECT_TRUE(same_bits(c1, c2)) << "1 vs 2 threads";
        // ... and it is a bf16 product: about 2^-8 relative from the f32 one.
        train_gemm(sh.M, sh.N, sh.K, A.data(), lda, ta, B.data(), ldb, tb, f32.data(), sh.N, false, one);
        double num = 0, den = 0;
        for (size_t i = 0; i < f32.size(); ++i) {
          num += (c1[i] - f32[i]) * (c1[i] - f32[i]);
          den += f32[i] * f32[i];
        }
        EXPECT_LT(std::sqrt(num / den), 1e-2);
        EXPECT_GT(std::sqrt(num / den), 1e-5);
      }
  }
  set_active_isa(saved);
}

TEST(TrainKernels, RowOpsMatchReference) {
  ThreadPool pool(2);
  const int64_t n = 13, dim = 70;
  const auto x = randn(n * dim, 4), w = randn(dim, 5, 0.2f), dy = randn(n * dim, 6);
  for (float off : {0.f, 1.f}) {
    std::vector<float> o_ref(n * dim), r_ref(n), o(n * dim), r(n);
    ref::train_rms_norm_forward<float>(x.data(), n, dim, w.data(), off, 1e-6f, o_ref.data(), r_ref.data());
    std::vector<float> dx_ref = randn(n * dim, 7), dw_ref = randn(dim, 8);
    std::vector<float> dx0 = dx_ref, dw0 = dw_ref;
    ref::train_rms_norm_backward<float>(x.data(), r_ref.data(), n, dim, w.data(), off, dy.data(), dx_ref.data(), true,
                                        dw_ref.data());
    at_fast_levels([&](Isa) {
      train_rms_norm_forward(x.data(), n, dim, w.data(), off, 1e-6f, o.data(), r.data(), pool);
      expect_near_all(o, o_ref, 4e-7, 1e-3, "rms forward");
      expect_near_all(r, r_ref, 4e-7, 0, "rstd");
      std::vector<float> dx = dx0, dw = dw0;
      train_rms_norm_backward(x.data(), r_ref.data(), n, dim, w.data(), off, dy.data(), dx.data(), true, dw.data(),
                              pool);
      expect_near_all(dx, dx_ref, 2e-6, 1.0, "rms dx");
      expect_near_all(dw, dw_ref, 2e-6, 1.0, "rms dw");
    });
  }
  // RoPE both styles, partial rotation, rows wrapping the table.
  const int heads = 3, hd = 16, n_rot = 12, period = 5, half = n_rot / 2;
  std::vector<float> cs(period * half), sn(period * half);
  for (int i = 0; i < period * half; ++i) {
    cs[i] = std::cos(0.37f * i + 0.2f);
    sn[i] = std::sin(0.37f * i + 0.2f);
  }
  for (RopeStyle st : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    auto xr = randn(n * heads * hd, 11);
    auto ref_f = xr, ref_b = xr;
    ref::train_rope_forward<float>(ref_f.data(), n, period, heads, hd, n_rot, st, cs.data(), sn.data());
    ref::train_rope_backward<float>(ref_b.data(), n, period, heads, hd, n_rot, st, cs.data(), sn.data());
    at_fast_levels([&](Isa) {
      auto f = xr, b = xr;
      train_rope_forward(f.data(), n, period, heads, hd, n_rot, st, cs.data(), sn.data(), pool);
      train_rope_backward(b.data(), n, period, heads, hd, n_rot, st, cs.data(), sn.data(), pool);
      expect_near_all(f, ref_f, 1e-6, 1.0, "rope forward");
      expect_near_all(b, ref_b, 1e-6, 1.0, "rope backward");
    });
  }
  // Gated activations, softcap, bias and embedding gradients.
  const int64_t m = 1000;
  const auto g = randn(m, 12, 3.f), u = randn(m, 13), d = randn(m, 14);
  for (TrainActivation a : {TrainActivation::kSilu, TrainActivation::kGeluTanh}) {
    std::vector<float> of(m), dg_ref(m), du_ref(m);
    ref::train_gated_forward<float>(a, g.data(), u.data(), of.data(), m);
    ref::train_gated_backward<float>(a, g.data(), u.data(), d.data(), dg_ref.data(), du_ref.data(), m);
    at_fast_levels([&](Isa) {
      std::vector<float> o2(m), dg(m), du(m);
      train_gated_forward(a, g.data(), u.data(), o2.data(), m, pool);
      train_gated_backward(a, g.data(), u.data(), d.data(), dg.data(), du.data(), m, pool);
      // Relative to the inputs' scale (|g| up to ~10, |u| ~1).
      expect_near_all(o2, of, 1e-6, 1.0, "gated forward");
      expect_near_all(dg, dg_ref, 1e-6, 1.0, "gated dg");
      expect_near_all(du, du_ref, 1e-6, 1.0, "gated du");
    });
  }
  {
    auto y_ref = g;
    ref::train_softcap_forward<float>(y_ref.data(), m, 2.5f);
    auto dy_ref = d;
    ref::train_softcap_backward<float>(y_ref.data(), dy_ref.data(), m, 2.5f);
    at_fast_levels([&](Isa) {
      auto y = g, dd = d;
      train_softcap_forward(y.data(), m, 2.5f, pool);
      train_softcap_backward(y_ref.data(), dd.data(), m, 2.5f, pool);
      expect_near_all(y, y_ref, 1e-6, 1.0, "softcap forward");
      expect_near_all(dd, dy_ref, 1e-6, 1.0, "softcap backward");
    });
  }
  {
    const int64_t rows = 40, dm = 150, vocab = 7;
    const auto dyb = randn(rows * dm, 15);
    std::vector<int32_t> ids(rows);
    for (int64_t i = 0; i < rows; ++i) ids[i] = static_cast<int32_t>((i * 5) % vocab);
    auto db_ref = randn(dm, 16), tab_ref = randn(vocab * dm, 17);
    const auto db0 = db_ref, tab0 = tab_ref;
    ref::train_bias_backward<float>(dyb.data(), rows, dm, db_ref.data());
    ref::train_embedding_backward<float>(ids.data(), dyb.data(), rows, dm, 1.5f, tab_ref.data());
    at_fast_levels([&](Isa) {
      auto db = db0, tab = tab0;
      train_bias_backward(dyb.data(), rows, dm, db.data(), pool);
      train_embedding_backward(ids.data(), dyb.data(), rows, dm, 1.5f, tab.data(), pool);
      expect_near_all(db, db_ref, 4e-6, 1.0, "bias grad");
      expect_near_all(tab, tab_ref, 1e-6, 1.0, "embedding grad");
    });
  }
}

TrainAttentionShape attn_shape(int window, float softcap) {
  TrainAttentionShape s;
  s.n_seq = 2;
  s.seq_len = 75;  // more than one query / key tile
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 24;
  s.head_dim_v = 24;
  s.scale = 0.2f;
  s.softcap = softcap;
  s.window = window;
  return s;
}

TEST(TrainKernels, AttentionMatchesReferenceAndIsBitStable) {
  ThreadPool one(1), two(2);
  for (int window : {0, 9})
    for (float cap : {0.f, 3.f}) {
      SCOPED_TRACE(testing::Message() << "window " << window << " softcap " << cap);
      const TrainAttentionShape s = attn_shape(window, cap);
      const int64_t N = s.n_seq * s.seq_len;
      const auto q = randn(N * s.n_head * s.head_dim, 20), k = randn(N * s.n_head_kv * s.head_dim, 21);
      const auto v = randn(N * s.n_head_kv * s.head_dim_v, 22), dout = randn(N * s.n_head * s.head_dim_v, 23);
      std::vector<float> o_ref(N * s.n_head * s.head_dim_v), l_ref(N * s.n_head);
      ref::train_attention_forward<float>(s, q.data(), k.data(), v.data(), o_ref.data(), l_ref.data());
      std::vector<float> dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
      ref::train_attention_backward<float>(s, q.data(), k.data(), v.data(), o_ref.data(), l_ref.data(), dout.data(),
                                           dq_ref.data(), dk_ref.data(), dv_ref.data());
      at_fast_levels([&](Isa) {
        std::vector<float> o(o_ref.size()), l(l_ref.size()), dq(q.size()), dk(k.size()), dv(v.size());
        train_attention_forward(s, q.data(), k.data(), v.data(), o.data(), l.data(), one);
        expect_near_all(o, o_ref, 2e-6, 1.0, "attention out");
        expect_near_all(l, l_ref, 2e-6, 1.0, "attention lse");
        train_attention_backward(s, q.data(), k.data(), v.data(), o_ref.data(), l_ref.data(), dout.data(), dq.data(),
                                 dk.data(), dv.data(), one);
        expect_near_all(dq, dq_ref, 1e-5, 1.0, "dq");
        expect_near_all(dk, dk_ref, 1e-5, 1.0, "dk");
        expect_near_all(dv, dv_ref, 1e-5, 1.0, "dv");
        std::vector<float> dq2(q.size()), dk2(k.size()), dv2(v.size());
        train_attention_backward(s, q.data(), k.data(), v.data(), o_ref.data(), l_ref.data(), dout.data(), dq2.data(),
                                 dk2.data(), dv2.data(), two);
        EXPECT_TRUE(same_bits(dq, dq2) && same_bits(dk, dk2) && same_bits(dv, dv2)) << "1 vs 2 threads";
      });
    }
}

TEST(TrainKernels, LossRowMatchesReference) {
  const int64_t V = 301;
  const auto z = randn(V, 30, 2.f), zt = randn(V, 31, 2.f);
  const std::vector<int32_t> ids = {3, 17, 17, 250, 300};
  const std::vector<float> w = {0.1f, 0.3f, 0.2f, 0.15f, 0.25f}, lp = {-3.f, -1.f, -1.f, -2.f, -1.5f};
  struct Case {
    bool dense, sparse;
    float tau, w_ce;
    int32_t target;
  };
  for (const Case c : {Case{true, false, 1.f, 0.f, -1}, Case{true, false, 2.f, 0.5f, 7}, Case{false, true, 1.5f, 0.f, -1},
                       Case{false, false, 1.f, 1.f, 42}, Case{false, true, 1.f, 0.3f, 0}}) {
    SCOPED_TRACE(testing::Message() << c.dense << c.sparse << " tau " << c.tau);
    std::vector<float> zr = z;
    ref::KdRowTeacherT<float> tr;
    KdRowTeacher tf;
    if (c.dense) tr.logits = tf.logits = zt.data();
    if (c.sparse) {
      tr.ids = tf.ids = ids.data();
      tr.weights = tf.weights = w.data();
      tr.logp = tf.logp = lp.data();
      tr.n_samples = tf.n_samples = static_cast<int>(ids.size());
    }
    const KdRowResult rr = ref::train_kd_row<float>(zr.data(), V, tr, c.tau, 0.7f, c.target, c.w_ce, 0.25f);
    at_fast_levels([&](Isa) {
      std::vector<float> zf = z;
      const KdRowResult rf = train_kd_row(zf.data(), V, tf, c.tau, 0.7f, c.target, c.w_ce, 0.25f);
      EXPECT_NEAR(rf.loss, rr.loss, 1e-5 * (1 + std::fabs(rr.loss)));
      EXPECT_NEAR(rf.kl, rr.kl, 1e-5 * (1 + std::fabs(rr.kl)));
      EXPECT_NEAR(rf.ce, rr.ce, 1e-5 * (1 + std::fabs(rr.ce)));
      EXPECT_EQ(rf.teacher_top1, rr.teacher_top1);
      expect_near_all(zf, zr, 1e-5, 1e-3, "loss gradient");
    });
  }
}

TEST(TrainKernels, AdamWMatchesReference) {
  ThreadPool pool(2);
  const int64_t n = 1000;
  auto p = randn(n, 40), g = randn(n, 41), m = randn(n, 42, 0.1f), v = randn(n, 43, 0.1f);
  for (float& x : v) x = x * x;
  AdamWParams a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  a.step = 3;
  a.grad_scale = 0.5f;
  auto pr = p, mr = m, vr = v;
  ref::train_adamw<float>(pr.data(), g.data(), mr.data(), vr.data(), n, a);
  at_fast_levels([&](Isa) {
    auto pf = p, mf = m, vf = v;
    train_adamw(pf.data(), g.data(), mf.data(), vf.data(), n, a, pool);
    expect_near_all(pf, pr, 1e-6, 1.0, "p");
    expect_near_all(mf, mr, 1e-6, 0.1, "m");
    expect_near_all(vf, vr, 1e-6, 0.1, "v");
  });
  const double ss = ref::train_sum_squares(g.data(), n);
  EXPECT_NEAR(train_sum_squares(g.data(), n, pool), ss, 1e-7 * ss);  // each square rounded to float
}

}  // namespace
}  // namespace ember
