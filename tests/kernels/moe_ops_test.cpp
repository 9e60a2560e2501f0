// The Mixture-of-Experts ops of the Backend (kernels/moe.h) at every ISA
// level the CPU has (scalar, avx2, avx512, amx):
//   - the router against hand-computed choices and weights (softmax over
//     all experts then top k, with and without renormalising; top k then
//     softmax; sigmoid; ties to the lower index; NaN logits never chosen);
//   - the grouped expert matmul, in every weight type the experts come in
//     (and the interleaved layouts), bit-identical to one Backend::matmul of
//     each expert's gathered rows, within the op's tolerance of (at the
//     scalar level: bit-identical to) the scalar reference
//     ref::moe_matmul, and the same bits for a slot whatever the other
//     slots, their experts and the thread count;
//   - the combine against double arithmetic (exact: one rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "backend_under_test.h"
#include "kernels/interleave.h"
#include "kernels/ref/moe.h"
#include "kernels/registry.h"
#include "matrix_view.h"
#include "quant/quantize.h"

namespace ember {
namespace {

using namespace testing_backend;

// Every level the CPU has, amx included.
std::vector<Isa> levels() {
  std::vector<Isa> v;
  for (int l = 0; l <= static_cast<int>(cpu_max_isa()); ++l) v.push_back(static_cast<Isa>(l));
  return v;
}

class MoeOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_active_isa(GetParam());
    be_ = make_cpu_backend(pool_);
    be1_ = make_cpu_backend(pool1_);
  }
  void TearDown() override { set_active_isa(saved_); }
  ThreadPool pool_{2}, pool1_{1};
  std::unique_ptr<Backend> be_, be1_;

 private:
  Isa saved_ = Isa::kScalar;
};

INSTANTIATE_TEST_SUITE_P(Levels, MoeOpsTest, ::testing::ValuesIn(levels()),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

TEST_P(MoeOpsTest, RouterChoosesAndWeighs) {
  // Row 0: distinct logits; row 1: a tie between experts 1 and 3 at the
  // k-th place (the lower index wins); row 2: a NaN that must not win.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f, 3.0f,  //
                                     0.0f, 1.0f, -3.0f, 1.0f, 2.0f,  //
                                     nan,  0.2f, 0.1f,  0.4f, 0.3f};
  const int E = 5, k = 2;
  auto softmax = [&](int row, int i) {
    double s = 0, m = -INFINITY;
    for (int j = 0; j < E; ++j)
      if (!std::isnan(logits[row * E + j])) m = std::max(m, static_cast<double>(logits[row * E + j]));
    for (int j = 0; j < E; ++j)
      if (!std::isnan(logits[row * E + j])) s += std::exp(logits[row * E + j] - m);
    return std::exp(logits[row * E + i] - m) / s;
  };
  const int want_ids[3][2] = {{4, 1}, {4, 1}, {3, 4}};
  for (bool norm : {false, true}) {
    MoeRouting r{MoeGating::kSoftmax, E, k, norm, 1.f};
    std::vector<int32_t> ids(3 * k);
    std::vector<float> w(3 * k);
    be_->moe_route(logits.data(), E, 3, r, ids.data(), w.data());
    for (int t = 0; t < 3; ++t) {
      const double a = softmax(t, want_ids[t][0]), b = softmax(t, want_ids[t][1]);
      EXPECT_EQ(ids[t * k], want_ids[t][0]) << t;
      EXPECT_EQ(ids[t * k + 1], want_ids[t][1]) << t;
      EXPECT_EQ(w[t * k], static_cast<float>(norm ? a / (a + b) : a)) << t;
      EXPECT_EQ(w[t * k + 1], static_cast<float>(norm ? b / (a + b) : b)) << t;
    }
  }
  // The k largest logits, softmax over them, scaled.
  MoeRouting r{MoeGating::kSoftmaxTopK, E, k, false, 2.5f};
  std::vector<int32_t> ids(k);
  std::vector<float> w(k);
  be_->moe_route(logits.data(), E, 1, r, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 1}));
  EXPECT_EQ(w[0], static_cast<float>(2.5 / (1 + std::exp(-1.0))));
  EXPECT_EQ(w[1], static_cast<float>(2.5 * std::exp(-1.0) / (1 + std::exp(-1.0))));
  // Sigmoid of one logit (the shared expert's gate).
  const float g = -0.75f;
  MoeRouting s{MoeGating::kSigmoid, 1, 1, false, 1.f};
  be_->moe_route(&g, 1, 1, s, ids.data(), w.data());
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(w[0], static_cast<float>(1.0 / (1.0 + std::exp(0.75))));
}

// An `allowed` mask: the k chosen among the allowed experts, the softmax
// still over all of them; a mask allowing every expert is exact routing bit
// for bit; fewer allowed than k: the rest weigh 0.
TEST_P(MoeOpsTest, RouterWithinAnAllowedSet) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f, 3.0f};
  const int E = 5, k = 2;
  double denom = 0;
  for (float l : logits) denom += std::exp(static_cast<double>(l) - 3.0);
  auto p = [&](int i) { return std::exp(static_cast<double>(logits[i]) - 3.0) / denom; };
  const uint8_t all[E] = {1, 1, 1, 1, 1}, some[E] = {1, 0, 1, 1, 0}, one[E] = {0, 0, 1, 0, 0};
  for (MoeGating g : {MoeGating::kSoftmax, MoeGating::kSoftmaxTopK, MoeGating::kSigmoid})
    for (bool norm : {false, true}) {
      MoeRouting r{g, E, k, norm, 1.5f};
      int32_t ids[k], ids_all[k];
      float w[k], w_all[k];
      be_->moe_route(logits.data(), E, 1, r, ids, w);
      r.allowed = all;
      be_->moe_route(logits.data(), E, 1, r, ids_all, w_all);
      EXPECT_EQ(std::vector<int32_t>(ids, ids + k), std::vector<int32_t>(ids_all, ids_all + k));
      EXPECT_EQ(std::vector<float>(w, w + k), std::vector<float>(w_all, w_all + k)) << "all allowed: exact bits";
    }
  for (bool norm : {false, true}) {
    MoeRouting r{MoeGating::kSoftmax, E, k, norm, 1.f};
    r.allowed = some;
    int32_t ids[k];
    float w[k];
    be_->moe_route(logits.data(), E, 1, r, ids, w);
    EXPECT_EQ(ids[0], 3);
    EXPECT_EQ(ids[1], 0);
    const double a = p(3), b = p(0);
    EXPECT_EQ(w[0], static_cast<float>(norm ? a / (a + b) : a));
    EXPECT_EQ(w[1], static_cast<float>(norm ? b / (a + b) : b));
    r.allowed = one;
    be_->moe_route(logits.data(), E, 1, r, ids, w);
    EXPECT_EQ(ids[0], 2);
    EXPECT_EQ(w[0], static_cast<float>(norm ? 1.0 : p(2)));
    EXPECT_EQ(w[1], 0.f) << "a disallowed filler weighs nothing";
  }
}

// Expert sharing's set: every token's first `keep` experts, then the others
// by their gating mass over the group (ties: lower index) up to the budget.
TEST(MoeShare, WarmUpThenMassUpToTheBudget) {
  // 3 tokens, k = 2, 6 experts.
  const int32_t ids[] = {0, 1,   //
                         2, 1,   //
                         0, 3};
  const float w[] = {0.6f, 0.4f,  //
                     0.5f, 0.5f,  //
                     0.7f, 0.3f};
  uint8_t allowed[6];
  // keep 1: {0, 2}; masses: 1: 0.9, 3: 0.3 -> budget 3 adds 1.
  EXPECT_EQ(ref::moe_share_select(ids, w, 3, 2, 6, 3, 1, allowed), 3);
  EXPECT_EQ(std::vector<uint8_t>(allowed, allowed + 6), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
  // Budget 2 < the warm-up's 2 experts: the warm-up stays whole.
  EXPECT_EQ(ref::moe_share_select(ids, w, 3, 2, 6, 1, 1, allowed), 2);
  EXPECT_EQ(std::vector<uint8_t>(allowed, allowed + 6), (std::vector<uint8_t>{1, 0, 1, 0, 0, 0}));
  // Budget 6: only experts with mass join (4 and 5 never).
  EXPECT_EQ(ref::moe_share_select(ids, w, 3, 2, 6, 6, 1, allowed), 4);
  EXPECT_EQ(std::vector<uint8_t>(allowed, allowed + 6), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  // keep 2: every token's two experts.
  EXPECT_EQ(ref::moe_share_select(ids, w, 3, 2, 6, 2, 2, allowed), 4);
  // Equal masses: the lower index first.
  const int32_t tie_ids[] = {0, 4, 1, 5};
  const float tie_w[] = {0.5f, 0.25f, 0.5f, 0.25f};
  EXPECT_EQ(ref::moe_share_select(tie_ids, tie_w, 2, 2, 6, 3, 1, allowed), 3);
  EXPECT_EQ(std::vector<uint8_t>(allowed, allowed + 6), (std::vector<uint8_t>{1, 1, 0, 0, 1, 0}));
}

TEST_P(MoeOpsTest, CombineIsOneRoundingInRankOrder) {
  const int k = 3;
  const int64_t n = 4, dim = 37, ldy = 40, ldo = 39;
  const std::vector<float> y = gaussian(n * k * ldy, 3.f, 1), w = gaussian(n * k, 1.f, 2);
  std::vector<float> out(n * ldo, 0.5f), acc(n * ldo, 0.5f);
  be_->moe_combine(y.data(), ldy, w.data(), k, n, dim, out.data(), ldo, false);
  be_->moe_combine(y.data(), ldy, w.data(), k, n, dim, acc.data(), ldo, true);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i) {
      double s = 0;
      for (int j = 0; j < k; ++j) s += static_cast<double>(w[t * k + j]) * y[(t * k + j) * ldy + i];
      EXPECT_EQ(out[t * ldo + i], static_cast<float>(s));
      EXPECT_EQ(acc[t * ldo + i], 0.5f + static_cast<float>(s));
    }
  EXPECT_EQ(out[ldo - 1], 0.5f);  // past dim: untouched
}

// n_expert matrices [rows, n] of type t (interleaved when `interleave`).
struct Experts {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TensorView> views;
  std::vector<const TensorView*> ptrs;
};

Experts make_experts(DType t, int n_expert, int64_t rows, int64_t n, bool interleave, uint32_t seed) {
  Experts x;
  for (int e = 0; e < n_expert; ++e) {
    const std::vector<float> f = gaussian(rows * n, 0.5f + e, seed + e);
    std::vector<uint8_t> b(dtype_row_size(t, n) * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row_ref(t, f.data() + r * n, b.data() + r * dtype_row_size(t, n), n);
    if (interleave) {
      std::vector<uint8_t> il(b.size());
      interleave_rows(t, b.data(), rows, n, il.data());
      b = std::move(il);
    }
    x.bytes.push_back(std::move(b));
  }
  for (int e = 0; e < n_expert; ++e)
    x.views.push_back(matrix_view(interleave ? interleaved_type(t) : t, rows, n, x.bytes[e]));
  for (const TensorView& v : x.views) x.ptrs.push_back(&v);
  return x;
}

TEST_P(MoeOpsTest, GroupedMatmulEqualsPerExpertMatmul) {
  struct Case {
    DType t;
    bool interleave;
  };
  const Case cases[] = {{DType::kF32, false},  {DType::kF16, false},  {DType::kBF16, false}, {DType::kQ4_0, false},
                        {DType::kQ5_0, false}, {DType::kQ8_0, false}, {DType::kQ4_K, false}, {DType::kQ5_K, false},
                        {DType::kQ6_K, false}, {DType::kQ4_0, true},  {DType::kQ5_0, true},  {DType::kQ8_0, true},
                        {DType::kQ4_K, true},  {DType::kQ6_K, true}};
  const int E = 6, k = 2;
  const int64_t rows = 48, n_tok = 40;
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.t)) + (c.interleave ? " interleaved" : ""));
    const int64_t n = dtype_block_size(c.t) == 256 ? 512 : 160, ldx = n + 3;
    const Experts gate = make_experts(c.t, E, rows, n, c.interleave, 100);
    const Experts up = make_experts(c.t, E, rows + 16, n, c.interleave, 200);
    const std::vector<float> x = gaussian(n_tok * ldx, 1.f, 3);
    // Routing skewed to expert 2 (more than 16 tokens: token lanes, tiles,
    // AMX), a single token for expert 5, none for expert 4.
    std::vector<int32_t> ids(n_tok * k), x_row(n_tok * k);
    for (int64_t t = 0; t < n_tok; ++t) {
      ids[t * k] = t < 30 ? 2 : static_cast<int32_t>(rng() % 4);
      ids[t * k + 1] = t == 11 ? 5 : (ids[t * k] + 1) % 4;
      x_row[t * k] = x_row[t * k + 1] = static_cast<int32_t>(t);
    }
    const int64_t S = n_tok * k, ldg = rows + 5, ldu = rows + 16;
    std::vector<float> g(S * ldg, NAN), u(S * ldu, NAN);
    const ExpertTarget tg[] = {{gate.ptrs.data(), g.data(), ldg, 0}, {up.ptrs.data(), u.data(), ldu, 0}};
    be_->moe_matmul(x.data(), ldx, S, ids.data(), x_row.data(), E, tg, 2);
    // One matmul per expert over its gathered rows.
    for (int e = 0; e < E; ++e) {
      std::vector<int64_t> slots;
      for (int64_t s = 0; s < S; ++s)
        if (ids[s] == e) slots.push_back(s);
      if (slots.empty()) continue;
      std::vector<float> xe(slots.size() * n);
      for (size_t i = 0; i < slots.size(); ++i) std::copy_n(x.data() + x_row[slots[i]] * ldx, n, xe.data() + i * n);
      std::vector<float> ge(slots.size() * rows), ue(slots.size() * (rows + 16));
      be_->matmul(gate.views[e], xe.data(), n, ge.data(), rows, static_cast<int64_t>(slots.size()));
      be_->matmul(up.views[e], xe.data(), n, ue.data(), rows + 16, static_cast<int64_t>(slots.size()));
      for (size_t i = 0; i < slots.size(); ++i) {
        ASSERT_TRUE(same_all(g.data() + slots[i] * ldg, ge.data() + i * rows, rows)) << "expert " << e;
        ASSERT_TRUE(same_all(u.data() + slots[i] * ldu, ue.data() + i * (rows + 16), rows + 16)) << "expert " << e;
      }
    }
    for (int64_t s = 0; s < S; ++s) ASSERT_TRUE(std::isnan(g[s * ldg + rows])) << "padding written";
    // The scalar reference: bit-identical at the scalar level, else within
    // the matmul tolerance (summation order only).
    std::vector<float> gr(S * ldg), ur(S * ldu);
    const ExpertTarget tr[] = {{gate.ptrs.data(), gr.data(), ldg, 0}, {up.ptrs.data(), ur.data(), ldu, 0}};
    ref::moe_matmul(x.data(), ldx, S, ids.data(), x_row.data(), tr, 2);
    // Tolerance: a few roundings per block step of sum |w x|.
    const DType base = c.t;
    std::vector<std::vector<float>> deq(E, std::vector<float>(rows * n));
    std::vector<uint8_t> raw(dtype_row_size(base, n));
    for (int e = 0; e < E; ++e)
      for (int64_t o = 0; o < rows; ++o) {
        copy_row_bytes(gate.views[e], o, raw.data());
        dequantize_row_ref(base, raw.data(), deq[e].data() + o * n, n);
      }
    const double steps = dtype_block_size(base) == 1 ? n / 8.0 : static_cast<double>(n / dtype_block_size(base));
    for (int64_t s = 0; s < S; ++s)
      for (int64_t o = 0; o < rows; ++o) {
        const double want = gr[s * ldg + o], got = g[s * ldg + o];
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(deq[ids[s]][o * n + i] * x[x_row[s] * ldx + i]);
        if (GetParam() == Isa::kScalar) ASSERT_TRUE(same_bits(static_cast<float>(got), static_cast<float>(want)));
        else ASSERT_NEAR(got, want, (4 * steps + 16) * kUlp * 2 * mag + 1e-30) << s << " " << o;
      }
    // Batch invariance: one thread; a few slots alone, in another order.
    std::vector<float> g1(S * ldg, NAN), u1(S * ldu, NAN);
    const ExpertTarget t1[] = {{gate.ptrs.data(), g1.data(), ldg, 0}, {up.ptrs.data(), u1.data(), ldu, 0}};
    be1_->moe_matmul(x.data(), ldx, S, ids.data(), x_row.data(), E, t1, 2);
    EXPECT_TRUE(same_all(g1, g));
    EXPECT_TRUE(same_all(u1, u));
    const int64_t pick[] = {23, 0, 57, 22};
    std::vector<int32_t> pid, prow;
    for (int64_t s : pick) pid.push_back(ids[s]), prow.push_back(x_row[s]);
    std::vector<float> gp(4 * ldg);
    const ExpertTarget tp{gate.ptrs.data(), gp.data(), ldg, 0};
    be_->moe_matmul(x.data(), ldx, 4, pid.data(), prow.data(), E, &tp, 1);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(same_all(gp.data() + i * ldg, g.data() + pick[i] * ldg, rows)) << i;
  }
}

// Rows without x_row (the down projection reads its slot's own row) and
// 4-bit activations.
TEST_P(MoeOpsTest, GroupedMatmulOwnRowsAndInt4Activations) {
  const int E = 3;
  const int64_t rows = 32, n = 128, S = 20;
  const Experts w = make_experts(DType::kQ4_0, E, rows, n, false, 300);
  const std::vector<float> x = gaussian(S * n, 1.f, 9);
  std::vector<int32_t> ids(S);
  for (int64_t s = 0; s < S; ++s) ids[s] = static_cast<int32_t>((s * 7) % E);
  for (int bits : {0, 4}) {
    std::vector<float> y(S * rows), want(S * rows);
    const ExpertTarget t{w.ptrs.data(), y.data(), rows, bits};
    be_->moe_matmul(x.data(), n, S, ids.data(), nullptr, E, &t, 1);
    for (int64_t s = 0; s < S; ++s) {
      const MatmulTarget m{w.ptrs[ids[s]], want.data() + s * rows, rows, bits};
      be_->matmul(x.data() + s * n, n, 1, &m, 1);
    }
    EXPECT_TRUE(same_all(y, want)) << bits << "-bit activations";
  }
}

}  // namespace
}  // namespace ember
