// A draft made of the target's first layers copies the target's K/V of
// final tokens instead of running them (DraftProposer::set_kv_donor), and
// a whole-stack draft hands its rows and K/V to the verification, which
// computes only the last draft position (DraftProposer::before_verify):
// which drafts qualify (shared_kv_layers), that every greedy draft of the
// whole-stack draft is still accepted (copied rows equal computed ones),
// that outputs stay token-for-token the plain ones among 32 requests with
// preemption, prefix hits, sliding windows and n-gram-first, with fewer
// tokens run through the draft, and that non-qualifying setups (a layer
// skipped before a kept one, q4c keys, --draft-recompute-kv) run them.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/layerskip.h"
#include "engine/speculative/ngram_first.h"
#include "engine/speculative_test_util.h"
#include "engine/test_sampling.h"
#include "model/tiny_layered_model.h"

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


std::unique_ptr<Model> view(const Model& m, const std::vector<int>& skip, bool all_tokens_head) {
  std::vector<int32_t> head;
  if (all_tokens_head)
    for (int32_t i = 0; i < m.config().n_vocab; ++i) head.push_back(i);
  auto d = make_draft_view(m, skip, head);
  EXPECT_TRUE(d.is_ok()) << d.status().message();
  return d.is_ok() ? std::move(d.value()) : nullptr;
}

const DraftProposer* draft_of(const Engine& e) {
  const Proposer* p = e.proposer();
  if (auto* nf = dynamic_cast<const NgramFirstProposer*>(p)) p = &const_cast<NgramFirstProposer*>(nf)->model();
  return dynamic_cast<const DraftProposer*>(p);
}

TEST(DraftKvDonor, SharedLayersAreTheTargetsLeadingOnes) {
  auto m = load(kTinyGemma);
  ASSERT_TRUE(m);
  const int L = m->config().n_layer;
  ASSERT_GE(L, 3);
  EXPECT_EQ(shared_kv_layers(*m, *m), L);
  EXPECT_EQ(shared_kv_layers(*m, *view(*m, {}, true)), L);
  EXPECT_EQ(shared_kv_layers(*m, *view(*m, {L - 1}, false)), L - 1);  // trailing skip: all the draft's layers
  EXPECT_EQ(shared_kv_layers(*m, *view(*m, {1}, false)), 1);          // layer 2 runs on other inputs
  EXPECT_EQ(shared_kv_layers(*m, *view(*m, {0}, false)), 0);
  auto again = load(kTinyGemma);  // the same file, other weights in memory: not known to be equal
  EXPECT_EQ(shared_kv_layers(*m, *again), 0);
  auto other = load(kTinyQwen);
  EXPECT_EQ(shared_kv_layers(*m, *other), 0);
}

struct DonorRun {
  RunResult r;
  bool donor = false;
  int64_t copied = 0, run_tokens = 0, handed = 0;
};

DonorRun run_layerskip(const Model& m, const Model& draft, ThreadPool& pool, EngineConfig cfg,
                       const std::vector<RequestParams>& reqs) {
  cfg.spec.method = SpecMethod::kLayerSkip;
  cfg.spec.draft_model = &draft;
  cfg.spec.max_running = 0;
  DonorRun d;
  d.r = run(m, pool, cfg, reqs, nullptr, [&](const Engine& e) {
    const DraftProposer* dp = draft_of(e);
    ASSERT_NE(dp, nullptr);
    d.donor = dp->has_kv_donor();
    d.copied = dp->n_tokens_copied();
    d.run_tokens = dp->n_tokens_run();
    d.handed = dp->n_rows_handed();
    EXPECT_EQ(dp->n_tracked(), 0);
    EXPECT_EQ(dp->n_used_blocks(), 0);
  });
  return d;
}

// The whole stack with a head of every token: the draft is the target, so
// every greedy draft is accepted, with the prompt's K/V copied, not run.
TEST(DraftKvDonor, WholeStackDraftStillExact) {
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  auto d = view(*m, {}, true);
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.num_kv_blocks = 256;
  cfg.spec.num_speculative_tokens = 3;
  RequestParams p;
  p.prompt = {3, 14, 15, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2};
  p.sampling = test::greedy();
  p.max_tokens = 25;
  const DonorRun on = run_layerskip(*m, *d, pool, cfg, {p});
  EXPECT_TRUE(on.donor);
  EXPECT_GE(on.copied, static_cast<int64_t>(p.prompt.size()) - 1);
  EXPECT_GT(on.r.stats.spec.n_draft_tokens, 0);
  EXPECT_EQ(on.r.stats.spec.n_accepted_tokens, on.r.stats.spec.n_draft_tokens);
  EXPECT_GT(on.handed, 0);
  cfg.spec.share_kv = false;
  const DonorRun off = run_layerskip(*m, *d, pool, cfg, {p});
  EXPECT_FALSE(off.donor);
  EXPECT_EQ(off.copied, 0);
  EXPECT_EQ(off.handed, 0);
  EXPECT_GT(off.run_tokens, on.run_tokens + static_cast<int64_t>(p.prompt.size()) / 2);
  EXPECT_EQ(off.r.finished.at("0/0").output, on.r.finished.at("0/0").output);
}

// 32 requests (prefix hits, penalties, stops), then under memory pressure
// (preemption), greedy: the plain outputs, for a whole-stack draft with a
// truncated head and a trailing-skip draft, on Qwen2 and on Gemma 3 (its
// sliding-window groups release pages: those rows are not copied), and with
// n-gram lookup first (the draft catches up on looked-up tokens by copy).
TEST(DraftKvDonor, GreedyIdenticalAmongManyWithPreemption) {
  for (const char* path : {kTinyQwen, kTinyGemma}) {
    auto m = load(path);
    ASSERT_TRUE(m);
    const int L = m->config().n_layer;
    std::vector<int32_t> head;
    for (int32_t i = 1; i < m->config().n_vocab; i += 2) head.push_back(i);
    auto whole = make_draft_view(*m, {}, head);
    auto early = make_draft_view(*m, {L - 1}, {});
    ASSERT_TRUE(whole.is_ok() && early.is_ok());
    ThreadPool pool(2);
    EngineConfig base;
    base.block_size = 8;
    base.max_num_batched_tokens = 48;
    base.num_kv_blocks = 1024;
    std::vector<RequestParams> reqs = test::greedy_workload(32, m->config().n_vocab, 23, true);
    const RunResult want = test::run_each_alone(*m, pool, base, reqs);
    for (const Model* draft : {whole.value().get(), early.value().get()})
      for (int ngram_first : {0, 2}) {
        SCOPED_TRACE(std::string(path) + " draft layers " + std::to_string(draft->config().n_layer) +
                     " ngram_first " + std::to_string(ngram_first));
        EngineConfig spec = base;
        spec.spec.num_speculative_tokens = 4;
        spec.spec.ngram_first = ngram_first;
        const DonorRun all = run_layerskip(*m, *draft, pool, spec, reqs);
        expect_same(want, all.r, "kv donor");
        EXPECT_TRUE(all.donor);
        EXPECT_GT(all.copied, 0);
        // The whole stack hands its rows to the verification; an early exit cannot.
        if (draft->config().n_layer == L) EXPECT_GT(all.handed, 0);
        else EXPECT_EQ(all.handed, 0);
        EXPECT_GT(all.r.stats.spec.n_draft_tokens, 0);
        EngineConfig tight = spec;
        tight.num_kv_blocks = 40;
        tight.max_num_batched_tokens = 512;
        const DonorRun pre = run_layerskip(*m, *draft, pool, tight, reqs);
        expect_same(want, pre.r, "kv donor under preemption");
      }
  }
}

TEST(DraftKvDonor, NotTakenWhereTheDraftsKvDiffers) {
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  RequestParams p;
  p.prompt = {3, 14, 15, 9, 2, 6, 5, 3};
  p.sampling = test::greedy();
  p.max_tokens = 6;
  EngineConfig cfg;
  cfg.num_kv_blocks = 128;
  cfg.spec.num_speculative_tokens = 2;
  auto skip0 = view(*m, {0}, false);  // layer 1 of the draft sees other inputs than the target's layer 1
  const DonorRun a = run_layerskip(*m, *skip0, pool, cfg, {p});
  EXPECT_FALSE(a.donor);
  EXPECT_EQ(a.copied, 0);
  // q4c keys: the draft keeps f16 keys, not the target's rows.
  EngineConfig q4c = cfg;
  q4c.kv_types = KvTypes{KvType::kQ4C, KvType::kQ4};
  q4c.block_size = kKvTokenGroup;
  test::TinySpec spec;
  spec.head_dim = 32;
  std::unique_ptr<Model> t = test::load_tiny(spec);
  ASSERT_TRUE(t);
  auto tw = view(*t, {}, true);
  const DonorRun b = run_layerskip(*t, *tw, pool, q4c, {p});
  EXPECT_FALSE(b.donor);
  EXPECT_GT(b.r.stats.spec.n_draft_tokens, 0);
}

// A whole-stack draft whose head keeps 24 tokens the plain outputs never
// pick, and prompts holding every token: with the context tokens scored
// (the target's own head rows and arithmetic) the draft's choice is the
// target's over the whole vocabulary, so every greedy draft is accepted;
// without them (context_tokens 0) every draft misses.
TEST(DraftKvDonor, ContextTokensScoredLikeTheTarget) {
  for (const char* path : {kTinyQwen, kTinyGemma}) {
    SCOPED_TRACE(path);
    auto m = load(path);
    ASSERT_TRUE(m);
    const int V = m->config().n_vocab;
    ThreadPool pool(2);
    EngineConfig cfg;
    cfg.num_kv_blocks = 512;
    cfg.max_num_batched_tokens = 256;
    cfg.spec.num_speculative_tokens = 4;
    std::vector<RequestParams> reqs;
    for (int i = 0; i < 3; ++i) {
      RequestParams p;
      for (int t = 0; t < V; ++t) p.prompt.push_back((t * 7 + i * 5) % V);
      p.sampling = test::greedy();
      p.max_tokens = 24;
      reqs.push_back(p);
    }
    const RunResult want = test::run_each_alone(*m, pool, cfg, reqs);
    // The head: tokens the plain outputs never pick (so the head alone misses).
    std::vector<uint8_t> used(static_cast<size_t>(V), 0);
    for (const auto& [k, f] : want.finished)
      for (int32_t t : f.output) used[static_cast<size_t>(t)] = 1;
    std::vector<int32_t> head;
    for (int32_t t = 0; t < V && head.size() < 24; ++t)
      if (!used[static_cast<size_t>(t)]) head.push_back(t);
    auto d = make_draft_view(*m, {}, head);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    const DonorRun with = run_layerskip(*m, *d.value(), pool, cfg, reqs);
    expect_same(want, with.r, "context tokens");
    EXPECT_GT(with.r.stats.spec.n_draft_tokens, 0);
    EXPECT_EQ(with.r.stats.spec.n_accepted_tokens, with.r.stats.spec.n_draft_tokens);
    cfg.spec.draft_context_tokens = 0;
    const DonorRun without = run_layerskip(*m, *d.value(), pool, cfg, reqs);
    expect_same(want, without.r, "head only");
    EXPECT_GT(without.r.stats.spec.n_draft_tokens, 0);
    EXPECT_EQ(without.r.stats.spec.n_accepted_tokens, 0);
  }
}

}  // namespace
}  // namespace ember
