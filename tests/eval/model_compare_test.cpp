// Model-vs-reference comparison: the statistics on hand-computed logits, a
// model against itself (exactly zero divergence), and random-weight models
// against their quantized copies (divergence grows as precision drops).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "eval/model_compare.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

TEST(ModelCompare, HandComputedStatistics) {
  // Position 0: P = (0.5, 0.5), Q = (0.1, 0.9); the next token is 1.
  // Position 1: P = Q = (0.2, 0.8) (shifted logits); the next token is 1.
  // The last row predicts nothing.
  const float ref[] = {0.0f, 0.0f, std::log(0.2f), std::log(0.8f), 0.0f, 0.0f};
  const float mod[] = {std::log(0.1f), std::log(0.9f), std::log(0.2f) + 3.0f, std::log(0.8f) + 3.0f, 5.0f, 0.0f};
  const int32_t toks[] = {0, 1, 1};
  const ModelComparison c = compare_logits(ref, mod, toks, 3, 2);
  EXPECT_EQ(c.n_positions, 2);
  const double kl0 = 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1);
  EXPECT_NEAR(c.kl_max, kl0, 1e-6);
  EXPECT_NEAR(c.kl_mean, kl0 / 2, 1e-6);
  EXPECT_NEAR(c.kl_p99, kl0, 1e-6);  // nearest rank 2 of the 2 positions
  EXPECT_DOUBLE_EQ(c.top1_agreement, 0.5);  // position 0: argmax 0 (first of a tie) vs 1; position 1: 1 vs 1
  EXPECT_NEAR(c.ppl_reference, std::exp((std::log(2.0) - std::log(0.8)) / 2), 1e-6);
  EXPECT_NEAR(c.ppl_model, std::exp((-std::log(0.9) - std::log(0.8)) / 2), 1e-6);
}

TEST(ModelCompare, TrimmedVocabularyReverseKl) {
  // Position 0: P = (0.5, 0.3, 0.2); the model cannot produce token 2 and
  // keeps the source's logits for 0 and 1 (a pure trim): Q = (5/8, 3/8, 0),
  // lost 0.2, KL(P~ || Q) 0, KL(Q || P) = -log(0.8). Position 1: P = (0.25,
  // 0.25, 0.5), Q = (0.6, 0.4, 0) (not a trim): KL(P~ || Q) over the kept
  // pair renormalized (0.5, 0.5), KL(Q || P) = 0.6 log(0.6 / 0.25) + 0.4
  // log(0.4 / 0.25). The next tokens are 1 (reachable) and 2 (not).
  const float ninf = -INFINITY;
  const float ref[] = {std::log(0.5f), std::log(0.3f), std::log(0.2f), std::log(0.25f), std::log(0.25f),
                       std::log(0.5f), 0.0f, 0.0f, 0.0f};
  const float mod[] = {std::log(0.5f), std::log(0.3f), ninf, std::log(0.6f) + 1.0f, std::log(0.4f) + 1.0f, ninf,
                       0.0f, 0.0f, 0.0f};
  const int32_t toks[] = {0, 1, 2};
  const ModelComparison c = compare_logits(ref, mod, toks, 3, 3);
  EXPECT_EQ(c.n_positions, 2);
  EXPECT_NEAR(c.lost_mass, (0.2 + 0.5) / 2, 1e-6);
  EXPECT_EQ(c.n_unreachable, 1);
  const double kl1 = 0.5 * std::log(0.5 / 0.6) + 0.5 * std::log(0.5 / 0.4);
  EXPECT_NEAR(c.kl_mean, kl1 / 2, 1e-6);  // position 0 contributes 0 (a pure trim)
  const double rkl0 = -std::log(0.8), rkl1 = 0.6 * std::log(0.6 / 0.25) + 0.4 * std::log(0.4 / 0.25);
  EXPECT_NEAR(c.kl_reverse_mean, (rkl0 + rkl1) / 2, 1e-6);
  // Without -inf logits the reverse KL is not computed (0).
  EXPECT_EQ(compare_logits(ref, ref, toks, 3, 3).kl_reverse_mean, 0.0);
}

class ModelCompareModels : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ember_model_compare_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Model> make(DType type, int n_vocab = 300) {
    auto s = gen_model_arch_defaults("llama");
    EXPECT_TRUE(s.is_ok());
    GenModelShape shape = *s;
    shape.n_layer = 2, shape.n_embd = 128, shape.n_ff = 256, shape.n_head = 4, shape.n_head_kv = 2;
    shape.n_vocab = n_vocab;
    GenModelOptions o;
    o.type = type;
    o.seed = 5;
    o.weight_std = 0.08f;  // peaked enough distributions for a meaningful top-1
    const std::string path = (dir_ / (std::string(dtype_name(type)) + std::to_string(n_vocab) + ".gguf")).string();
    EXPECT_TRUE(write_random_model(shape, o, path, pool_).is_ok());
    auto m = Model::load(path);
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    return m.is_ok() ? std::move(m.value()) : nullptr;
  }

  std::vector<int32_t> tokens() const {
    std::vector<int32_t> t;
    for (int i = 0; i < 40; ++i) t.push_back((i * 37 + 11) % 290);
    return t;
  }

  ThreadPool pool_{2};
  std::filesystem::path dir_;
};

// Windows of n_ctx positions, BOS bos first.
WindowedCompareOptions windows_of(int64_t n_ctx, int32_t bos) {
  WindowedCompareOptions o;
  o.n_ctx = n_ctx;
  o.bos_id = bos;
  return o;
}

// n token ids of a fixed pseudo-text.
std::vector<int32_t> text(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 41 + 3) % 290);
  return t;
}

TEST_F(ModelCompareModels, ModelAgainstItselfIsExact) {
  auto m = make(DType::kQ8_0);
  ASSERT_TRUE(m);
  auto c = compare_models(*m, *m, tokens(), pool_);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->n_positions, 39);
  EXPECT_EQ(c->kl_mean, 0.0);
  EXPECT_EQ(c->kl_max, 0.0);
  EXPECT_EQ(c->top1_agreement, 1.0);
  EXPECT_EQ(c->ppl_reference, c->ppl_model);
  EXPECT_GT(c->ppl_reference, 1.0);
}

TEST_F(ModelCompareModels, DivergenceGrowsAsPrecisionDrops) {
  auto f32 = make(DType::kF32), q8 = make(DType::kQ8_0), q4 = make(DType::kQ4_0), q2 = make(DType::kQ2_K);
  ASSERT_TRUE(f32 && q8 && q4 && q2);
  double last = 0;
  for (const Model* m : {q8.get(), q4.get(), q2.get()}) {
    auto c = compare_models(*f32, *m, tokens(), pool_);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_GT(c->kl_mean, last);
    EXPECT_GE(c->kl_max, c->kl_mean);
    EXPECT_NE(c->ppl_model, c->ppl_reference);
    if (m == q8.get()) {
      EXPECT_GT(c->top1_agreement, 0.9);  // measured 0.97 (Q4_0: 0.49, Q2_K: 0.33)
    }
    last = c->kl_mean;
  }
  EXPECT_LT(last, 1.0);
}

TEST_F(ModelCompareModels, RejectsMismatchedVocabulariesAndBadTokens) {
  auto a = make(DType::kQ8_0, 300), b = make(DType::kQ8_0, 320);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(compare_models(*a, *b, tokens(), pool_).is_ok());
  EXPECT_FALSE(compare_models(*a, *a, {1}, pool_).is_ok());
  EXPECT_FALSE(compare_models(*a, *a, {1, 300}, pool_).is_ok());
  EXPECT_FALSE(compare_models(*a, *a, {1, -1}, pool_).is_ok());
}

TEST_F(ModelCompareModels, WindowsPoolEveryScoredPosition) {
  auto f32 = make(DType::kF32), q4 = make(DType::kQ4_0);
  ASSERT_TRUE(f32 && q4);
  const std::vector<int32_t> t = text(100);
  WindowedCompareOptions o;
  o.n_ctx = 32;
  o.bos_id = 1;
  auto self = compare_models_windows(*q4, *q4, t, o, pool_);
  ASSERT_TRUE(self.is_ok()) << self.status().message();
  EXPECT_EQ(self->n_positions, 3 * 31);  // 3 whole windows of 32
  EXPECT_EQ(self->kl_mean, 0.0);
  EXPECT_EQ(self->kl_p99, 0.0);
  EXPECT_EQ(self->top1_agreement, 1.0);
  auto c = compare_models_windows(*f32, *q4, t, o, pool_);
  ASSERT_TRUE(c.is_ok());
  EXPECT_GT(c->kl_mean, 0.0);
  EXPECT_GE(c->kl_p99, c->kl_mean);
  EXPECT_GE(c->kl_max, c->kl_p99);
  // The pooled statistics equal a weighted combination of the windows, each
  // compared alone (BOS first).
  double kl = 0, nll = 0;
  for (int w = 0; w < 3; ++w) {
    std::vector<int32_t> seq(t.begin() + 32 * w, t.begin() + 32 * (w + 1));
    seq[0] = 1;
    auto one = compare_models(*f32, *q4, seq, pool_);
    ASSERT_TRUE(one.is_ok());
    kl += one->kl_mean * 31;
    nll += std::log(one->ppl_model) * 31;
  }
  EXPECT_NEAR(c->kl_mean, kl / 93, 1e-9);
  EXPECT_NEAR(std::log(c->ppl_model), nll / 93, 1e-9);
  o.max_windows = 2;
  auto two = compare_models_windows(*f32, *q4, t, o, pool_);
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(two->n_positions, 62);
  o.n_ctx = 101;
  EXPECT_FALSE(compare_models_windows(*f32, *q4, t, o, pool_).is_ok());  // not one whole window
}

bool same_stats(const ModelComparison& a, const ModelComparison& b) {
  return a.n_positions == b.n_positions && a.kl_mean == b.kl_mean && a.kl_max == b.kl_max && a.kl_p99 == b.kl_p99 &&
         a.top1_agreement == b.top1_agreement && a.ppl_reference == b.ppl_reference && a.ppl_model == b.ppl_model;
}

// Windows run in chunks that continue the cache: only chunk x n_vocab
// logits per side are held, and the statistics are the same bits whatever
// the chunk (batch invariance).
TEST_F(ModelCompareModels, ChunkedWindowsGiveTheSameBits) {
  auto f32 = make(DType::kF32), q4 = make(DType::kQ4_0);
  ASSERT_TRUE(f32 && q4);
  const std::vector<int32_t> t = text(100);
  const WindowedCompareOptions base = windows_of(48, 1);
  WindowedCompareOptions o = base;
  auto whole = compare_models_windows(*f32, *q4, t, o, pool_);  // one chunk per window
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  EXPECT_EQ(whole->n_positions, 2 * 47);
  for (int64_t chunk : {5, 16, 47}) {
    o.chunk = chunk;
    auto c = compare_models_windows(*f32, *q4, t, o, pool_);
    ASSERT_TRUE(c.is_ok());
    EXPECT_TRUE(same_stats(*c, *whole)) << "chunk " << chunk;
  }
  o.chunk = 0;
  EXPECT_FALSE(compare_models_windows(*f32, *q4, t, o, pool_).is_ok());
}

// score_from: only positions [P, n_ctx - 1) are scored (llama-perplexity's
// second half), the earlier ones being context; the statistics are those of
// compare_logits over those rows of the whole window's logits.
TEST_F(ModelCompareModels, ScoreFromScoresTheTailOfEachWindow) {
  auto f32 = make(DType::kF32), q4 = make(DType::kQ4_0);
  ASSERT_TRUE(f32 && q4);
  const std::vector<int32_t> t = text(40);
  WindowedCompareOptions o = windows_of(40, -1);
  o.score_from = 20;
  o.chunk = 6;
  auto c = compare_models_windows(*f32, *q4, t, o, pool_);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->n_positions, 19);
  const int V = f32->config().n_vocab;
  std::vector<float> lr(40 * V), lm(40 * V);
  for (auto [m, l] : {std::pair{f32.get(), &lr}, std::pair{q4.get(), &lm}}) {
    ForwardContext ctx(*m, pool_, 64);
    ContiguousKvCache cache(m->config(), 40);
    ASSERT_TRUE(ctx.forward(t.data(), 40, 0, cache, nullptr, l->data()).is_ok());
  }
  const ModelComparison want = compare_logits(lr.data() + 20 * V, lm.data() + 20 * V, t.data() + 20, 20, V);
  EXPECT_EQ(want.n_positions, 19);
  EXPECT_NEAR(c->kl_mean, want.kl_mean, 1e-12);
  EXPECT_EQ(c->kl_max, want.kl_max);
  EXPECT_EQ(c->kl_p99, want.kl_p99);
  EXPECT_EQ(c->top1_agreement, want.top1_agreement);
  EXPECT_NEAR(c->ppl_model, want.ppl_model, 1e-9 * want.ppl_model);
  o.score_from = 39;
  EXPECT_FALSE(compare_models_windows(*f32, *q4, t, o, pool_).is_ok());  // nothing left to score
}

// Several KV formats in one run (one reference pass): each result is the
// one that format gives alone; the f32 cache of the model itself is exact.
TEST_F(ModelCompareModels, SeveralKvFormatsAtOnceEqualEachAlone) {
  auto q4 = make(DType::kQ4_0);  // head dim 32: one q8 / q4 group per head
  ASSERT_TRUE(q4);
  const std::vector<int32_t> t = text(64);
  WindowedCompareOptions o;
  o.n_ctx = 32;
  o.chunk = 10;
  const std::vector<KvTypes> kvs = {
      {}, {KvType::kQ8, KvType::kQ8}, {KvType::kQ4, KvType::kQ4},
      {KvType::kQ4, KvType::kQ4, KvRotation::kHadamard, KvRotation::kHadamard}};
  auto all = compare_models_windows(*q4, *q4, t, o, kvs, pool_);
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  ASSERT_EQ(all->size(), kvs.size());
  EXPECT_EQ((*all)[0].kl_max, 0.0);
  EXPECT_GT((*all)[2].kl_mean, (*all)[1].kl_mean);  // 4-bit further than 8-bit
  for (size_t i = 0; i < kvs.size(); ++i) {
    o.model_kv = kvs[i];
    auto one = compare_models_windows(*q4, *q4, t, o, pool_);
    ASSERT_TRUE(one.is_ok());
    EXPECT_TRUE(same_stats((*all)[i], *one)) << i;
  }
  EXPECT_NE((*all)[3].kl_mean, (*all)[2].kl_mean);  // the rotation is applied
  EXPECT_FALSE(compare_models_windows(*q4, *q4, t, o, {}, pool_).is_ok());
}

// --concurrency B (lockstep decode of B windows, one token of each per
// step) on a Mixture-of-Experts model: with exact routing the statistics
// are the chunked run's bits (batch invariance), a last group smaller than
// B included; the expert counters see the steps (several tokens a step:
// more distinct experts than k); with expert sharing on, the model side
// reads fewer experts per step than the reference and its statistics move.
TEST(ModelCompareMoe, LockstepWindowsGiveTheChunkedBitsAndCountExperts) {
  ThreadPool pool(2);
  const std::string dir = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen3moe";
  auto ref = Model::load(dir), mod = Model::load(dir);
  ASSERT_TRUE(ref.is_ok() && mod.is_ok()) << ref.status().message();
  ASSERT_TRUE((*mod)->set_moe_routing(1, {}).is_ok());
  const int V = (*ref)->config().n_vocab, k = (*ref)->config().max_n_expert_used();
  std::vector<int32_t> t;
  for (int i = 0; i < 5 * 16; ++i) t.push_back((i * 29 + 7) % V);
  WindowedCompareOptions o = windows_of(16, 1);
  o.chunk = 5;
  auto chunked = compare_models_windows(**ref, **mod, t, o, pool);
  ASSERT_TRUE(chunked.is_ok()) << chunked.status().message();
  EXPECT_GT(chunked->kl_mean, 0.0) << "top-k 1 moves the model";
  for (int B : {1, 2, 5}) {
    o.concurrency = B;
    auto c = compare_models_windows(**ref, **mod, t, o, pool);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_TRUE(same_stats(*c, *chunked)) << "concurrency " << B;
    if (B == 1) {
      EXPECT_EQ(c->experts_per_step_reference, k) << "one token a step reads its k experts";
      EXPECT_EQ(c->experts_per_step_model, 1);
    } else {
      EXPECT_GT(c->experts_per_step_reference, k);
    }
  }
  auto shared = Model::load(dir);
  ASSERT_TRUE(shared.is_ok());
  ASSERT_TRUE((*shared)->set_moe_routing(0, {.fraction = 0.3f, .keep = 1}).is_ok());
  o.concurrency = 5;
  auto s = compare_models_windows(**ref, **shared, t, o, pool);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_LT(s->experts_per_step_model, s->experts_per_step_reference);
  EXPECT_GT(s->kl_mean, 0.0);
  o.concurrency = -1;
  EXPECT_FALSE(compare_models_windows(**ref, **shared, t, o, pool).is_ok());
}

}  // namespace
}  // namespace ember
