// The serving engine on tiny Mixture-of-Experts models (Qwen3-MoE; Qwen2-MoE
// with its gated shared expert; from tests/data/model, tools/gen_moe_fixtures.py):
// paged KV in small pages under a tight pool (preemption by recomputation
// and by swap), shared prompt prefixes (prefix-cache hits), n = 2
// (forked samples), seeded and greedy sampling with penalties and stop
// tokens, speculative decoding (n-gram lookup) and a constrained request
// (a logits processor admitting only some tokens, as structured output
// installs one). Every request's tokens and log-probabilities must equal
// its run alone on a roomy engine bit for bit: the experts a token uses,
// and their sum, do not depend on the batch.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/speculative_test_util.h"

namespace ember {
namespace {

const char* const kMoeModels[] = {EMBER_SOURCE_DIR "/tests/data/model/hf_qwen3moe",
                                  EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2moe_fused"};

// Admits tokens t with t % 3 != 0 (a constraint's mask; clones keep the state).
class NoMultiplesOfThree final : public LogitsProcessor {
 public:
  void process(const int32_t*, int64_t, int64_t, float* logits, int n_vocab) override {
    for (int t = 0; t < n_vocab; t += 3) logits[t] = -INFINITY;
  }
  std::unique_ptr<LogitsProcessor> clone() const override { return std::make_unique<NoMultiplesOfThree>(); }
};

TEST(EngineMoe, BatchedPagedPreemptedAndSpeculativeMatchAlone) {
  for (const char* path : kMoeModels) {
    SCOPED_TRACE(path);
    std::unique_ptr<Model> m = test::load_model(path);
    ASSERT_TRUE(m);
    ASSERT_TRUE(m->config().has_moe());
    ThreadPool pool(2);
    const int V = m->config().n_vocab;
    std::vector<RequestParams> reqs = test::workload(9, V, 5);
    reqs[4].logits_processor = std::make_unique<NoMultiplesOfThree>();
    EngineConfig roomy;
    roomy.block_size = 4;
    roomy.num_kv_blocks = 512;
    roomy.max_num_batched_tokens = 64;
    const test::RunResult want = test::run_each_alone(*m, pool, roomy, reqs);
    for (const auto& [k, f] : want.finished) {
      if (k.rfind("4/", 0) != 0) continue;
      for (int32_t t : f.output) EXPECT_NE(t % 3, 0) << "constrained request";
    }
    for (int variant = 0; variant < 3; ++variant) {
      EngineConfig ec = roomy;
      ec.num_kv_blocks = 40;  // tight: preemptions
      ec.max_num_batched_tokens = 16;
      ec.preempt_swap = variant == 1;
      if (variant == 2) {
        ec.num_kv_blocks = 512;
        ec.spec.method = SpecMethod::kNgram;
        ec.spec.num_speculative_tokens = 4;
      }
      SCOPED_TRACE(variant == 0 ? "recompute" : variant == 1 ? "swap" : "n-gram speculation");
      const test::RunResult got = test::run(*m, pool, ec, reqs);
      test::expect_same(want, got, "batched");
      EXPECT_GT(got.stats.prefix.hit_tokens, 0);
      EXPECT_EQ(got.finished.count("0/1") + got.finished.count("7/1"), 2u);  // n = 2 forks
      if (variant < 2) {
        EXPECT_GT(got.stats.n_preemptions, 0);
      } else {
        EXPECT_GT(got.stats.spec.n_accepted_tokens, 0);
      }
    }
  }
}

}  // namespace
}  // namespace ember
