// Speculative-decoding test helpers: the tiny test models, running a list of
// requests through an engine (every step's invariants checked), comparing
// two runs, a mixed workload, and ReplayProposer.
//
// ReplayProposer, a test proposer for speculative decoding: it knows (from a function of
// the request) the output the request will produce without speculation and
// proposes its next tokens, corrupting some at random, so verification sees
// every case: all drafts accepted (+ the bonus token), a mismatch at any
// position, empty and short proposals. Deterministic (own seeded RNG).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/speculative/proposer.h"
#include "engine/test_sampling.h"

namespace ember::test {

inline const char* kTinyGemma = EMBER_SOURCE_DIR "/tests/data/model/hf_gemma3";
inline const char* kTinyQwen = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen2";
inline const char* kTinyQwen3 = EMBER_SOURCE_DIR "/tests/data/model/hf_qwen3";

// A model from a path (null, with a test failure, if it does not load).
inline std::unique_ptr<Model> load_model(const char* path) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? std::move(m.value()) : nullptr;
}

struct RunResult {
  std::map<std::string, FinishedRequest> finished;
  std::map<std::string, std::vector<int32_t>> streamed;
  EngineStats stats;
};

inline std::string key(const std::string& id, int index) { return id + "/" + std::to_string(index); }

using ProposerFactory = std::function<std::unique_ptr<Proposer>(const Engine&)>;

inline RunResult run(const Model& m, ThreadPool& pool, EngineConfig cfg, const std::vector<RequestParams>& reqs,
              const ProposerFactory& make = nullptr, const std::function<void(const Engine&)>& at_end = nullptr) {
  RunResult r;
  auto e = Engine::create(m, pool, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return r;
  if (make) e.value()->set_proposer(make(*e.value()));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(e.value()->add_request(std::to_string(i), reqs[i]).is_ok());
  for (int guard = 0; e.value()->has_unfinished() && guard < 100000; ++guard) {
    auto out = e.value()->step();
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out.is_ok()) break;
    for (auto& t : out->tokens) r.streamed[key(t.id, t.index)].push_back(t.token);
    for (auto& f : out->finished) r.finished[key(f.id, f.index)] = f;
    const Status st = e.value()->check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) break;
  }
  r.stats = e.value()->stats();
  EXPECT_EQ(r.stats.blocks_used, 0);
  if (at_end) at_end(*e.value());
  return r;
}

inline void expect_same(const RunResult& want, const RunResult& got, const std::string& what) {
  ASSERT_EQ(want.finished.size(), got.finished.size()) << what;
  for (const auto& [k, f] : want.finished) {
    const FinishedRequest& g = got.finished.at(k);
    EXPECT_EQ(g.output, f.output) << what << " " << k;
    EXPECT_EQ(g.logprobs, f.logprobs) << what << " " << k;  // bit-identical logits rows
    EXPECT_EQ(g.reason, f.reason) << what << " " << k;
    EXPECT_EQ(got.streamed.at(k), g.output) << what << " " << k;
  }
}

// Each request run alone through an engine of cfg: the reference runs of
// speculative tests, keyed "i/index" by request index.
inline RunResult run_each_alone(const Model& m, ThreadPool& pool, const EngineConfig& cfg,
                                const std::vector<RequestParams>& reqs) {
  RunResult want;
  for (size_t i = 0; i < reqs.size(); ++i) {
    RunResult one = run(m, pool, cfg, {reqs[i]});
    for (auto& [k, f] : one.finished) {
      const std::string kk = std::to_string(i) + k.substr(k.find('/'));
      f.id = std::to_string(i);
      want.finished[kk] = f;
      want.streamed[kk] = f.output;
    }
  }
  return want;
}

// Prompts that repeat themselves (so n-gram lookup finds matches), some
// sharing a long prefix (prefix-cache hits), greedy and seeded, n = 2,
// penalties and stop tokens.
inline std::vector<RequestParams> workload(int n_req, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> shared(40);
  for (auto& t : shared) t = static_cast<int32_t>(rng() % vocab);
  std::vector<RequestParams> reqs;
  for (int i = 0; i < n_req; ++i) {
    RequestParams p;
    std::vector<int32_t> motif(3 + rng() % 6);
    for (auto& t : motif) t = static_cast<int32_t>(rng() % vocab);
    if (i % 3 == 0) p.prompt = shared;
    for (int rep = 0; rep < 4; ++rep) p.prompt.insert(p.prompt.end(), motif.begin(), motif.end());
    p.sampling = i % 2 ? greedy() : seeded(1000 + i);
    if (i % 5 == 0) p.sampling.repetition_penalty = 1.2f;
    if (i % 7 == 0) p.n = 2;
    if (i % 4 == 1) p.stop_token_ids = {motif[1]};
    p.max_tokens = 8 + static_cast<int>(rng() % 20);
    p.logprobs = true;
    reqs.push_back(p);
  }
  return reqs;
}

// workload() made greedy, one sample each; keep_penalty: the repetition
// penalty stays (it applies to a draft's greedy choice too).
inline std::vector<RequestParams> greedy_workload(int n_req, int vocab, uint32_t seed, bool keep_penalty = false) {
  std::vector<RequestParams> reqs = workload(n_req, vocab, seed);
  for (RequestParams& p : reqs) {
    const float rep = p.sampling.repetition_penalty;
    p.sampling = greedy();
    if (keep_penalty) p.sampling.repetition_penalty = rep;
    p.n = 1;
  }
  return reqs;
}


class ReplayProposer final : public Proposer {
 public:
  // expected(r): r's whole output without speculation (called once per
  // sequence); n_vocab: for corrupted tokens.
  ReplayProposer(std::function<std::vector<int32_t>(const Request&)> expected, int n_vocab, uint32_t seed,
                 double p_corrupt = 0.15)
      : expected_(std::move(expected)), n_vocab_(n_vocab), rng_(seed), p_corrupt_(p_corrupt) {}

  SpecMethod method() const override { return SpecMethod::kNgram; }
  Status propose(const std::vector<ProposeItem>& items) override {
    std::uniform_real_distribution<double> uni(0, 1);
    for (const ProposeItem& it : items) {
      ++n_calls_;
      auto f = cache_.find(it.req->seq_id);
      if (f == cache_.end()) f = cache_.emplace(it.req->seq_id, expected_(*it.req)).first;
      const std::vector<int32_t>& want = f->second;
      it.out->q.clear();
      it.out->tokens.clear();
      const int k = static_cast<int>(rng_() % (it.max_k + 1));  // 0 .. max_k
      for (int j = 0; j < k; ++j) {
        const size_t at = static_cast<size_t>(it.req->n_output() + j);
        int32_t t = at < want.size() ? want[at] : static_cast<int32_t>(rng_() % n_vocab_);
        if (uni(rng_) < p_corrupt_) t = (t + 1 + static_cast<int32_t>(rng_() % (n_vocab_ - 1))) % n_vocab_;
        it.out->tokens.push_back(t);
      }
    }
    return Status::ok();
  }
  void release(const Request& r) override { cache_.erase(r.seq_id); }
  int64_t n_calls() const { return n_calls_; }

 private:
  std::function<std::vector<int32_t>(const Request&)> expected_;
  int n_vocab_;
  std::mt19937 rng_;
  double p_corrupt_;
  std::map<uint64_t, std::vector<int32_t>> cache_;
  int64_t n_calls_ = 0;
};

}  // namespace ember::test
