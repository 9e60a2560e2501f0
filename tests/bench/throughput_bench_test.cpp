// Offline throughput benchmark helper: token accounting, sequential vs
// concurrent modes, argument errors (tiny model: fast).
#include "bench/throughput_bench.h"

#include <gtest/gtest.h>

#include "bench/serve_bench.h"

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
    // The CPU time of each phase is part of the run's, and decode steps ran.
    EXPECT_GT(r->decode_tokens, 0);
    EXPECT_LE(r->decode_tokens, r->output_tokens);
    EXPECT_GT(r->decode_cpu_seconds, 0);
    EXPECT_GT(r->first_tokens_cpu_seconds, 0);
    EXPECT_LE(r->first_tokens_cpu_seconds, r->cpu_seconds);
    EXPECT_LE(r->decode_cpu_seconds, r->cpu_seconds);
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


// `ember bench throughput`'s decode-step breakdown (StepBreakdown) on the
// CPU backend: one entry per pure-decode step (their sequences are the
// decode tokens), its measured parts fit in the step, the model's time is the
// forward pass (no device time, no copies), and the CPU-side overhead is
// the rest of the step.
TEST(ThroughputBench, DecodeStepBreakdownAddsUp) {
  auto m = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2");
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  ThroughputOptions opt;
  opt.num_prompts = 4;
  opt.input_len = 12;
  opt.output_len = 9;
  auto r = run_throughput_bench(*m.value(), pool, opt);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const StepBreakdown& d = r->decode_steps;
  ASSERT_GT(d.steps, 0);
  EXPECT_NEAR(d.seqs * static_cast<double>(d.steps), static_cast<double>(r->decode_tokens), 1e-6);
  EXPECT_GT(d.step, 0);
  EXPECT_GT(d.forward, 0);
  for (double v : {d.schedule, d.inputs, d.sample}) EXPECT_GE(v, 0);
  // The measured parts fit in the step (other() is the unmeasured rest).
  EXPECT_LE(d.schedule + d.inputs + d.forward + d.sample, d.step + 1e-12);
  EXPECT_FALSE(d.device_measured);
  EXPECT_EQ(d.copies, 0);
  EXPECT_NEAR(d.model, d.forward, 1e-15);
  EXPECT_NEAR(d.cpu_overhead(), d.step - d.forward, 1e-15);
  EXPECT_LT(d.step * d.steps, r->seconds);
  const std::string line = d.describe();
  EXPECT_NE(line.find("CPU-side overhead"), std::string::npos) << line;
  EXPECT_NE(line.find("the forward pass on the host"), std::string::npos) << line;
  EXPECT_EQ(StepBreakdown{}.describe(), "no pure-decode steps");
}

// A Mixture-of-Experts model: the distinct experts a layer read per pure
// decode step (the engine's runner counts them): k with one sequence,
// between k and the batch's k-per-token bound with several, fewer with
// expert sharing on; a dense model reports none.
TEST(ThroughputBench, CountsTheExpertsOfDecodeSteps) {
  auto m = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen3moe");
  ASSERT_TRUE(m.is_ok());
  const int k = (*m)->config().max_n_expert_used(), E = (*m)->config().max_n_expert();
  ThreadPool pool(1);
  ThroughputOptions opt;
  opt.input_len = 6;
  opt.output_len = 6;
  opt.num_prompts = 1;
  auto one = run_throughput_bench(**m, pool, opt);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ(one->decode_experts_per_layer_step, k);
  EXPECT_NE(one->summary().find("distinct experts read per layer and decode step"), std::string::npos);
  opt.num_prompts = 8;
  auto eight = run_throughput_bench(**m, pool, opt);
  ASSERT_TRUE(eight.is_ok());
  EXPECT_GT(eight->decode_experts_per_layer_step, k);
  EXPECT_LE(eight->decode_experts_per_layer_step, E);
  ASSERT_TRUE((*m)->set_moe_routing(0, {.fraction = 0.3f, .keep = 1}).is_ok());
  auto shared = run_throughput_bench(**m, pool, opt);
  ASSERT_TRUE(shared.is_ok());
  EXPECT_LT(shared->decode_experts_per_layer_step, eight->decode_experts_per_layer_step);
  auto dense = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2");
  ASSERT_TRUE(dense.is_ok());
  auto d = run_throughput_bench(**dense, pool, opt);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->decode_experts_per_layer_step, 0);
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

// With speculative decoding the summary reports the drafts and the decode
// steps (one known token + drafts per sequence) are still counted; the
// output is the same as without.
TEST(ThroughputBench, SpeculativeCountsAndReport) {
  auto m = Model::load(EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2");
  ASSERT_TRUE(m.is_ok());
  ThreadPool pool(1);
  ThroughputOptions opt;
  for (int i = 0; i < 4; ++i) {
    RequestParams p;
    for (int rep = 0; rep < 5; ++rep)
      for (int t : {11, 12, 13 + i}) p.prompt.push_back(t);
    p.max_tokens = 12;
    p.sampling.temperature = 0.f;
    opt.requests.push_back(p);
  }
  opt.sequential = true;
  auto plain = run_throughput_bench(*m.value(), pool, opt);
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  opt.engine.spec.method = SpecMethod::kNgram;
  opt.engine.spec.num_speculative_tokens = 3;
  auto spec = run_throughput_bench(*m.value(), pool, opt);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  EXPECT_EQ(spec->output_tokens, plain->output_tokens);
  EXPECT_GT(spec->stats.spec.n_draft_tokens, 0);
  EXPECT_GT(spec->decode_tokens_per_s, 0);
  EXPECT_NE(spec->summary().find("speculative:"), std::string::npos) << spec->summary();
  EXPECT_EQ(plain->summary().find("speculative:"), std::string::npos);
}

TEST(ServeBenchSpec, ParsesEmberAndVllmCounters) {
  const std::string ember_page =
      "# HELP ember:spec_decode_num_drafts_total x\n# TYPE ember:spec_decode_num_drafts_total counter\n"
      "ember:spec_decode_num_drafts_total 10\nember:spec_decode_num_draft_tokens_total 40\n"
      "ember:spec_decode_num_accepted_tokens_total 25\n";
  ServeSpecCounters c = parse_spec_counters(ember_page);
  EXPECT_TRUE(c.available);
  EXPECT_EQ(c.num_drafts, 10);
  EXPECT_EQ(c.num_draft_tokens, 40);
  EXPECT_EQ(c.num_accepted_tokens, 25);
  EXPECT_DOUBLE_EQ(c.acceptance_rate(), 25.0 / 40);
  EXPECT_DOUBLE_EQ(c.mean_accepted_length(), 1 + 25.0 / 10);
  const std::string vllm_page =
      "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 3.0\n"
      "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 12.0\n"
      "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 6.0\n";
  c = parse_spec_counters(vllm_page);
  EXPECT_TRUE(c.available);
  EXPECT_EQ(c.num_draft_tokens, 12);
  EXPECT_EQ(c.num_accepted_tokens, 6);
  EXPECT_FALSE(parse_spec_counters("ember:num_requests_running 1\n").available);
}

}  // namespace
}  // namespace ember
