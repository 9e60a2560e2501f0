// Pins the default model's outputs bit for bit: greedy and seeded tokens,
// their log-probabilities, prompt log-probabilities, parallel samples,
// penalties, and hashes of full logits rows, through the serving engine and
// the single-sequence forward pass, at every ISA level the fixture holds.
//
// The fixture (tests/data/engine/golden_gemma3_270m.json) was recorded with
// the code as it stood before the engine/forward-pass restructuring
// (commit 8a84934); any change to the arithmetic of the forward pass, the
// kernels or the sampler shows up here. To re-record after an intended
// change: EMBER_UPDATE_GOLDEN=1 build/test_engine --gtest_filter='Golden*'
// (and say why in the commit).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

using json = nlohmann::json;

const char* kModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
const char* kFixture = EMBER_SOURCE_DIR "/tests/data/engine/golden_gemma3_270m.json";

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// FNV-1a over the bit patterns of a float row.
uint64_t hash_row(const float* x, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = bits(x[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xFF;
      h *= 1099511628211ull;
    }
  }
  return h;
}

json bits_array(const std::vector<float>& v) {
  json a = json::array();
  for (float f : v) a.push_back(bits(f));
  return a;
}

struct Case {
  std::string name;
  std::string prompt;
  SamplingParams sampling;
  int max_tokens = 20;
  int top_logprobs = 0;
  int prompt_logprobs = -1;
  int n = 1;
};

std::vector<Case> cases() {
  std::vector<Case> cs;
  SamplingParams greedy;
  greedy.temperature = 0.f;
  SamplingParams seeded;  // defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
  seeded.seed = 1234;
  SamplingParams full;  // whole vocabulary, no truncation
  full.temperature = 1.0f;
  full.top_k = 0;
  full.top_p = 1.0f;
  full.min_p = 0.f;
  full.seed = 99;
  SamplingParams penalties = seeded;
  penalties.seed = 7;
  penalties.repetition_penalty = 1.15f;
  penalties.presence_penalty = 0.4f;
  penalties.frequency_penalty = 0.3f;
  SamplingParams top_p_only = seeded;
  top_p_only.top_k = 0;
  top_p_only.top_p = 0.9f;
  top_p_only.seed = 5;
  cs.push_back({"greedy_story", "Once upon a time, in a small village by the sea,", greedy, 24, 3});
  cs.push_back({"greedy_code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", greedy, 24, 0, 2});
  cs.push_back({"seeded_n2", "The capital of France is", seeded, 16, 2, -1, 2});
  cs.push_back({"full_vocab", "Water boils at", full, 16, 1});
  cs.push_back({"penalties", "List of fruits: apple, banana, apple, banana,", penalties, 20, 0});
  cs.push_back({"top_p", "In 1969, the first humans", top_p_only, 16, 0});
  return cs;
}

// Everything observable about the cases at the current ISA level.
json run_all(const Model& model, const Tokenizer& tok) {
  json out = json::object();
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.kv_cache_bytes = size_t{64} << 20;
  cfg.max_num_batched_tokens = 256;
  auto engine = Engine::create(model, pool, cfg);
  EXPECT_TRUE(engine.is_ok()) << engine.status().message();
  if (!engine.is_ok()) return out;
  Engine& e = *engine.value();
  json& reqs = out["requests"];
  for (const Case& c : cases()) {
    RequestParams p;
    p.prompt = tok.encode(c.prompt);
    p.sampling = c.sampling;
    p.max_tokens = c.max_tokens;
    p.logprobs = true;
    p.top_logprobs = c.top_logprobs;
    p.prompt_logprobs = c.prompt_logprobs;
    p.n = c.n;
    EXPECT_TRUE(e.add_request(c.name, p).is_ok());
  }
  // All requests run together (continuous batching with chunked prefill);
  // outputs must match what each gives alone, which the engine tests check.
  for (int guard = 0; e.has_unfinished() && guard < 10000; ++guard) {
    auto st = e.step();
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    if (!st.is_ok()) break;
    for (const TokenEvent& t : st->tokens) {
      json& r = reqs[t.id]["samples"][std::to_string(t.index)];
      if (!t.top.empty()) {
        json top = json::array();
        for (const auto& [id, lp] : t.top) top.push_back({id, bits(lp)});
        r["top"].push_back(top);
      }
    }
    for (const PromptLogprobEvent& pl : st->prompt_logprobs) {
      json& r = reqs[pl.id]["prompt_logprobs"];
      for (size_t i = 0; i < pl.logprobs.size(); ++i) {
        json top = json::array();
        for (const auto& [id, lp] : pl.top[i]) top.push_back({id, bits(lp)});
        r.push_back({pl.first + static_cast<int64_t>(i), bits(pl.logprobs[i]), top});
      }
    }
    for (const FinishedRequest& f : st->finished) {
      json& r = reqs[f.id]["samples"][std::to_string(f.index)];
      r["tokens"] = f.output;
      r["logprobs"] = bits_array(f.logprobs);
      r["reason"] = finish_reason_name(f.reason);
    }
  }

  // The single-sequence forward pass: every logits row of a prompt, and a
  // decode step after it.
  ForwardContext ctx(model, pool, 64);
  ContiguousKvCache cache(model.config(), 256);
  const std::vector<int32_t> ids = tok.encode("The quick brown fox jumps over the lazy dog. It was a bright cold day in April, and");
  const int V = model.config().n_vocab;
  std::vector<float> all(ids.size() * static_cast<size_t>(V)), last(V);
  EXPECT_TRUE(ctx.forward(ids.data(), static_cast<int64_t>(ids.size()), 0, cache, last.data(), all.data()).is_ok());
  json rows = json::array();
  for (size_t i = 0; i < ids.size(); ++i) rows.push_back(std::to_string(hash_row(all.data() + i * V, V)));
  out["forward"]["prompt_rows"] = rows;
  const int32_t next = 1000;
  EXPECT_TRUE(ctx.forward(&next, 1, static_cast<int64_t>(ids.size()), cache, last.data()).is_ok());
  out["forward"]["decode_row"] = std::to_string(hash_row(last.data(), V));
  return out;
}

TEST(Golden, DefaultModelOutputsAreUnchanged) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "default model not present (scripts/setup.sh fetches it)";
  auto model = Model::load(kModel);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto tok = Tokenizer::from_metadata((*model)->file().metadata);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();

  const bool update = std::getenv("EMBER_UPDATE_GOLDEN") != nullptr;
  json fixture = json::object();
  if (std::filesystem::exists(kFixture)) {
    std::ifstream f(kFixture);
    fixture = json::parse(f);
  } else {
    ASSERT_TRUE(update) << "missing fixture " << kFixture;
  }
  const Isa saved = active_isa();
  int checked = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa > cpu_max_isa()) continue;
    set_active_isa(isa);
    const json got = run_all(**model, **tok);
    const std::string key = isa_name(isa);
    if (update) {
      fixture[key] = got;
      continue;
    }
    if (!fixture.contains(key)) continue;
    ++checked;
    const json& want = fixture[key];
    for (const auto& [name, r] : want["requests"].items()) {
      ASSERT_TRUE(got["requests"].contains(name)) << key << ": request " << name << " missing";
      EXPECT_EQ(got["requests"][name].dump(), r.dump()) << key << ": request " << name << " changed";
    }
    EXPECT_EQ(got["requests"].size(), want["requests"].size()) << key;
    EXPECT_EQ(got["forward"].dump(), want["forward"].dump()) << key << ": forward-pass logits changed";
  }
  set_active_isa(saved);
  if (update) {
    std::filesystem::create_directories(std::filesystem::path(kFixture).parent_path());
    std::ofstream f(kFixture);
    f << fixture.dump(1) << "\n";
    return;
  }
  EXPECT_GT(checked, 0) << "the fixture holds no ISA level this CPU runs";
}

}  // namespace
}  // namespace ember
