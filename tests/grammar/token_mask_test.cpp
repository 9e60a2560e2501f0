// Token masks: for random grammar states the fast mask (precomputed
// per-position verdicts + context-dependent checks) equals the brute-force
// mask that runs the recognizer over every token's bytes, on a synthetic
// vocabulary and on the default model's 262k-token vocabulary; masks
// computed ahead on a worker (MaskPrefetch) equal them. The DISABLED_
// benchmark prints mask time per token (mean, p99), inline and on the
// critical path with prefetching.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "grammar/json_schema.h"
#include "grammar/mask_worker.h"
#include "grammar/token_mask.h"
#include "model/io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ember::grammar {
namespace {

using json = nlohmann::ordered_json;

const Tokenizer* gemma_tokenizer() {
  static std::unique_ptr<GgufFile> file;
  static std::unique_ptr<Tokenizer> tok;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const std::string path = std::string(EMBER_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
    if (!std::filesystem::exists(path)) return nullptr;
    auto f = GgufFile::open(path);
    if (!f) return nullptr;
    file = std::move(f.value());
    auto t = Tokenizer::from_metadata(file->metadata());
    if (!t) return nullptr;
    tok = std::move(t.value());
  }
  return tok.get();
}

std::shared_ptr<const CompiledGrammar> compile_text(const std::string& gbnf, std::shared_ptr<const TokenVocab> v) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return CompiledGrammar::compile(std::move(g.value()), std::move(v));
}

std::vector<int32_t> bits_to_ids(const std::vector<uint64_t>& bits, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i)
    if ((bits[i >> 6] >> (i & 63)) & 1) ids.push_back(i);
  return ids;
}

// Random walk through the grammar, comparing masks at every step; returns steps taken.
int compare_masks_on_walk(const CompiledGrammar& cg, int steps, uint32_t seed) {
  const int V = cg.vocab().n_vocab;
  auto pool = cg.new_pool();
  auto ref_pool = cg.new_pool();  // the reference uses its own pool
  GrammarMatcher m(pool);
  GrammarMatcher ref(ref_pool);
  std::mt19937 rng(seed);
  std::vector<uint64_t> fast((V + 63) / 64), slow((V + 63) / 64);
  int t = 0;
  for (; t < steps; ++t) {
    cg.fill_mask(*pool, m.state(), fast.data());
    cg.fill_mask_brute_force(*ref_pool, ref.state(), slow.data());
    const auto a = bits_to_ids(fast, V), b = bits_to_ids(slow, V);
    EXPECT_EQ(a, b) << "step " << t << ": fast " << a.size() << " tokens, brute force " << b.size();
    if (a != b || a.empty()) break;
    // Prefer longer tokens now and then, so walks cross rule boundaries.
    const int32_t tok = a[rng() % a.size()];
    EXPECT_TRUE(m.accept(cg.vocab().bytes[tok]));
    EXPECT_TRUE(ref.accept(cg.vocab().bytes[tok]));
  }
  return t;
}

const char* const kSmallSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "tags": {"type": "array", "items": {"enum": ["a", "b", "c d"]}, "maxItems": 3}},
  "required": ["name", "age"], "additionalProperties": false})";

TEST(TokenMask, FastEqualsBruteForceOnSyntheticVocab) {
  // Every string of 1..3 bytes over a JSON-ish alphabet, plus multi-byte pieces.
  const std::string alpha = "{}[]\":, ab1-9.ne\\";
  std::vector<std::string> pieces = {"", "\xC3\xA9", "\xE6\x97\xA5", "\xC3", "\x80", "\"}", "\"]}", "\": \"", "true",
                                     "null", "\n  "};
  for (char a : alpha) {
    pieces.push_back(std::string(1, a));
    for (char b : alpha) {
      pieces.push_back(std::string{a, b});
      for (char c : std::string("\"a1}"))
        pieces.push_back(std::string{a, b, c});
    }
  }
  auto vocab = TokenVocab::from_pieces(pieces);
  auto text = json_schema_to_gbnf(json::parse(kSmallSchema));
  ASSERT_TRUE(text.is_ok());
  for (const std::string& g : {*text, json_object_gbnf(), std::string("root ::= [a-c]{2,5} (\"\\\"\" | \"9\"+)\n")}) {
    auto cg = compile_text(g, vocab);
    for (uint32_t seed = 1; seed <= 6; ++seed) EXPECT_GT(compare_masks_on_walk(*cg, 40, seed), 0);
  }
}

TEST(TokenMask, FastEqualsBruteForceOnTheDefaultModelVocab) {
  const Tokenizer* tok = gemma_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not found";
  auto vocab = TokenVocab::from_tokenizer(*tok);
  EXPECT_GT(vocab->sorted.size(), size_t{200000});
  auto text = json_schema_to_gbnf(json::parse(kSmallSchema));
  ASSERT_TRUE(text.is_ok());
  auto cg = compile_text(*text, vocab);
  std::printf("compiled in %.3f s\n", cg->compile_seconds());
  for (uint32_t seed = 1; seed <= 2; ++seed) EXPECT_GT(compare_masks_on_walk(*cg, 12, seed), 0);
}

TEST(TokenMask, PrefetchedMasksEqualInlineOnesAndOnlyTheLatestStateCounts) {
  std::vector<std::string> pieces = {"", "{", "}", "\"", "a", "b", "ab", ":", ",", " ", "1", "2", "\":", "\"a\""};
  auto vocab = TokenVocab::from_pieces(pieces);
  auto cg = compile_text(json_object_gbnf(), vocab);
  const int V = vocab->n_vocab;
  auto worker = std::make_shared<MaskWorker>(2);
  auto pool = cg->new_pool();
  auto mu = std::make_shared<std::mutex>();
  MaskPrefetch pf(worker, cg, pool, mu);
  GrammarMatcher m(pool);
  auto ref_pool = cg->new_pool();
  GrammarMatcher ref(ref_pool);
  std::vector<uint64_t> got((V + 63) / 64), want((V + 63) / 64);
  std::mt19937 rng(5);
  int taken = 0;
  for (int t = 0; t < 60; ++t) {
    {
      std::lock_guard<std::mutex> lk(*mu);
      if (t % 3 == 1) {  // superseded: the mask of an earlier state is never handed over
        pf.want(m.state());
        pf.want(pool->initial());
      }
      pf.want(m.state());
    }
    if (t % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE(pf.take(m.state(), &got));
    ++taken;
    EXPECT_FALSE(pf.take(m.state(), &got));  // handed over once
    cg->fill_mask_brute_force(*ref_pool, ref.state(), want.data());
    ASSERT_EQ(bits_to_ids(got, V), bits_to_ids(want, V)) << "step " << t;
    const auto ids = bits_to_ids(want, V);
    if (ids.empty()) break;
    const int32_t tok = ids[rng() % ids.size()];
    std::lock_guard<std::mutex> lk(*mu);
    ASSERT_TRUE(m.accept(vocab->bytes[tok]));
    ASSERT_TRUE(ref.accept(vocab->bytes[tok]));
  }
  EXPECT_GT(taken, 10);
  // A state never asked for is not prefetched.
  EXPECT_FALSE(pf.take(pool->initial(), &got));
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// Mask time per generated token on the default model's vocabulary (a
// benchmark: run with --gtest_also_run_disabled_tests).
TEST(TokenMask, DISABLED_MaskBenchmark) {
  const Tokenizer* tok = gemma_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not found";
  auto vocab = TokenVocab::from_tokenizer(*tok);
  const std::string large_path = std::string(EMBER_SOURCE_DIR) + "/tests/data/grammar/large_schema.json";
  std::vector<std::pair<std::string, std::string>> grammars = {
      {"small schema", *json_schema_to_gbnf(json::parse(kSmallSchema))}, {"json_object", json_object_gbnf()}};
  if (std::filesystem::exists(large_path)) {
    std::ifstream f(large_path);
    grammars.push_back({"large schema", *json_schema_to_gbnf(json::parse(f))});
  }
  const int V = vocab->n_vocab;
  for (const auto& [name, text] : grammars) {
    auto cg = compile_text(text, vocab);
    // Pass 0 meets each stack context for the first time (cold: it walks the
    // vocabulary trie once per context); pass 1 repeats the same walks (warm:
    // every later request on this grammar).
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<double> us;
      for (uint32_t seed = 1; seed <= 8; ++seed) {
        auto pool = cg->new_pool();
        GrammarMatcher m(pool);
        std::mt19937 rng(seed);
        std::vector<uint64_t> bits((V + 63) / 64);
        for (int t = 0; t < 200; ++t) {
          const auto t0 = std::chrono::steady_clock::now();
          cg->fill_mask(*pool, m.state(), bits.data());
          us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
          const auto ids = bits_to_ids(bits, V);
          if (ids.empty()) break;
          m.accept(vocab->bytes[ids[rng() % ids.size()]]);
        }
      }
      double mean = 0;
      for (double x : us) mean += x;
      mean /= static_cast<double>(us.size());
      std::printf("%-13s %s: %zu contexts; mask per token over %zu steps: mean %.1f us, p50 %.1f us, p99 %.1f us\n",
                  name.c_str(), pass ? "warm" : "cold", cg->n_contexts(), us.size(), mean, percentile(us, 0.5),
                  percentile(us, 0.99));
    }
    // Cold again (a fresh compile), the mask prefetched on a worker while a
    // forward pass of EMBER_BENCH_STEP_MS (default 20) runs: what the engine
    // thread waits for a mask (its critical-path cost).
    const char* env = std::getenv("EMBER_BENCH_STEP_MS");
    const double step_ms = env ? std::atof(env) : 20.0;
    auto fresh = compile_text(text, vocab);
    auto worker = std::make_shared<MaskWorker>(1);
    std::vector<double> us;
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      auto pool = fresh->new_pool();
      auto mu = std::make_shared<std::mutex>();
      MaskPrefetch pf(worker, fresh, pool, mu);
      GrammarMatcher m(pool);
      std::mt19937 rng(seed);
      std::vector<uint64_t> bits((V + 63) / 64);
      for (int t = 0; t < 100; ++t) {
        pf.want(m.state());
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(step_ms * 1000)));
        const auto t0 = std::chrono::steady_clock::now();
        if (!pf.take(m.state(), &bits)) {
          std::lock_guard<std::mutex> lk(*mu);
          fresh->fill_mask(*pool, m.state(), bits.data());
        }
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        const auto ids = bits_to_ids(bits, V);
        if (ids.empty()) break;
        std::lock_guard<std::mutex> lk(*mu);
        m.accept(vocab->bytes[ids[rng() % ids.size()]]);
      }
    }
    double mean = 0;
    for (double x : us) mean += x;
    mean /= static_cast<double>(us.size());
    std::printf("%-13s cold, prefetched during a %.0f ms step: wait per token over %zu steps: mean %.1f us, p50 %.1f us, "
                "p99 %.1f us\n",
                name.c_str(), step_ms, us.size(), mean, percentile(us, 0.5), percentile(us, 0.99));
  }
}

}  // namespace
}  // namespace ember::grammar
