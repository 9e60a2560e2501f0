// Forced-token jumps through the engine (fake runner, no model file): the
// tokens a logits processor forces (LogitsProcessor::forced_tokens) join the
// request unsampled, are computed as one chunk in the next step (the fake
// runner checks every KV row it reads), condition what is sampled next,
// are counted (FinishedRequest::n_forced, EngineStats::n_forced_tokens),
// respect max_tokens, are skipped when log-probabilities are wanted, and
// give the same output with n-gram speculation and in forked samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/engine.h"
#include "engine/fake_model_runner.h"
#include "engine/speculative_test_util.h"

namespace ember {
namespace {

// After every `every`-th sampled token (the first, then every `every`),
// forces the run `jump`; never masks.
class JumpAfterSample final : public LogitsProcessor {
 public:
  JumpAfterSample(std::vector<int32_t> jump, int every) : jump_(std::move(jump)), every_(every) {}
  void process(const int32_t*, int64_t, int64_t, float*, int) override {}
  void accept(int32_t) override {
    if (pending_ > 0) {
      --pending_;
    } else {
      pending_ = n_sampled_ % every_ == 0 ? -1 : 0;  // a sampled token: a jump may follow
      ++n_sampled_;
    }
  }
  void forced_tokens(std::vector<int32_t>* out) override {
    if (pending_ != -1) return;
    out->insert(out->end(), jump_.begin(), jump_.end());
    pending_ = static_cast<int>(jump_.size());
  }
  std::unique_ptr<LogitsProcessor> clone() const override { return std::make_unique<JumpAfterSample>(*this); }

 private:
  std::vector<int32_t> jump_;
  int every_ = 1;
  int n_sampled_ = 0;
  int pending_ = 0;            // forced tokens still to come (-1: the last token was sampled)
};

struct JumpRun {
  std::map<std::string, FinishedRequest> finished;
  std::map<std::string, std::vector<int>> forced_flags;  // per sample, one per streamed token
  std::vector<int64_t> step_tokens;                      // tokens in each step's forward pass
  EngineStats stats;
};

JumpRun drain(Engine& e) {
  JumpRun r;
  while (e.has_unfinished()) {
    auto out = e.step();
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out.is_ok()) break;
    r.step_tokens.push_back(out->n_batched_tokens);
    for (const TokenEvent& t : out->tokens) r.forced_flags[t.id + "/" + std::to_string(t.index)].push_back(t.forced);
    for (auto& f : out->finished) r.finished[f.id + "/" + std::to_string(f.index)] = f;
    EXPECT_TRUE(e.check_invariants().is_ok());
  }
  r.stats = e.stats();
  return r;
}

int32_t greedy(const FakeModelConfig& mc, const std::vector<int32_t>& toks) {
  std::vector<float> lg(mc.n_vocab);
  FakeModelRunner::reference_logits(mc, toks.data(), static_cast<int64_t>(toks.size()) - 1, lg.data());
  return static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
}

const std::vector<int32_t> kJump = {7, 8, 9};

RequestParams jump_request(int max_tokens, int every = 1) {
  RequestParams p;
  p.prompt = {3, 1, 4, 1, 5, 9, 2};
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  p.logits_processor = std::make_shared<JumpAfterSample>(kJump, every);
  return p;
}

JumpRun run(const EngineConfig& cfg, const FakeModelConfig& mc, const RequestParams& p,
           std::unique_ptr<Proposer> proposer = nullptr) {
  auto e = Engine::create(std::make_unique<FakeModelRunner>(mc), cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (proposer) (*e)->set_proposer(std::move(proposer));
  EXPECT_TRUE((*e)->add_request("j", p).is_ok());
  return drain(**e);
}

EngineConfig small_config() {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 128;
  return cfg;
}

TEST(ForcedTokens, AppendedUnsampledComputedAsAChunkAndCounted) {
  FakeModelConfig mc;
  const RequestParams p = jump_request(14);
  const JumpRun r = run(small_config(), mc, p);
  const FinishedRequest& f = r.finished.at("j/0");
  ASSERT_EQ(f.output.size(), 14u);
  // sampled, 7, 8, 9, sampled, 7, 8, 9, ...: each sampled token is the
  // greedy choice after every earlier token, forced ones included (so the
  // forced tokens went through the model).
  std::vector<int32_t> toks = p.prompt;
  std::vector<int> want_flags;
  for (size_t i = 0; i < f.output.size(); ++i) {
    if (i % 4 == 0) {
      EXPECT_EQ(f.output[i], greedy(mc, toks)) << i;
      want_flags.push_back(0);
    } else {
      EXPECT_EQ(f.output[i], kJump[i % 4 - 1]) << i;
      want_flags.push_back(1);
    }
    toks.push_back(f.output[i]);
  }
  EXPECT_EQ(r.forced_flags.at("j/0"), want_flags);
  EXPECT_EQ(f.n_forced, 10);  // 4 jumps, the last cut to 1 by max_tokens
  EXPECT_EQ(f.reason, FinishReason::kLength);
  EXPECT_EQ(r.stats.n_forced_tokens, 10);
  EXPECT_EQ(r.stats.n_generated_tokens, 14);
  // Prompt, then steps of 1 sampled + 3 forced tokens: 4 engine steps for 14 tokens.
  EXPECT_EQ(r.step_tokens, (std::vector<int64_t>{7, 4, 4, 4}));
}

TEST(ForcedTokens, NoJumpWhenLogprobsAreWanted) {
  FakeModelConfig mc;
  RequestParams p = jump_request(6);
  p.logprobs = true;
  const JumpRun r = run(small_config(), mc, p);
  const FinishedRequest& f = r.finished.at("j/0");
  EXPECT_EQ(f.n_forced, 0);
  ASSERT_EQ(f.logprobs.size(), 6u);
  for (float lp : f.logprobs) EXPECT_TRUE(std::isfinite(lp));
}

TEST(ForcedTokens, SameOutputWithNgramSpeculationAndSmallChunks) {
  FakeModelConfig mc;
  const RequestParams p = jump_request(40, 2);  // sampled runs between jumps: drafts get proposed
  const JumpRun want = run(small_config(), mc, p);
  EngineConfig spec = small_config();
  spec.spec.method = SpecMethod::kNgram;
  spec.spec.num_speculative_tokens = 4;
  const JumpRun got = run(spec, mc, p);
  EXPECT_EQ(got.finished.at("j/0").output, want.finished.at("j/0").output);
  EXPECT_EQ(got.finished.at("j/0").n_forced, want.finished.at("j/0").n_forced);
  // Drafts that replay the output (mostly right, so bursts run into jumps).
  const std::vector<int32_t> expected = want.finished.at("j/0").output;
  const JumpRun replay = run(spec, mc, p, std::make_unique<test::ReplayProposer>(
      [&](const Request&) { return expected; }, mc.n_vocab, 3));
  EXPECT_EQ(replay.finished.at("j/0").output, expected);
  EXPECT_EQ(replay.finished.at("j/0").n_forced, want.finished.at("j/0").n_forced);
  EXPECT_GT(replay.stats.spec.n_accepted_tokens, 0);
  // A budget smaller than a jump: the forced tokens arrive in two chunks.
  EngineConfig tight = small_config();
  tight.max_num_batched_tokens = 2;
  const JumpRun chunked = run(tight, mc, p);
  EXPECT_EQ(chunked.finished.at("j/0").output, want.finished.at("j/0").output);
}

TEST(ForcedTokens, EveryForkedSampleJumps) {
  FakeModelConfig mc;
  RequestParams p = jump_request(9);
  p.n = 3;
  p.sampling.temperature = 0.9f;
  p.sampling.seed = 11;
  const JumpRun r = run(small_config(), mc, p);
  ASSERT_EQ(r.finished.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const FinishedRequest& f = r.finished.at("j/" + std::to_string(k));
    ASSERT_EQ(f.output.size(), 9u) << k;
    EXPECT_EQ(f.n_forced, 6) << k;
    for (size_t i = 0; i < f.output.size(); ++i)
      if (i % 4 != 0) {
        EXPECT_EQ(f.output[i], kJump[i % 4 - 1]) << k << " " << i;
      }
  }
  EXPECT_EQ(r.stats.n_forced_tokens, 18);
}

}  // namespace
}  // namespace ember
