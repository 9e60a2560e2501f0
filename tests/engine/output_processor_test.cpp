// The output processor through the engine (fake runner, no model file): the
// per-request logits-processor hook (state advanced on accept, cloned for
// forked samples, raw log-probabilities reported), and the stop / length
// rules.
#include "engine/output_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/engine.h"
#include "engine/fake_model_runner.h"

namespace ember {
namespace {

// Forces a fixed continuation: every token but script[i] is masked at output
// position i; past the script nothing is masked.
class ForceScript final : public LogitsProcessor {
 public:
  explicit ForceScript(std::vector<int32_t> script) : script_(std::move(script)) {}
  void process(const int32_t*, int64_t, int64_t, float* logits, int n_vocab) override {
    ++calls_;
    if (pos_ >= script_.size()) return;
    for (int j = 0; j < n_vocab; ++j)
      if (j != script_[pos_]) logits[j] = -INFINITY;
  }
  void accept(int32_t) override { ++pos_; }
  std::unique_ptr<LogitsProcessor> clone() const override { return std::make_unique<ForceScript>(*this); }
  int calls_ = 0;

 private:
  std::vector<int32_t> script_;
  size_t pos_ = 0;
};

// Bans a set of tokens everywhere.
class Ban final : public LogitsProcessor {
 public:
  explicit Ban(std::vector<int32_t> banned) : banned_(std::move(banned)) {}
  void process(const int32_t*, int64_t, int64_t, float* logits, int) override {
    for (int32_t t : banned_) logits[t] = -INFINITY;
  }
  std::unique_ptr<LogitsProcessor> clone() const override { return std::make_unique<Ban>(*this); }

 private:
  std::vector<int32_t> banned_;
};

struct Drained {
  std::map<std::string, FinishedRequest> finished;
};

Drained drain(Engine& e) {
  Drained r;
  while (e.has_unfinished()) {
    auto out = e.step();
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out.is_ok()) break;
    for (auto& f : out->finished) r.finished[f.id + "/" + std::to_string(f.index)] = f;
    EXPECT_TRUE(e.check_invariants().is_ok());
  }
  return r;
}

double raw_logprob(const FakeModelConfig& mc, const std::vector<int32_t>& toks, int32_t next) {
  std::vector<float> lg(mc.n_vocab);
  FakeModelRunner::reference_logits(mc, toks.data(), static_cast<int64_t>(toks.size()) - 1, lg.data());
  double mx = -INFINITY, sum = 0;
  for (float x : lg) mx = std::max<double>(mx, x);
  for (float x : lg) sum += std::exp(x - mx);
  return lg[next] - mx - std::log(sum);
}

TEST(OutputProcessor, LogitsProcessorForcesEverySampleAndReportsRawLogprobs) {
  FakeModelConfig mc;
  mc.windows = {0, 5};
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 64;
  auto e = Engine::create(std::make_unique<FakeModelRunner>(mc), cfg);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  const std::vector<int32_t> script = {5, 9, 9, 2, 40, 17};
  RequestParams p;
  p.prompt = {1, 2, 3, 4, 5, 6, 7};
  p.sampling.seed = 3;  // sampled (temperature 0.8), yet the script wins
  p.max_tokens = static_cast<int>(script.size());
  p.n = 3;
  p.logprobs = true;
  p.logits_processor = std::make_shared<ForceScript>(script);
  ASSERT_TRUE((*e)->add_request("f", p).is_ok());
  Drained r = drain(**e);
  ASSERT_EQ(r.finished.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const FinishedRequest& f = r.finished["f/" + std::to_string(k)];
    EXPECT_EQ(f.output, script) << k;
    ASSERT_EQ(f.logprobs.size(), script.size());
    std::vector<int32_t> toks = p.prompt;
    for (size_t i = 0; i < script.size(); ++i) {
      EXPECT_NEAR(f.logprobs[i], raw_logprob(mc, toks, script[i]), 1e-4) << k << " " << i;
      toks.push_back(script[i]);
    }
  }
  // The prototype itself is never called: each sample has its own clone.
  EXPECT_EQ(static_cast<const ForceScript&>(*p.logits_processor).calls_, 0);
}

TEST(OutputProcessor, BannedTokensNeverAppear) {
  FakeModelConfig mc;
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 64;
  // Greedy without the processor, to know which tokens to ban.
  std::vector<int32_t> free_run;
  {
    auto e = Engine::create(std::make_unique<FakeModelRunner>(mc), cfg);
    ASSERT_TRUE(e.is_ok());
    RequestParams p;
    p.prompt = {3, 1, 4, 1, 5};
    p.sampling.temperature = 0;
    p.max_tokens = 12;
    ASSERT_TRUE((*e)->add_request("g", p).is_ok());
    free_run = drain(**e).finished["g/0"].output;
  }
  ASSERT_EQ(free_run.size(), 12u);
  auto e = Engine::create(std::make_unique<FakeModelRunner>(mc), cfg);
  ASSERT_TRUE(e.is_ok());
  RequestParams p;
  p.prompt = {3, 1, 4, 1, 5};
  p.sampling.temperature = 0;
  p.max_tokens = 12;
  p.logits_processor = std::make_shared<Ban>(std::vector<int32_t>{free_run[0], free_run[3]});
  ASSERT_TRUE((*e)->add_request("g", p).is_ok());
  const std::vector<int32_t> out = drain(**e).finished["g/0"].output;
  ASSERT_EQ(out.size(), 12u);
  for (int32_t t : out) {
    EXPECT_NE(t, free_run[0]);
    EXPECT_NE(t, free_run[3]);
  }
  EXPECT_NE(out, free_run);
}

TEST(OutputProcessor, StopTokenAndLengthLimits) {
  FakeModelConfig mc;
  OutputProcessor op(mc.n_vocab, /*max_seq_len=*/10);
  Request r;
  r.id = "x";
  r.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  r.n_prompt = 8;
  r.max_tokens = 5;
  r.sampling.temperature = 0;
  op.init_sampler(r);
  std::vector<TokenEvent> ev;
  std::vector<float> lg(mc.n_vocab, 0.f);
  lg[11] = 1.f;
  EXPECT_EQ(op.sample(r, lg.data(), &ev), FinishReason::kNone);
  lg.assign(mc.n_vocab, 0.f);
  lg[12] = 1.f;
  EXPECT_EQ(op.sample(r, lg.data(), &ev), FinishReason::kLength);  // max_seq_len 10
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].token, 12);
  EXPECT_TRUE(std::isnan(ev[1].logprob));  // not requested
  Request s;
  s.id = "y";
  s.tokens = {1};
  s.n_prompt = 1;
  s.max_tokens = 5;
  s.stop_token_ids = {12};
  s.sampling.temperature = 0;
  op.init_sampler(s);
  EXPECT_EQ(op.sample(s, lg.data(), &ev), FinishReason::kStop);
}

}  // namespace
}  // namespace ember
