// Offline throughput benchmark helper: token accounting, sequential vs
// concurrent modes, argument errors (tiny model: fast).
#include "bench/throughput_bench.h"

#include <gtest/gtest.h>

namespace ember {
namespace {

TEST(ThroughputBench, CountsAndModes) {
  auto m = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2");
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  ThroughputOptions opt;
  opt.num_prompts = 6;
  opt.input_len = 20;
  opt.output_len = 7;
  opt.engine.max_num_batched_tokens = 32;
  for (bool sequential : {true, false}) {
    opt.sequential = sequential;
    auto r = run_throughput_bench(*m.value(), pool, opt);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->prompt_tokens, 6 * 20);
    EXPECT_EQ(r->output_tokens, 6 * 7);
    EXPECT_EQ(r->stats.n_generated_tokens, 6 * 7);
    EXPECT_GT(r->tokens_per_s, 0);
    EXPECT_EQ(r->stats.blocks_used, 0);
    EXPECT_FALSE(r->summary().empty());
    if (sequential) {
      EXPECT_EQ(r->stats.n_computed_tokens, 6 * (20 + 7 - 1));  // no prefix sharing (random prompts)
    }
  }
  opt.input_len = 0;
  EXPECT_FALSE(run_throughput_bench(*m.value(), pool, opt).is_ok());
  opt.input_len = 120;  // + 7 > max_model_len 128 of the fixture
  opt.output_len = 9;
  EXPECT_FALSE(run_throughput_bench(*m.value(), pool, opt).is_ok());
}


// Random lengths stay within [L(1-R), L(1+R)] and vary; explicit requests
// are run as given.
TEST(ThroughputBench, RandomLengthsAndGivenRequests) {
  auto m = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2");
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  ThroughputOptions opt;
  opt.num_prompts = 12;
  opt.input_len = 20;
  opt.output_len = 10;
  opt.range_ratio = 0.5;
  opt.seed = 7;
  auto r = run_throughput_bench(*m.value(), pool, opt);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GE(r->prompt_tokens, 12 * 10);
  EXPECT_LE(r->prompt_tokens, 12 * 30);
  EXPECT_NE(r->prompt_tokens, 12 * 20);  // lengths do vary (seed 7: the sum differs from fixed lengths)
  EXPECT_GE(r->output_tokens, 12 * 5);
  EXPECT_LE(r->output_tokens, 12 * 15);
  EXPECT_GT(r->first_tokens_seconds, 0);
  EXPECT_LE(r->first_tokens_seconds, r->seconds);
  ThroughputOptions given;
  for (int i = 0; i < 3; ++i) {
    RequestParams p;
    p.prompt = {5, 6, 7 + i};
    p.max_tokens = 2 + i;
    p.sampling.temperature = 0.f;
    given.requests.push_back(p);
  }
  auto g = run_throughput_bench(*m.value(), pool, given);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g->num_requests, 3);
  EXPECT_EQ(g->prompt_tokens, 9);
  EXPECT_EQ(g->output_tokens, 2 + 3 + 4);
  opt.range_ratio = 1.0;
  EXPECT_FALSE(run_throughput_bench(*m.value(), pool, opt).is_ok());
}

}  // namespace
}  // namespace ember
