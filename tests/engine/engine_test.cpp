// Serving engine: batch invariance (concurrent == alone == the plain
// single-sequence generator), chunked prefill, memory pressure with
// preemption, prefix caching, abort, admission errors, and a randomized
// stress test checking block accounting every step.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <mutex>
#include <thread>
#include <limits>

#include "engine/generator.h"
#include "engine/test_sampling.h"

namespace ember {
namespace {

const char* kTinyGemma = EMBER_SOURCE_DIR "/tests/data/model/hf_gemma3";
const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";

std::unique_ptr<Model> load(const char* path) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? std::move(m.value()) : nullptr;
}

using test::greedy;
using test::seeded;

std::vector<int32_t> random_prompt(std::mt19937& rng, int len, int vocab) {
  std::vector<int32_t> p(len);
  for (auto& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

struct Drained {
  std::map<std::string, FinishedRequest> finished;
  std::map<std::string, std::vector<int32_t>> streamed;
  EngineStats stats;
  int max_seqs_in_step = 0;
};

// Runs the engine until idle, checking invariants after every step.
Drained drain(Engine& e) {
  Drained r;
  for (int guard = 0; e.has_unfinished() && guard < 100000; ++guard) {
    auto out = e.step();
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out.is_ok()) break;
    for (auto& t : out->tokens) r.streamed[t.id].push_back(t.token);
    for (auto& f : out->finished) r.finished[f.id] = f;
    r.max_seqs_in_step = std::max(r.max_seqs_in_step, out->n_seqs);
    Status st = e.check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) break;
    // KV waste: at most one partially filled block per running sequence and group.
    const EngineStats es = e.stats();
    EXPECT_LE(es.kv_slots_allocated - es.kv_slots_filled,
              static_cast<int64_t>(es.n_running) * e.n_kv_groups() * (e.config().block_size - 1));
  }
  r.stats = e.stats();
  // Everything ended: no block referenced, all blocks free.
  EXPECT_EQ(r.stats.blocks_used, 0);
  EXPECT_EQ(r.stats.blocks_free, r.stats.blocks_total);
  EXPECT_EQ(r.stats.n_running + r.stats.n_waiting, 0);
  return r;
}

std::unique_ptr<Engine> make_engine(const Model& m, ThreadPool& pool, EngineConfig cfg) {
  auto e = Engine::create(m, pool, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e.value()) : nullptr;
}

// Output tokens and their log-probabilities (the latter catch any bit of
// difference in the logits, even where the sampled token is the same).
struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  bool operator==(const Out& o) const { return tokens == o.tokens && logprobs == o.logprobs; }
};
Out out_of(const FinishedRequest& f) { return Out{f.output, f.logprobs}; }
std::ostream& operator<<(std::ostream& os, const Out& o) {
  for (size_t i = 0; i < o.tokens.size(); ++i)
    os << o.tokens[i] << "(" << (i < o.logprobs.size() ? o.logprobs[i] : 0.f) << ") ";
  return os;
}

Out run_alone(const Model& m, ThreadPool& pool, const RequestParams& p, EngineConfig cfg = {}) {
  auto e = make_engine(m, pool, cfg);
  EXPECT_TRUE(e->add_request("solo", p).is_ok());
  Drained r = drain(*e);
  EXPECT_EQ(r.finished["solo"].logprobs.size(), p.logprobs ? r.finished["solo"].output.size() : 0u);
  return out_of(r.finished["solo"]);
}

TEST(Engine, GreedyMatchesGenerator) {
  auto m = load(kTinyGemma);
  ThreadPool pool(1);
  std::mt19937 rng(1);
  for (int len : {1, 7, 40}) {
    RequestParams p;
    p.prompt = random_prompt(rng, len, m->config().n_vocab);
    p.sampling = greedy();
    p.max_tokens = 12;
    std::vector<int32_t> got = run_alone(*m, pool, p).tokens;
    Generator g(*m, pool, 128);
    Sampler s(greedy());
    std::vector<int32_t> want;
    ASSERT_TRUE(g.generate(p.prompt, 12, s, [&](int32_t t) { want.push_back(t); return true; }, nullptr).is_ok());
    EXPECT_EQ(got, want) << "prompt length " << len;
  }
}

// N prompts at once (chunked prefill, mixed decode) vs each alone.
void batch_invariance(const Model& m, int n_req, int max_tokens, int max_prompt, int budget, bool sampled,
                      int n_threads) {
  ThreadPool pool(n_threads);
  std::mt19937 rng(7);
  std::vector<RequestParams> reqs(n_req);
  for (int i = 0; i < n_req; ++i) {
    reqs[i].prompt = random_prompt(rng, 1 + static_cast<int>(rng() % max_prompt), m.config().n_vocab);
    reqs[i].sampling = sampled ? seeded(100 + i) : greedy();
    reqs[i].max_tokens = 1 + static_cast<int>(rng() % max_tokens);
    reqs[i].logprobs = true;
  }
  EngineConfig cfg;
  cfg.max_num_batched_tokens = budget;
  auto e = make_engine(m, pool, cfg);
  for (int i = 0; i < n_req; ++i) ASSERT_TRUE(e->add_request(std::to_string(i), reqs[i]).is_ok());
  Drained all = drain(*e);
  EXPECT_GT(all.max_seqs_in_step, 1);
  for (int i = 0; i < n_req; ++i) {
    const std::string id = std::to_string(i);
    EngineConfig solo_cfg;
    solo_cfg.max_num_batched_tokens = 512;  // whole prompt in one step
    Out alone = run_alone(m, pool, reqs[i], solo_cfg);
    ASSERT_EQ(all.finished.count(id), 1u);
    EXPECT_EQ(out_of(all.finished[id]), alone) << "request " << i;
    EXPECT_EQ(all.streamed[id], alone.tokens);
    EXPECT_EQ(all.finished[id].reason, FinishReason::kLength);
  }
}

TEST(Engine, BatchInvarianceGreedy32) {
  auto m = load(kTinyGemma);
  batch_invariance(*m, 32, 10, 60, 64, false, 1);
  auto q = load(kTinyQwen);
  batch_invariance(*q, 32, 10, 60, 40, false, 1);
  batch_invariance(*q, 8, 6, 60, 40, false, 2);  // parallel attention / matmul paths
}

TEST(Engine, BatchInvarianceSeeded) {
  auto m = load(kTinyQwen);
  batch_invariance(*m, 12, 10, 50, 24, true, 1);
}

// Bans every token id divisible by 5 and records the threads process() ran on.
class BanFifths final : public LogitsProcessor {
 public:
  explicit BanFifths(std::shared_ptr<std::pair<std::mutex, std::set<std::thread::id>>> seen) : seen_(std::move(seen)) {}
  void process(const int32_t*, int64_t, int64_t, float* logits, int n_vocab) override {
    for (int i = 0; i < n_vocab; i += 5) logits[i] = -std::numeric_limits<float>::infinity();
    if (!seen_) return;
    std::lock_guard<std::mutex> lk(seen_->first);
    seen_->second.insert(std::this_thread::get_id());
  }
  std::unique_ptr<LogitsProcessor> clone() const override { return std::make_unique<BanFifths>(seen_); }

 private:
  std::shared_ptr<std::pair<std::mutex, std::set<std::thread::id>>> seen_;
};

// The sampling rows of a step are chosen on the pool's threads at once
// (Engine::choose_rows): the logits processors ran on more than one thread,
// and every request (seeded, logprobs, top_logprobs, a processor, n = 3
// forks, prompt log-probabilities, greedy) gets what it gets alone on one
// thread.
TEST(Engine, SamplingRowsOnThePoolMatchAlone) {
  auto m = load(kTinyQwen);
  ThreadPool pool(2), one(1);
  auto seen = std::make_shared<std::pair<std::mutex, std::set<std::thread::id>>>();
  std::mt19937 rng(31);
  std::vector<RequestParams> reqs(10);
  for (int i = 0; i < 10; ++i) {
    RequestParams& r = reqs[i];
    r.prompt = random_prompt(rng, 1 + static_cast<int>(rng() % 30), m->config().n_vocab);
    r.sampling = i == 9 ? greedy() : seeded(300 + i);
    r.max_tokens = 4 + i % 5;
    r.logprobs = i % 2 == 0;
    if (i == 2) r.top_logprobs = 3;
    if (i % 3 == 0) r.logits_processor = std::make_shared<BanFifths>(seen);
    if (i == 4) r.n = 3;
    if (i == 6) r.prompt_logprobs = 0;
  }
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 32;
  auto e = make_engine(*m, pool, cfg);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(e->add_request(std::to_string(i), reqs[i]).is_ok());
  std::map<std::string, std::vector<int32_t>> got;
  std::map<std::string, std::vector<float>> got_lp;
  for (int guard = 0; e->has_unfinished() && guard < 1000; ++guard) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    for (const TokenEvent& t : out->tokens) {
      const std::string key = t.id + "/" + std::to_string(t.index);
      got[key].push_back(t.token);
      got_lp[key].push_back(t.logprob);
      if (t.id == "2") {
        EXPECT_EQ(t.top.size(), 3u);
      }
    }
  }
  EXPECT_GT(seen->second.size(), 1u) << "processors never ran off the engine thread";
  for (int i = 0; i < 10; ++i) {
    for (int k = 0; k < reqs[i].n; ++k) {
      RequestParams solo = reqs[i];
      solo.n = 1;
      solo.sampling.seed += static_cast<uint64_t>(k);  // sample k's seed
      Out alone = run_alone(*m, one, solo);
      const std::string key = std::to_string(i) + "/" + std::to_string(k);
      EXPECT_EQ(got[key], alone.tokens) << key;
      for (int32_t t : got[key])
        if (reqs[i].logits_processor) {
          EXPECT_NE(t % 5, 0) << key;
        }
      if (reqs[i].logprobs) {
        ASSERT_EQ(got_lp[key].size(), alone.logprobs.size()) << key;
        for (size_t j = 0; j < alone.logprobs.size(); ++j) EXPECT_EQ(got_lp[key][j], alone.logprobs[j]) << key;
      }
    }
  }
}

TEST(Engine, DefaultModelBatchInvariance) {
  const std::string path = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not present";
  auto m = load(path.c_str());
  batch_invariance(*m, 3, 3, 20, 16, false, 2);
}

// Chunked prefill: while a long prompt arrives, a running decode still gets a
// token every step and no step exceeds the token budget.
TEST(Engine, ChunkedPrefillKeepsDecodesFlowing) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(19);
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 16;
  auto e = make_engine(*m, pool, cfg);
  RequestParams a;
  a.prompt = random_prompt(rng, 5, m->config().n_vocab);
  a.sampling = greedy();
  a.max_tokens = 20;
  a.logprobs = true;
  ASSERT_TRUE(e->add_request("a", a).is_ok());
  ASSERT_TRUE(e->step().is_ok());  // a's prompt + first token
  RequestParams b = a;
  b.prompt = random_prompt(rng, 100, m->config().n_vocab);
  b.max_tokens = 3;
  ASSERT_TRUE(e->add_request("b", b).is_ok());
  std::vector<int32_t> a_tokens;
  Out a_out, b_out;
  int steps_with_b_prefill = 0;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    EXPECT_LE(out->n_batched_tokens, 16);
    bool a_got = false, b_got = false;
    for (auto& t : out->tokens) (t.id == "a" ? a_got : b_got) = true;
    if (!b_got && out->n_batched_tokens > 1 && out->n_seqs == 2) {
      ++steps_with_b_prefill;
      EXPECT_TRUE(a_got);  // the decode was not stalled by b's prefill chunk
    }
    for (auto& f : out->finished) (f.id == "a" ? a_out : b_out) = out_of(f);
  }
  EXPECT_GE(steps_with_b_prefill, 100 / 16 - 1);
  EXPECT_EQ(a_out, run_alone(*m, pool, a));
  EXPECT_EQ(b_out, run_alone(*m, pool, b));
}

TEST(Engine, PrefixCacheComputesOnlySuffix) {
  auto m = load(kTinyGemma);
  ThreadPool pool(1);
  std::mt19937 rng(5);
  const std::vector<int32_t> prefix = random_prompt(rng, 200, m->config().n_vocab);
  RequestParams a, b;
  a.prompt = prefix;
  b.prompt = prefix;
  for (int i = 0; i < 9; ++i) a.prompt.push_back(5 + i);
  for (int i = 0; i < 13; ++i) b.prompt.push_back(20 + i);
  a.sampling = b.sampling = greedy();
  a.max_tokens = b.max_tokens = 8;
  a.logprobs = b.logprobs = true;

  EngineConfig cfg;  // block size 16: 12 full prefix blocks = 192 tokens
  auto e = make_engine(*m, pool, cfg);
  ASSERT_TRUE(e->add_request("a", a).is_ok());
  Drained ra = drain(*e);
  const int64_t computed_a = ra.stats.n_computed_tokens;
  EXPECT_EQ(computed_a, static_cast<int64_t>(a.prompt.size()) + 8 - 1);
  ASSERT_TRUE(e->add_request("b", b).is_ok());
  Drained rb = drain(*e);
  const int64_t computed_b = rb.stats.n_computed_tokens - computed_a;
  EXPECT_EQ(rb.finished["b"].n_cached_prompt, 192);
  EXPECT_EQ(computed_b, static_cast<int64_t>(b.prompt.size()) - 192 + 8 - 1);
  EXPECT_EQ(rb.stats.prefix.hits, 1);
  EXPECT_EQ(rb.stats.prefix.hit_tokens, 192);
  EXPECT_EQ(rb.stats.prefix.queries, 2);
  EXPECT_EQ(rb.stats.prefix.query_tokens, static_cast<int64_t>(a.prompt.size() + b.prompt.size()) - 2);
  EngineConfig nocache;
  nocache.enable_prefix_caching = false;
  EXPECT_EQ(out_of(rb.finished["b"]), run_alone(*m, pool, b, nocache));
  EXPECT_EQ(out_of(ra.finished["a"]), run_alone(*m, pool, a, nocache));

  // Identical prompt again: all but the last partial block is reused.
  ASSERT_TRUE(e->add_request("a2", a).is_ok());
  Drained ra2 = drain(*e);
  EXPECT_EQ(out_of(ra2.finished["a2"]), out_of(ra.finished["a"]));
  EXPECT_EQ(ra2.finished["a2"].n_cached_prompt, 208);
}

TEST(Engine, PrefixCacheEvictsLruUnderPressure) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(9);
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 24;
  auto e = make_engine(*m, pool, cfg);
  std::vector<RequestParams> reqs;
  for (int i = 0; i < 10; ++i) {
    RequestParams p;
    p.prompt = random_prompt(rng, 30 + i, m->config().n_vocab);
    p.sampling = greedy();
    p.max_tokens = 5;
    p.logprobs = true;
    reqs.push_back(p);
    ASSERT_TRUE(e->add_request(std::to_string(i), p).is_ok());
  }
  Drained r = drain(*e);
  EXPECT_GT(r.stats.prefix.evictions, 0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out_of(r.finished[std::to_string(i)]), run_alone(*m, pool, reqs[i], cfg));
}

TEST(Engine, AbortFreesBlocks) {
  auto m = load(kTinyGemma);
  ThreadPool pool(1);
  std::mt19937 rng(11);
  auto e = make_engine(*m, pool, EngineConfig{});
  for (int i = 0; i < 4; ++i) {
    RequestParams p;
    p.prompt = random_prompt(rng, 40, m->config().n_vocab);
    p.sampling = greedy();
    p.max_tokens = 50;
    ASSERT_TRUE(e->add_request(std::to_string(i), p).is_ok());
  }
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(e->step().is_ok());
  EXPECT_GT(e->stats().blocks_used, 0);
  EXPECT_TRUE(e->abort("1"));
  EXPECT_TRUE(e->abort("3"));
  EXPECT_FALSE(e->abort("3"));
  EXPECT_FALSE(e->abort("nope"));
  ASSERT_TRUE(e->check_invariants().is_ok());
  auto out = e->step();
  ASSERT_TRUE(out.is_ok());
  int aborted = 0;
  for (auto& f : out->finished) aborted += f.reason == FinishReason::kAbort;
  EXPECT_EQ(aborted, 2);
  EXPECT_TRUE(e->abort("0"));
  EXPECT_TRUE(e->abort("2"));
  EXPECT_TRUE(e->check_invariants().is_ok());
  Drained r = drain(*e);
  EXPECT_EQ(r.finished.size(), 2u);
}

TEST(Engine, StopTokenAndAdmissionErrors) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(13);
  RequestParams p;
  p.prompt = random_prompt(rng, 10, m->config().n_vocab);
  p.sampling = greedy();
  p.max_tokens = 10;
  const std::vector<int32_t> full = run_alone(*m, pool, p).tokens;
  ASSERT_EQ(full.size(), 10u);
  p.stop_token_ids = {full[3]};
  EngineConfig cfg;
  cfg.num_kv_blocks = 4;  // 64 tokens
  auto e = make_engine(*m, pool, cfg);
  ASSERT_TRUE(e->add_request("s", p).is_ok());
  EXPECT_FALSE(e->add_request("s", p).is_ok());  // duplicate id
  Drained r = drain(*e);
  EXPECT_EQ(r.finished["s"].reason, FinishReason::kStop);
  const auto stop_at = std::find(full.begin(), full.end(), full[3]) - full.begin();
  EXPECT_EQ(r.finished["s"].output, std::vector<int32_t>(full.begin(), full.begin() + stop_at + 1));

  RequestParams bad = p;
  bad.prompt.assign(64, 1);  // never fits 4 blocks x 16 with room to generate
  Status st = e->add_request("big", bad);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("never fit"), std::string::npos) << st.message();
  bad.prompt = {1, -1};
  EXPECT_FALSE(e->add_request("neg", bad).is_ok());
  bad.prompt = {};
  EXPECT_FALSE(e->add_request("empty", bad).is_ok());
  bad.prompt = {1};
  bad.max_tokens = 0;
  EXPECT_FALSE(e->add_request("zero", bad).is_ok());
  bad.max_tokens = 1;
  bad.sampling.top_p = -1.f;
  EXPECT_FALSE(e->add_request("topp", bad).is_ok());

  // A sequence that reaches the cache size finishes with "length".
  RequestParams longp = p;
  longp.stop_token_ids.clear();
  longp.max_tokens = 1000;
  ASSERT_TRUE(e->add_request("long", longp).is_ok());
  Drained rl = drain(*e);
  EXPECT_EQ(rl.finished["long"].reason, FinishReason::kLength);
  EXPECT_EQ(rl.finished["long"].output.size() + p.prompt.size(), 64u);
  EngineConfig badcfg;
  badcfg.max_num_batched_tokens = 0;
  EXPECT_FALSE(Engine::create(*m, pool, badcfg).is_ok());
  badcfg = EngineConfig{};
  badcfg.kv_cache_bytes = 10;
  EXPECT_FALSE(Engine::create(*m, pool, badcfg).is_ok());
}

TEST(Engine, PriorityRunsFirst) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(17);
  EngineConfig cfg;
  cfg.max_num_seqs = 1;
  auto e = make_engine(*m, pool, cfg);
  RequestParams p;
  p.prompt = random_prompt(rng, 5, m->config().n_vocab);
  p.sampling = greedy();
  p.max_tokens = 3;
  ASSERT_TRUE(e->add_request("low", p).is_ok());
  p.priority = -1;
  ASSERT_TRUE(e->add_request("high", p).is_ok());
  std::vector<std::string> order;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    for (auto& f : out->finished) order.push_back(f.id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"high", "low"}));
}

// Sliding-window layers release blocks that left the window: bounded pages,
// identical output to keeping everything, and prefix hits still work.
TEST(Engine, SlidingWindowReleasesBlocks) {
  auto m = load(kTinyGemma);  // layers: sliding (16), global, sliding (16)
  ThreadPool pool(1);
  std::mt19937 rng(23);
  RequestParams p;
  p.prompt = random_prompt(rng, 100, m->config().n_vocab);
  p.sampling = seeded(5);
  p.max_tokens = 30;
  p.logprobs = true;
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 16;
  auto e = make_engine(*m, pool, cfg);
  ASSERT_EQ(e->n_kv_groups(), 3);
  ASSERT_TRUE(e->add_request("long", p).is_ok());
  int64_t computed = 0;
  Out got;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    computed += out->n_batched_tokens;
    const EngineStats st = e->stats();
    if (st.n_running == 1) {
      // Global group: every block; each sliding group: the window (16) + 2 blocks.
      const int64_t global = (computed + 3) / 4;
      EXPECT_LE(st.blocks_used, global + 2 * (16 / 4 + 2)) << "after " << computed << " tokens";
    }
    ASSERT_TRUE(e->check_invariants().is_ok());
    for (auto& f : out->finished) got = out_of(f);
  }
  EXPECT_EQ(got.tokens.size(), 30u);
  EngineConfig keep = cfg;
  keep.sliding_window_release = false;
  EXPECT_EQ(got, run_alone(*m, pool, p, keep));

  // A request sharing the first 96 tokens reuses them although the sliding
  // groups released their early pages (only the window's pages are needed).
  RequestParams q = p;
  q.prompt.resize(96);
  q.prompt.push_back(3);
  ASSERT_TRUE(e->add_request("again", q).is_ok());
  Drained r = drain(*e);
  EXPECT_EQ(r.finished["again"].n_cached_prompt, 96);
  EXPECT_EQ(out_of(r.finished["again"]), run_alone(*m, pool, q, keep));
}

// n > 1: samples share the prompt's blocks (computed once), copy the shared
// partial block on write, and each equals a single request with seed + k.
TEST(Engine, ParallelSamplesShareThePromptBlocks) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(21);
  RequestParams p;
  p.prompt = random_prompt(rng, 37, m->config().n_vocab);  // 2 full blocks + 5 tokens
  p.sampling = seeded(77);
  p.max_tokens = 10;
  p.logprobs = true;
  p.n = 4;
  auto e = make_engine(*m, pool, EngineConfig{});
  ASSERT_TRUE(e->add_request("par", p).is_ok());
  auto first = e->step();
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->tokens.size(), 4u);  // every sample's first token from the one prompt pass
  EXPECT_EQ(e->stats().blocks_used, 3);  // prompt blocks shared by all four
  ASSERT_TRUE(e->check_invariants().is_ok());
  std::map<int, std::vector<int32_t>> streamed;
  for (auto& t : first->tokens) streamed[t.index].push_back(t.token);
  std::map<int, FinishedRequest> done;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    for (auto& t : out->tokens) streamed[t.index].push_back(t.token);
    for (auto& f : out->finished) done[f.index] = f;
    ASSERT_TRUE(e->check_invariants().is_ok());
  }
  const EngineStats st = e->stats();
  EXPECT_EQ(st.n_computed_tokens, 37 + 4 * (10 - 1));
  EXPECT_EQ(st.n_cow_copies, 3);
  EXPECT_EQ(st.blocks_used, 0);
  ASSERT_EQ(done.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (int k = 0; k < 4; ++k) {
    RequestParams one = p;
    one.n = 1;
    one.sampling.seed = 77 + k;
    EXPECT_EQ(out_of(done[k]), run_alone(*m, pool, one)) << "sample " << k;
    EXPECT_EQ(streamed[k], done[k].output);
    distinct.insert(done[k].output);
  }
  EXPECT_GT(distinct.size(), 1u);

  // Abort of an n > 1 request ends every sample.
  ASSERT_TRUE(e->add_request("par2", p).is_ok());
  ASSERT_TRUE(e->step().is_ok());
  EXPECT_TRUE(e->abort("par2"));
  auto out = e->step();
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(out->finished.size(), 4u);
  EXPECT_EQ(e->stats().blocks_used, 0);
  EXPECT_TRUE(e->check_invariants().is_ok());
}

// Random arrivals, lengths, priorities and aborts under a tight pool; block
// invariants are checked after every step and every finished output is
// compared with an unconstrained solo run.
TEST(Engine, RandomizedStress) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(2024);
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 40;
  cfg.max_num_batched_tokens = 24;
  cfg.max_num_seqs = 6;
  auto e = make_engine(*m, pool, cfg);
  std::map<std::string, RequestParams> reqs;
  std::map<std::string, FinishedRequest> done;
  int next = 0;
  for (int step = 0; step < 400 || e->has_unfinished(); ++step) {
    ASSERT_LT(step, 20000);
    if (step < 400 && rng() % 3 == 0) {
      RequestParams p;
      // Some requests share prefixes to exercise the cache.
      p.prompt = random_prompt(rng, 1 + static_cast<int>(rng() % 60), m->config().n_vocab);
      if (rng() % 2 && !reqs.empty()) {
        const auto& other = std::next(reqs.begin(), static_cast<long>(rng() % reqs.size()))->second.prompt;
        p.prompt.insert(p.prompt.begin(), other.begin(), other.begin() + static_cast<long>(other.size() / 2));
        if (p.prompt.size() > 100) p.prompt.resize(100);
      }
      p.sampling = rng() % 2 ? greedy() : seeded(rng());
      p.max_tokens = 1 + static_cast<int>(rng() % 30);
      p.priority = static_cast<int>(rng() % 3);
      p.logprobs = true;
      p.n = 1 + static_cast<int>(rng() % 3);
      const std::string id = "r" + std::to_string(next++);
      ASSERT_TRUE(e->add_request(id, p).is_ok());
      reqs[id] = p;
    }
    if (step < 400 && rng() % 17 == 0 && next > 0) e->abort("r" + std::to_string(rng() % next));
    auto out = e->step();
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    for (auto& f : out->finished) done[f.id + "/" + std::to_string(f.index)] = f;
    Status st = e->check_invariants();
    ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.message();
    ASSERT_LE(e->stats().n_running, cfg.max_num_seqs) << "step " << step;
  }
  EngineStats st = e->stats();
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_EQ(st.blocks_free, st.blocks_total);
  size_t n_samples = 0;
  for (auto& [id, p] : reqs) {
    n_samples += static_cast<size_t>(p.n);
    int finished = 0, aborted = 0;
    for (int k = 0; k < p.n; ++k) {
      auto it = done.find(id + "/" + std::to_string(k));
      finished += it != done.end();
      aborted += it != done.end() && it->second.reason == FinishReason::kAbort;
    }
    // Every sample finishes, except samples never forked because the request
    // was aborted during its prompt.
    EXPECT_TRUE(finished == p.n || (aborted == finished && finished >= 1)) << id;
  }
  EXPECT_LE(done.size(), n_samples);
  int checked = 0;
  for (auto& [key, f] : done) {
    if (f.reason == FinishReason::kAbort) continue;
    if (++checked > 30) break;  // keep the test fast
    RequestParams one = reqs[f.id];
    one.n = 1;
    one.sampling.seed += static_cast<uint64_t>(f.index);
    EXPECT_EQ(out_of(f), run_alone(*m, pool, one)) << key;
  }
  EXPECT_GT(st.n_cow_copies, 0);
  EXPECT_GT(st.n_preemptions, 0);
  EXPECT_GT(st.prefix.hits, 0);
}


// top_logprobs: the k most likely tokens of each step's raw distribution,
// checked against a log-softmax computed here from the plain generator's
// logits (double precision, full sort).
TEST(Engine, TopLogprobsMatchForwardLogits) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(11);
  const int V = m->config().n_vocab;
  RequestParams p;
  p.prompt = random_prompt(rng, 9, V);
  p.sampling = greedy();
  p.max_tokens = 3;
  p.logprobs = true;
  p.top_logprobs = 5;
  auto e = make_engine(*m, pool, {});
  ASSERT_TRUE(e->add_request("r", p).is_ok());
  std::vector<TokenEvent> events;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    for (auto& t : out->tokens) events.push_back(t);
  }
  ASSERT_EQ(events.size(), 3u);
  Generator g(*m, pool, 64);
  std::vector<float> logits(V);
  ASSERT_TRUE(g.prefill(p.prompt, 0, logits.data()).is_ok());
  for (size_t i = 0; i < events.size(); ++i) {
    double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
    const double lse = mx + std::log(sum);
    std::vector<int32_t> order(V);
    for (int j = 0; j < V; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    const TokenEvent& ev = events[i];
    ASSERT_EQ(ev.top.size(), 5u);
    EXPECT_EQ(ev.token, order[0]);
    EXPECT_FLOAT_EQ(ev.logprob, ev.top[0].second);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(ev.top[k].first, order[k]) << "step " << i << " rank " << k;
      EXPECT_NEAR(ev.top[k].second, logits[order[k]] - lse, 1e-5) << "step " << i << " rank " << k;
    }
    ASSERT_TRUE(g.decode_one(ev.token, static_cast<int64_t>(p.prompt.size() + i), logits.data()).is_ok());
  }
  RequestParams bad = p;
  bad.top_logprobs = 21;
  EXPECT_FALSE(e->add_request("bad", bad).is_ok());
}


// stop_sample ends one of n samples early (a stop string matched in the
// server); the others run on unchanged and every block comes back.
TEST(Engine, StopSampleEndsOneSampleOnly) {
  auto m = load(kTinyGemma);
  ThreadPool pool(1);
  std::mt19937 rng(5);
  RequestParams p;
  p.prompt = random_prompt(rng, 20, m->config().n_vocab);
  p.sampling = seeded(3);
  p.max_tokens = 10;
  p.n = 3;
  auto ref = make_engine(*m, pool, {});
  ASSERT_TRUE(ref->add_request("r", p).is_ok());
  std::map<int, std::vector<int32_t>> want;
  while (ref->has_unfinished()) {
    auto out = ref->step();
    ASSERT_TRUE(out.is_ok());
    for (auto& f : out->finished) want[f.index] = f.output;
  }
  auto e = make_engine(*m, pool, {});
  ASSERT_TRUE(e->add_request("r", p).is_ok());
  EXPECT_FALSE(e->stop_sample("r", 1));  // not forked yet
  std::map<int, FinishedRequest> got;
  bool stopped = false;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    for (auto& f : out->finished) got[f.index] = f;
    if (!stopped && !out->tokens.empty()) {
      stopped = true;
      EXPECT_TRUE(e->stop_sample("r", 1));
    }
    ASSERT_TRUE(e->check_invariants().is_ok());
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].reason, FinishReason::kStop);
  EXPECT_EQ(got[1].output.size(), 1u);
  EXPECT_EQ(got[0].output, want[0]);
  EXPECT_EQ(got[2].output, want[2]);
  EXPECT_EQ(e->stats().blocks_used, 0);
  EXPECT_FALSE(e->stop_sample("r", 0));
}


// prompt_logprobs: log p of every prompt token after the first, against the
// plain forward's logits of all rows; generation is unchanged, and a second
// identical request (whose prefix is cached) still reports every token.
TEST(Engine, PromptLogprobsMatchForward) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(13);
  const int V = m->config().n_vocab;
  RequestParams p;
  p.prompt = random_prompt(rng, 70, V);  // three chunks of kPromptLogprobChunk
  p.sampling = greedy();
  p.max_tokens = 4;
  const Out plain = run_alone(*m, pool, p);
  p.prompt_logprobs = 2;
  auto e = make_engine(*m, pool, {});
  ASSERT_TRUE(e->add_request("a", p).is_ok());
  std::map<std::string, std::vector<float>> lps;
  std::map<std::string, std::vector<TopLogprobs>> tops;
  std::map<std::string, std::vector<int32_t>> outs;
  auto run = [&] {
    while (e->has_unfinished()) {
      auto out = e->step();
      ASSERT_TRUE(out.is_ok());
      for (auto& ev : out->prompt_logprobs) {
        EXPECT_EQ(ev.first, static_cast<int64_t>(lps[ev.id].size()) + 1);
        lps[ev.id].insert(lps[ev.id].end(), ev.logprobs.begin(), ev.logprobs.end());
        tops[ev.id].insert(tops[ev.id].end(), ev.top.begin(), ev.top.end());
      }
      for (auto& f : out->finished) outs[f.id] = f.output;
    }
  };
  run();
  ASSERT_TRUE(e->add_request("b", p).is_ok());
  run();
  ForwardContext ctx(*m, pool, 128);
  ContiguousKvCache cache(m->config(), 128);
  std::vector<float> all(static_cast<size_t>(p.prompt.size()) * V);
  ASSERT_TRUE(ctx.forward(p.prompt.data(), static_cast<int64_t>(p.prompt.size()), 0, cache, nullptr, all.data()).is_ok());
  for (const char* id : {"a", "b"}) {
    EXPECT_EQ(outs[id], plain.tokens) << id;
    ASSERT_EQ(lps[id].size(), p.prompt.size() - 1) << id;
    for (size_t q = 1; q < p.prompt.size(); ++q) {
      const float* row = all.data() + (q - 1) * V;
      double mx = row[0], sum = 0;
      for (int j = 0; j < V; ++j) mx = std::max<double>(mx, row[j]);
      for (int j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
      const double lse = mx + std::log(sum);
      EXPECT_NEAR(lps[id][q - 1], row[p.prompt[q]] - lse, 1e-5) << id << " position " << q;
      ASSERT_EQ(tops[id][q - 1].size(), 2u);
      EXPECT_EQ(tops[id][q - 1][0].first, argmax(row, V));
    }
  }
}


// Memory pressure: a pool for ~4 sequences, 24 requests. With recomputation
// and with swap preemption (KV pages copied to host memory and back) every
// output equals running alone and no token is emitted twice; with swap every
// swap-out is swapped back in, swap space returns to zero, and fewer tokens
// are computed than with recomputation. Gemma's sliding-window groups
// exercise pages released before the swap.
void swap_pressure(const char* model_dir) {
  auto m = load(model_dir);
  ThreadPool pool(1);
  std::mt19937 rng(3);
  std::vector<RequestParams> reqs(24);
  for (int i = 0; i < 24; ++i) {
    reqs[i].prompt = random_prompt(rng, 10 + static_cast<int>(rng() % 30), m->config().n_vocab);
    reqs[i].sampling = i % 4 ? seeded(i) : greedy();
    reqs[i].max_tokens = 20 + static_cast<int>(rng() % 20);
    reqs[i].logprobs = true;
  }
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 32;
  cfg.enable_prefix_caching = false;
  auto probe = make_engine(*m, pool, cfg);
  cfg.num_kv_blocks = 4 * 16 * probe->n_kv_groups();  // ~4 sequences of 64 tokens
  int64_t computed[2] = {0, 0};
  for (int swap = 0; swap < 2; ++swap) {
    cfg.preempt_swap = swap == 1;
    auto e = make_engine(*m, pool, cfg);
    for (int i = 0; i < 24; ++i) ASSERT_TRUE(e->add_request(std::to_string(i), reqs[i]).is_ok());
    Drained r = drain(*e);
    computed[swap] = r.stats.n_computed_tokens;
    EXPECT_GT(r.stats.n_preemptions, 0);
    ASSERT_EQ(r.finished.size(), 24u);
    if (swap) {
      EXPECT_GT(r.stats.n_swap_outs, 0);
      EXPECT_EQ(r.stats.n_swap_ins, r.stats.n_swap_outs);
      EXPECT_EQ(r.stats.swap_bytes_used, 0);
    } else {
      EXPECT_EQ(r.stats.n_swap_outs, 0);
    }
    int preempted = 0;
    for (int i = 0; i < 24; ++i) {
      const std::string id = std::to_string(i);
      preempted += r.finished[id].n_preemptions > 0;
      EXPECT_EQ(out_of(r.finished[id]), run_alone(*m, pool, reqs[i])) << "request " << i << " swap " << swap;
      EXPECT_EQ(r.streamed[id], r.finished[id].output);  // no token emitted twice after a preemption
    }
    EXPECT_GT(preempted, 0);
  }
  EXPECT_LT(computed[1], computed[0]);
}

TEST(Engine, MemoryPressurePreemptsAndResumesIdentically) {
  swap_pressure(kTinyQwen);
  swap_pressure(kTinyGemma);
}

// A swap budget too small for any sequence falls back to recomputation.
TEST(Engine, SwapSpaceExhaustedFallsBackToRecompute) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(4);
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 32;
  cfg.max_num_batched_tokens = 32;
  cfg.preempt_swap = true;
  cfg.swap_space_bytes = 1;
  auto e = make_engine(*m, pool, cfg);
  for (int i = 0; i < 8; ++i) {
    RequestParams p;
    p.prompt = random_prompt(rng, 20, m->config().n_vocab);
    p.sampling = greedy();
    p.max_tokens = 30;
    ASSERT_TRUE(e->add_request(std::to_string(i), p).is_ok());
  }
  Drained r = drain(*e);
  EXPECT_GT(r.stats.n_preemptions, 0);
  EXPECT_EQ(r.stats.n_swap_outs, 0);
  EXPECT_EQ(r.finished.size(), 8u);
}


// Aborting a request with n samples before they were forked reports every
// sample once (a server waiting for all n would otherwise wait forever).
TEST(Engine, AbortBeforeForkReportsEverySample) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(8);
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 16;  // the 64-token prompt needs several steps
  auto e = make_engine(*m, pool, cfg);
  RequestParams p;
  p.prompt = random_prompt(rng, 64, m->config().n_vocab);
  p.sampling = greedy();
  p.max_tokens = 5;
  p.n = 4;
  ASSERT_TRUE(e->add_request("r", p).is_ok());
  ASSERT_TRUE(e->step().is_ok());  // part of the prompt
  ASSERT_TRUE(e->abort("r"));
  Drained r;
  std::map<int, int> seen;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    for (auto& f : out->finished) {
      ++seen[f.index];
      EXPECT_EQ(f.reason, FinishReason::kAbort);
    }
  }
  ASSERT_EQ(seen.size(), 4u);
  for (auto& [k, c] : seen) EXPECT_EQ(c, 1) << "sample " << k;
  EXPECT_EQ(e->stats().blocks_used, 0);
  EXPECT_TRUE(e->check_invariants().is_ok());
}


// max_num_seqs counts the samples a request will fork: prompts admitted in
// one step must not fork past the limit.
TEST(Engine, ParallelSamplesRespectMaxNumSeqs) {
  auto m = load(kTinyQwen);
  ThreadPool pool(1);
  std::mt19937 rng(12);
  EngineConfig cfg;
  cfg.max_num_seqs = 8;
  auto e = make_engine(*m, pool, cfg);
  for (int i = 0; i < 8; ++i) {
    RequestParams p;
    p.prompt = random_prompt(rng, 6, m->config().n_vocab);
    p.sampling = seeded(i);
    p.max_tokens = 4;
    p.n = 4;
    ASSERT_TRUE(e->add_request("r" + std::to_string(i), p).is_ok());
  }
  int peak = 0, finished = 0;
  while (e->has_unfinished()) {
    auto out = e->step();
    ASSERT_TRUE(out.is_ok());
    finished += static_cast<int>(out->finished.size());
    peak = std::max(peak, e->stats().n_running);
  }
  EXPECT_EQ(finished, 32);
  EXPECT_EQ(peak, 8);
}

}  // namespace
}  // namespace ember
