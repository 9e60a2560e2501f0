// Engine benchmarks (not run in CI: disabled tests). Run with
//   EMBER_BENCH_THREADS=2 build/test_engine --gtest_also_run_disabled_tests --gtest_filter='EngineBench.*'
// Environment: EMBER_BENCH_MODEL (default: the default model),
// EMBER_BENCH_N (16), EMBER_BENCH_IN (64), EMBER_BENCH_OUT (64),
// EMBER_BENCH_PREFIX (2000).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "bench/throughput_bench.h"

namespace ember {
namespace {

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : def;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<Model> bench_model() {
  const char* env = std::getenv("EMBER_BENCH_MODEL");
  const std::string path = env ? env : EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  auto m = Model::load(path);
  return m.is_ok() ? std::move(m.value()) : nullptr;
}

RequestParams request(std::mt19937& rng, const Model& m, int in, int out) {
  RequestParams p;
  for (int i = 0; i < in; ++i) p.prompt.push_back(4 + static_cast<int32_t>(rng() % (m.config().n_vocab - 4)));
  p.sampling.temperature = 0.f;
  p.max_tokens = out;
  return p;
}

TEST(EngineBench, DISABLED_ConcurrentVsSequential) {
  auto m = bench_model();
  if (!m) GTEST_SKIP() << "no model";
  ThreadPool pool(env_int("EMBER_BENCH_THREADS", 2));
  ThroughputOptions opt;
  opt.num_prompts = env_int("EMBER_BENCH_N", 16);
  opt.input_len = env_int("EMBER_BENCH_IN", 64);
  opt.output_len = env_int("EMBER_BENCH_OUT", 64);
  opt.engine.kv_cache_bytes = size_t{1} << 30;
  opt.engine.enable_prefix_caching = false;
  opt.sequential = true;
  auto seq = run_throughput_bench(*m, pool, opt);
  ASSERT_TRUE(seq.is_ok()) << seq.status().message();
  opt.sequential = false;
  auto con = run_throughput_bench(*m, pool, opt);
  ASSERT_TRUE(con.is_ok()) << con.status().message();
  fmt::print("threads={} requests={} input={} output={}\n", pool.size(), opt.num_prompts, opt.input_len,
             opt.output_len);
  fmt::print("sequential: {}\n", seq->summary());
  fmt::print("concurrent: {}\n", con->summary());
  fmt::print("speedup: {:.2f}x output tokens/s, {:.2f}x decode-step tokens/s\n",
             con->output_tokens_per_s / seq->output_tokens_per_s, con->decode_tokens_per_s / seq->decode_tokens_per_s);
}

TEST(EngineBench, DISABLED_PrefixCacheTtft) {
  auto m = bench_model();
  if (!m) GTEST_SKIP() << "no model";
  ThreadPool pool(env_int("EMBER_BENCH_THREADS", 2));
  const int prefix_len = env_int("EMBER_BENCH_PREFIX", 2000);
  std::mt19937 rng(2);
  RequestParams a = request(rng, *m, prefix_len, 1);
  RequestParams b = a;
  a.prompt.push_back(100);
  b.prompt.push_back(200);
  EngineConfig cfg;
  cfg.kv_cache_bytes = size_t{1} << 30;
  cfg.max_num_batched_tokens = 512;
  auto e = Engine::create(*m, pool, cfg);
  ASSERT_TRUE(e.is_ok());
  auto ttft = [&](const std::string& id, const RequestParams& p) {
    const double t0 = now_s();
    EXPECT_TRUE(e.value()->add_request(id, p).is_ok());
    double first = 0;
    while (e.value()->has_unfinished()) {
      auto out = e.value()->step();
      if (!out.is_ok()) break;
      if (first == 0 && !out->tokens.empty()) first = now_s() - t0;
    }
    return first;
  };
  const double miss = ttft("miss", a);
  const double hit = ttft("hit", b);
  const EngineStats st = e.value()->stats();
  fmt::print("prefix {} tokens: TTFT miss {:.3f} s, hit {:.4f} s ({:.1f}x), hit tokens {}\n", prefix_len, miss, hit,
             miss / hit, st.prefix.hit_tokens);
}

}  // namespace
}  // namespace ember
