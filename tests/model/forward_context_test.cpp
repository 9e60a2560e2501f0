// ForwardContext's stages (prepare / embed / run_layers / head) give the
// bits of forward_ragged however they are driven (layers in pieces, a
// pipeline across two contexts, chosen head rows), and an injected Backend
// receives every op: Q/K/V in one matmul call with three targets, gate/up in
// one with two, RoPE angles once per step for each set of frequencies; rows
// given from outside (a whole-stack draft's) give the full forward's bits.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "kernels/backend.h"
#include "model/model.h"
#include "tiny_layered_model.h"

namespace ember {
namespace {

const std::vector<int32_t> kTokens = {1, 5, 9, 2, 63, 0, 17};

std::vector<float> reference_all(const Model& m, ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(kTokens.size());
  ForwardContext ctx(m, pool, 16);
  ContiguousKvCache cache(m.config(), n);
  std::vector<float> all(n * m.config().n_vocab);
  EXPECT_TRUE(ctx.forward(kTokens.data(), n, 0, cache, nullptr, all.data()).is_ok());
  return all;
}

TEST(ForwardStages, LayersInPiecesAndChosenHeadRowsGiveTheSameBits) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    ASSERT_TRUE(m);
    const int64_t n = static_cast<int64_t>(kTokens.size()), V = m->config().n_vocab;
    const std::vector<float> want = reference_all(*m, pool);

    ForwardContext ctx(*m, pool, 16);
    ContiguousKvCache cache(m->config(), n);
    const SeqBatch sb{kTokens.data(), n, 0, &cache, true, false};
    ASSERT_TRUE(ctx.prepare(&sb, 1).is_ok());
    EXPECT_EQ(ctx.n_tokens(), n);
    ASSERT_EQ(ctx.logit_rows(), std::vector<int64_t>{n - 1});
    ctx.embed();
    ctx.run_layers(0, 1);
    ctx.run_layers(1, 1);  // empty range
    ctx.run_layers(1, m->config().n_layer);
    const int64_t rows[] = {4, 0, 6, 4};
    std::vector<float> got(4 * V);
    ctx.head(rows, 4, got.data());
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(0, std::memcmp(got.data() + r * V, want.data() + rows[r] * V, V * sizeof(float))) << r;
  }
}

TEST(ForwardStages, PipelineAcrossTwoContextsGivesTheSameBits) {
  ThreadPool pool(2);
  auto m = test::load_tiny(test::TinySpec{});
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  const int64_t n = static_cast<int64_t>(kTokens.size()), V = c.n_vocab;
  const std::vector<float> want = reference_all(*m, pool);
  // Stage 0 holds the K/V of layer 0, stage 1 of the others.
  ForwardContext s0(*m, pool, 16), s1(*m, pool, 16);
  ContiguousKvCache k0(c, n), k1(c, n);
  const SeqBatch b0{kTokens.data(), n, 0, &k0, false, true}, b1{kTokens.data(), n, 0, &k1, false, true};
  ASSERT_TRUE(s0.prepare(&b0, 1).is_ok());
  s0.embed();
  s0.run_layers(0, 1);
  ASSERT_TRUE(s1.prepare(&b1, 1).is_ok());
  std::memcpy(s1.hidden(), s0.hidden(), n * c.n_embd * sizeof(float));
  s1.run_layers(1, c.n_layer);
  std::vector<float> got(n * V);
  s1.head(s1.logit_rows().data(), static_cast<int64_t>(s1.logit_rows().size()), got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

// Given rows (SeqBatch::pre_hidden): the first 4 tokens run alone (their
// K/V written, their final residual rows kept), then the 7-token slice with
// those 4 rows given computes only the last 3 and returns all 7 logits rows
// with the bits of the full forward, next to another sequence in the same
// batch. Bad given-row counts are errors, not crashes.
TEST(ForwardStages, GivenRowsGiveTheFullForwardsBits) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    ASSERT_TRUE(m);
    const ModelConfig& c = m->config();
    const int64_t n = static_cast<int64_t>(kTokens.size()), V = c.n_vocab, E = c.n_embd, pre = 4;
    const std::vector<float> want = reference_all(*m, pool);
    ForwardContext ctx(*m, pool, 16);
    ContiguousKvCache cache(c, n), other(c, n);
    const SeqBatch first{kTokens.data(), pre, 0, &cache, false, true};
    ASSERT_TRUE(ctx.prepare(&first, 1).is_ok());
    ctx.embed();
    ctx.run_layers(0, c.n_layer);
    std::vector<float> rows(ctx.hidden(), ctx.hidden() + pre * E);
    SeqBatch b[2] = {{kTokens.data(), 2, 0, &other, true, false}, {kTokens.data(), n, 0, &cache, false, true}};
    b[1].pre_hidden = rows.data();
    b[1].n_pre = pre;
    std::vector<float> got((1 + n) * V);
    ASSERT_TRUE(ctx.forward_ragged(b, 2, got.data()).is_ok());
    EXPECT_EQ(ctx.n_tokens(), 2 + n - pre);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data() + 1 * V, V * sizeof(float)));  // the other sequence
    EXPECT_EQ(0, std::memcmp(got.data() + V, want.data(), n * V * sizeof(float)));
    SeqBatch bad = b[1];
    bad.n_pre = n;  // nothing left to compute
    EXPECT_FALSE(ctx.forward_ragged(&bad, 1, got.data()).is_ok());
    bad.n_pre = pre;
    bad.all_logits = false;  // given rows need every row's logits
    EXPECT_FALSE(ctx.forward_ragged(&bad, 1, got.data()).is_ok());
    bad.all_logits = true;
    bad.pre_hidden = nullptr;
    EXPECT_FALSE(ctx.forward_ragged(&bad, 1, got.data()).is_ok());
    ForwardContext small(*m, pool, 4);  // 7 positions: more head rows than the batch holds
    EXPECT_FALSE(small.forward_ragged(&b[1], 1, got.data()).is_ok());
  }
}

TEST(ForwardStages, MisuseIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ThreadPool pool(1);
  auto m = test::load_tiny(test::TinySpec{});
  ASSERT_TRUE(m);
  ForwardContext ctx(*m, pool, 4);
  ContiguousKvCache cache(m->config(), 8);
  const SeqBatch too_many{kTokens.data(), 5, 0, &cache, true, false};
  EXPECT_FALSE(ctx.prepare(&too_many, 1).is_ok());
  EXPECT_DEATH(ctx.embed(), "before a successful prepare");
  const SeqBatch ok{kTokens.data(), 2, 0, &cache, true, false};
  ASSERT_TRUE(ctx.prepare(&ok, 1).is_ok());
  EXPECT_DEATH(ctx.run_layers(0, m->config().n_layer + 1), "l1 <= cfg_.n_layer");
  const int64_t bad_row = 2;
  std::vector<float> logits(m->config().n_vocab);
  EXPECT_DEATH(ctx.head(&bad_row, 1, logits.data()), "rows\\[r\\] < n_");
}

// Counts every op and the targets of each matmul call, then forwards to the
// CPU backend.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(ThreadPool& pool) : cpu_(make_cpu_backend(pool)) {}
  std::map<std::string, int> ops;
  std::vector<int> matmul_targets;  // per matmul call

  const char* name() const override { return "counting"; }
  void matmul(const float* x, int64_t ldx, int64_t n, const MatmulTarget* t, int n_t) override {
    matmul_targets.push_back(n_t);
    cpu_->matmul(x, ldx, n, t, n_t);
  }
  void embed(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) override {
    ++ops["embed"];
    cpu_->embed(table, ids, n, scale, out);
  }
  void rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                int64_t dim, float eps) override {
    ++ops[dim == 8 ? "rms_norm_head" : "rms_norm"];
    cpu_->rms_norm(x, ld_x, w, out, ld_out, n_rows, dim, eps);
  }
  void rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* c, float* s) override {
    ++ops["rope_angles"];
    cpu_->rope_angles(pos, n, inv_freq, n_rot, c, s);
  }
  void rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style, const float* c,
            const float* s) override {
    ++ops["rope"];
    cpu_->rope(x, ld, n, n_heads, head_dim, n_rot, style, c, s);
  }
  void add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b) override {
    ++ops["add_bias"];
    cpu_->add_bias(x, ld, n, dim, b);
  }
  void hadamard(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, bool transpose) override {
    ++ops["hadamard"];
    cpu_->hadamard(x, ld, n, n_heads, head_dim, transpose);
  }
  void add(float* y, const float* x, int64_t n) override {
    ++ops["add"];
    cpu_->add(y, x, n);
  }
  void gated_activation(GatedActivation a, float* g, int64_t ldg, const float* u, int64_t ldu, int64_t n,
                        int64_t dim) override {
    ++ops["gated_activation"];
    cpu_->gated_activation(a, g, ldg, u, ldu, n, dim);
  }
  void softcap(float* x, int64_t n, float cap) override {
    ++ops["softcap"];
    cpu_->softcap(x, n, cap);
  }
  void moe_route(const float* logits, int64_t ld, int64_t n, const MoeRouting& r, int32_t* ids, float* w) override {
    ++ops["moe_route"];
    cpu_->moe_route(logits, ld, n, r, ids, w);
  }
  void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                  int n_expert, const ExpertTarget* targets, int n_targets) override {
    ++ops["moe_matmul"];
    cpu_->moe_matmul(x, ldx, n_slots, expert, x_row, n_expert, targets, n_targets);
  }
  void moe_combine(const float* y, int64_t ldy, const float* w, int k, int64_t n, int64_t dim, float* out,
                   int64_t ld_out, bool accumulate) override {
    ++ops["moe_combine"];
    cpu_->moe_combine(y, ldy, w, k, n, dim, out, ld_out, accumulate);
  }
  void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n, const KvView* views,
                 const int32_t* vot, float* out) override {
    ++ops["attention"];
    cpu_->attention(s, q, pos, n, views, vot, out);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

TEST(ForwardBackend, EveryOpGoesToTheInjectedBackendInWholeBatches) {
  ThreadPool pool(2);
  for (const test::TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = test::load_tiny(s);
    ASSERT_TRUE(m);
    const ModelConfig& c = m->config();
    const int L = c.n_layer;
    const int64_t n = static_cast<int64_t>(kTokens.size());
    const std::vector<float> want = reference_all(*m, pool);

    auto counting = std::make_unique<CountingBackend>(pool);
    CountingBackend* be = counting.get();
    ForwardContext ctx(*m, std::move(counting), 16);
    ContiguousKvCache cache(c, n);
    std::vector<float> got(n * c.n_vocab);
    ASSERT_TRUE(ctx.forward(kTokens.data(), n, 0, cache, nullptr, got.data()).is_ok());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));

    // Per layer: Q/K/V (3 targets), O, gate/up (2 targets), down; then the head.
    std::vector<int> expect_targets;
    for (int il = 0; il < L; ++il) expect_targets.insert(expect_targets.end(), {3, 1, 2, 1});
    expect_targets.push_back(1);
    EXPECT_EQ(be->matmul_targets, expect_targets);
    const bool gemma = s.arch == "gemma3", qk = gemma || s.arch == "qwen3";
    // Gemma 3's sliding layers (0, 2) and its global layer (1) have different
    // RoPE bases: two angle tables; every other model one.
    EXPECT_EQ(m->n_rope_tables(), gemma ? 2 : 1);
    EXPECT_EQ(m->rope_table(1), gemma ? 1 : 0);
    EXPECT_EQ(m->rope_table(2), 0);
    std::map<std::string, int> expect = {
        {"embed", 1},
        {"rms_norm", L * (gemma ? 4 : 2) + 1},  // pre-norms (+ post-norms), output norm
        {"rope_angles", gemma ? 2 : 1},  // once per step per set of frequencies
        {"rope", 2 * L},
        {"attention", L},
        {"add", 2 * L},
        {"gated_activation", L},
    };
    if (qk) expect["rms_norm_head"] = 2 * L;
    if (s.qkv_bias) expect["add_bias"] = 4 * L;
    if (c.final_logit_softcap > 0) expect["softcap"] = 1;
    EXPECT_EQ(be->ops, expect);
  }
}

}  // namespace
}  // namespace ember
