// Speculative decoding with a draft model (DraftProposer): greedy outputs
// token-for-token identical to plain decoding, alone and among 31 other
// requests, with prefix-cache hits and preemption; sampled outputs with the
// rejection rule distributed as plain sampling (two-sample chi-square over
// many seeded runs on tiny models, deterministic); the sampler's
// distribution() is the law sample() draws from; vocabulary mismatches are
// refused with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/speculative/adaptive_k.h"
#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/layerskip.h"
#include "engine/speculative/ngram_first.h"
#include "engine/speculative_test_util.h"
#include "engine/test_sampling.h"
#include "model/tiny_layered_model.h"

namespace ember {
namespace {

using test::expect_same;
using test::key;
using test::kTinyGemma;
using test::kTinyQwen;
using test::kTinyQwen3;
using test::run;
using test::RunResult;
using test::workload;
constexpr auto load = test::load_model;



// Each request alone, without speculation.
RunResult solo_reference(const Model& m, ThreadPool& pool, const EngineConfig& base,
                         const std::vector<RequestParams>& reqs) {
  return test::run_each_alone(m, pool, base, reqs);
}

// A draft-model engine run that also checks the draft KV is all given back.
// ngram_first > 0: the draft behind n-gram lookup (ngram_first.h, that
// minimum match), the lookup's proposals counted into *n_lookup.
RunResult run_draft(const Model& target, const Model& draft, ThreadPool& pool, EngineConfig cfg,
                    const std::vector<RequestParams>& reqs, int64_t draft_blocks, int ngram_first = 0,
                    int64_t* n_lookup = nullptr) {
  DraftProposer* dp = nullptr;
  NgramFirstProposer* nf = nullptr;
  auto make = [&](const Engine&) -> std::unique_ptr<Proposer> {
    DraftConfig dc;
    dc.block_size = cfg.block_size;
    dc.num_kv_blocks = draft_blocks;
    dc.max_batch = cfg.max_num_batched_tokens;
    auto p = DraftProposer::create(target, draft, pool, dc);
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    dp = p.value().get();
    if (ngram_first == 0) return std::move(p.value());
    auto f = std::make_unique<NgramFirstProposer>(NgramConfig{}, ngram_first, 0, std::move(p.value()));
    nf = f.get();
    return f;
  };
  // The engine needs a proposer at creation to accept num_speculative_tokens.
  cfg.spec.method = SpecMethod::kNgram;
  RunResult r = run(target, pool, cfg, reqs, make, [&](const Engine&) {
    ASSERT_NE(dp, nullptr);
    EXPECT_GT(dp->n_forwards(), 0);
    EXPECT_EQ(dp->n_tracked(), 0);  // every request's draft KV was freed
    EXPECT_EQ(dp->n_used_blocks(), 0);
    if (nf && n_lookup) *n_lookup = nf->n_lookup_proposals();
  });
  return r;
}

// expect_preemption: the tight run must preempt (it does not with every
// draft on tiny Gemma 3, whose sliding groups free pages as they go).
void greedy_exactness(const Model* target, const Model* draft, bool expect_preemption = true) {
  ASSERT_TRUE(target && draft);
  ThreadPool pool(2);
  EngineConfig base;
  base.block_size = 8;
  base.max_num_batched_tokens = 48;
  base.num_kv_blocks = 1024;
  std::vector<RequestParams> reqs = test::greedy_workload(32, target->config().n_vocab, 11, true);
  const RunResult want = solo_reference(*target, pool, base, reqs);

  EngineConfig spec = base;
  spec.spec.num_speculative_tokens = 4;
  // Alone, then all 32 together, then under memory pressure (preemption)
  // with a draft pool that must evict, k = 6.
  RunResult one = run_draft(*target, *draft, pool, spec, {reqs[1]}, 256);
  EXPECT_EQ(one.finished.at("0/0").output, want.finished.at("1/0").output);
  EXPECT_GT(one.stats.spec.n_draft_tokens, 0);
  RunResult all = run_draft(*target, *draft, pool, spec, reqs, 1024);
  expect_same(want, all, "draft model");
  EXPECT_GT(all.stats.spec.n_draft_tokens, 0);
  EXPECT_GT(all.stats.prefix.hits, 0);
  EngineConfig tight = spec;
  tight.spec.num_speculative_tokens = 6;
  tight.num_kv_blocks = 40;  // Gemma 3: 3 layer groups, 104 positions per sequence at most
  tight.max_num_batched_tokens = 512;  // admits many at once: they outgrow the pool
  RunResult pre = run_draft(*target, *draft, pool, tight, reqs, 40);
  expect_same(want, pre, "draft model under preemption");
  if (expect_preemption) {
    EXPECT_GT(pre.stats.n_preemptions, 0);
  }
}

// The target as its own draft (every greedy draft is accepted), and a
// different model with the same vocabulary (most drafts are rejected).
TEST(DraftSpec, GreedyIdenticalSelfDraftTinyGemma3) {
  auto m = load(kTinyGemma);
  greedy_exactness(m.get(), m.get());
}
TEST(DraftSpec, GreedyIdenticalOtherDraftTinyQwen2) {
  auto t = load(kTinyQwen);
  auto d = load(kTinyQwen3);
  greedy_exactness(t.get(), d.get());
}

// Self-speculation: the target with layers skipped as the draft.
TEST(LayerSkipSpec, GreedyIdenticalTinyGemma3SkippingOdd) {
  auto m = load(kTinyGemma);
  ASSERT_TRUE(m);
  auto skip = parse_skip_layers("odd", m->config().n_layer);
  ASSERT_TRUE(skip.is_ok());
  auto d = make_layer_skip_model(*m, skip.value());
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d.value()->config().n_layer, m->config().n_layer - 1);
  greedy_exactness(m.get(), d.value().get(), false);
}
TEST(LayerSkipSpec, GreedyIdenticalTinyQwen2SkippingLayer0) {
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  auto d = make_layer_skip_model(*m, {0});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  greedy_exactness(m.get(), d.value().get());
}

// Self-speculation with a truncated draft head (--draft-vocab): the draft
// scores 24 of the 64 tokens, proposes only those, and greedy output stays
// the plain output; the same head on the target itself (no skipped layer).
// n of the 64 tokens, spread over the vocabulary (ascending, not a prefix).
std::vector<int32_t> head_subset(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = i * 64 / n + 1;
  return t;
}
TEST(LayerSkipSpec, GreedyIdenticalTinyGemma3SkippingOddWithTruncatedHead) {
  auto m = load(kTinyGemma);
  ASSERT_TRUE(m);
  auto skip = parse_skip_layers("odd", m->config().n_layer);
  ASSERT_TRUE(skip.is_ok());
  auto d = make_draft_view(*m, skip.value(), head_subset(24));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d.value()->config().n_logits(), 24);
  greedy_exactness(m.get(), d.value().get(), false);
}
TEST(DraftSpec, GreedyIdenticalSelfDraftTinyQwen2WithTruncatedHead) {
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  auto d = make_draft_view(*m, {}, head_subset(24));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d.value()->config().n_layer, m->config().n_layer);
  greedy_exactness(m.get(), d.value().get());
}

// The skipped model is the target's forward without those blocks: for a
// 2-layer model skipping layer 1, its logits equal (bit for bit) the
// target's stages embed, run_layers(0, 1), head; and differ from the full
// forward.
TEST(LayerSkipSpec, ParseAndBuild) {
  auto v = parse_skip_layers("odd", 6);
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v.value(), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(parse_skip_layers("even", 5).value(), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(parse_skip_layers("last-third", 18).value(), (std::vector<int>{11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(parse_skip_layers("last-half", 8).value(), (std::vector<int>{3, 4, 5, 6}));
  EXPECT_EQ(parse_skip_layers("4,6,8-10", 18).value(), (std::vector<int>{4, 6, 8, 9, 10}));
  EXPECT_FALSE(parse_skip_layers("4,x", 18).is_ok());
  EXPECT_FALSE(parse_skip_layers("18", 18).is_ok());
  EXPECT_FALSE(parse_skip_layers("0-2", 3).is_ok());  // every layer
  EXPECT_FALSE(parse_skip_layers("9-3", 18).is_ok());
  EXPECT_FALSE(parse_skip_layers("fast", 18).is_ok());
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  auto d = make_layer_skip_model(*m, {1});
  ASSERT_TRUE(d.is_ok());
  ThreadPool pool(1);
  ASSERT_EQ(m->config().n_layer, 2);
  ForwardContext full(*m, pool, 8), part(*d.value(), pool, 8), staged(*m, pool, 8);
  const std::vector<int32_t> toks = {3, 1, 4, 1, 5};
  const int V = m->config().n_vocab;
  std::vector<float> a(V), b(V), c(V);
  ContiguousKvCache ka(m->config(), 16), kb(d.value()->config(), 16), kc(m->config(), 16);
  ASSERT_TRUE(full.forward(toks.data(), 5, 0, ka, a.data()).is_ok());
  ASSERT_TRUE(part.forward(toks.data(), 5, 0, kb, b.data()).is_ok());
  SeqBatch sb;
  sb.tokens = toks.data();
  sb.n = 5;
  sb.cache = &kc;
  sb.want_logits = true;
  ASSERT_TRUE(staged.prepare(&sb, 1).is_ok());
  staged.embed();
  staged.run_layers(0, 1);
  staged.head(staged.logit_rows().data(), 1, c.data());
  EXPECT_EQ(b, c);
  EXPECT_NE(a, b);
}

TEST(DraftSpec, SelfDraftAcceptsEveryGreedyDraft) {
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.num_kv_blocks = 256;
  cfg.spec.num_speculative_tokens = 3;
  RequestParams p;
  p.prompt = {3, 14, 15, 9, 2, 6};
  p.sampling = test::greedy();
  p.max_tokens = 25;
  RunResult r = run_draft(*m, *m, pool, cfg, {p}, 64);
  EXPECT_GT(r.stats.spec.n_draft_tokens, 0);
  EXPECT_EQ(r.stats.spec.n_accepted_tokens, r.stats.spec.n_draft_tokens);
  EXPECT_NEAR(r.stats.spec.mean_accepted_length(), 4.0, 1e-9);  // 3 drafts + the bonus per verification
}

// The draft stores its KV as the target does: the target's own stack as a
// layer-skip draft that skips nothing (a truncated head that keeps every
// token) has every greedy draft accepted under a compressed cache; with
// the draft's cache in f32 (the old default) its states would differ from
// the target's. Formats the draft's head dims cannot take fall back to f16.
TEST(DraftSpec, DraftKvFollowsTheTargetsFormats) {
  test::TinySpec spec;  // qwen2, 2 / 4 / 1 KV heads
  spec.head_dim = 32;
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  auto none = parse_skip_layers("none", m->config().n_layer);
  ASSERT_TRUE(none.is_ok()) << none.status().message();
  EXPECT_TRUE(none.value().empty());
  std::vector<int32_t> all(static_cast<size_t>(m->config().n_vocab));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  auto draft = make_draft_view(*m, none.value(), all);
  ASSERT_TRUE(draft.is_ok()) << draft.status().message();
  ThreadPool pool(2);
  for (KvTypes kv : {KvTypes{KvType::kQ4, KvType::kQ4}, KvTypes{KvType::kQ8, KvType::kF16, KvRotation::kHadamard},
                     KvTypes{KvType::kQ4C, KvType::kQ4}}) {
    SCOPED_TRACE(kv_type_name(kv.k));
    EngineConfig cfg;
    cfg.block_size = kv_token_grouped(kv.k) ? kKvTokenGroup : 8;
    cfg.num_kv_blocks = 128;
    cfg.kv_types = kv;
    cfg.spec.method = SpecMethod::kLayerSkip;
    cfg.spec.draft_model = draft.value().get();
    cfg.spec.num_speculative_tokens = 3;
    cfg.spec.max_running = 0;
    std::vector<RequestParams> reqs = workload(4, m->config().n_vocab, 5);
    for (RequestParams& p : reqs) {
      p.sampling = test::greedy();
      p.n = 1;
    }
    RunResult r = run(*m, pool, cfg, reqs);
    EXPECT_GT(r.stats.spec.n_draft_tokens, 0);
    if (kv.k == KvType::kQ4C) {  // the draft's keys in f16 instead: drafts may miss, outputs stay exact
      EngineConfig plain = cfg;
      plain.spec = SpecConfig{};
      expect_same(run(*m, pool, plain, reqs), r, "q4c target, f16-key draft");
    } else {
      EXPECT_EQ(r.stats.spec.n_accepted_tokens, r.stats.spec.n_draft_tokens);
    }
  }
  // What the draft stores for formats its head dims do or do not take.
  ModelConfig dc = m->config();
  const KvTypes q8h{KvType::kQ8, KvType::kQ8, KvRotation::kHadamard, KvRotation::kHadamard};
  EXPECT_EQ(draft_kv_types(q8h, dc), q8h);
  EXPECT_EQ(draft_kv_types(KvTypes{KvType::kQ4C, KvType::kQ4}, dc), (KvTypes{KvType::kF16, KvType::kQ4}));
  dc.head_dim = dc.head_dim_v = 8;  // no groups of 32
  EXPECT_EQ(draft_kv_types(q8h, dc), (KvTypes{KvType::kF16, KvType::kF16}));
  EXPECT_EQ(draft_kv_types(KvTypes{KvType::kBF16, KvType::kF32}, dc), (KvTypes{KvType::kBF16, KvType::kF32}));
}

// Two-sample chi-square statistic over the cells where either has counts;
// *df its degrees of freedom.
double chi2_two_sample(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int* df) {
  double x = 0;
  *df = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double s = static_cast<double>(a[i] + b[i]);
    if (s == 0) continue;
    const double d = static_cast<double>(a[i] - b[i]);
    x += d * d / s;
    ++*df;
  }
  return x;
}

// Chi-square critical value at P = 0.001 (Wilson-Hilferty).
double chi2_crit(int df) {
  const double z = 3.0902, k = df;
  const double t = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * t * t * t;
}

// Histograms of output tokens 2 and 3 over many seeded runs of one prompt.
std::vector<std::vector<int64_t>> histograms(const RunResult& r, int V) {
  std::vector<std::vector<int64_t>> h(2, std::vector<int64_t>(V, 0));
  for (const auto& [k, f] : r.finished)
    for (int j = 1; j <= 2 && j < static_cast<int>(f.output.size()); ++j) ++h[j - 1][f.output[j]];
  return h;
}

std::vector<RequestParams> seeded_runs(int n, uint64_t seed0, const SamplingParams& sp,
                                      const std::vector<int32_t>& prompt = {5, 9, 5, 9, 5}) {
  std::vector<RequestParams> reqs;
  for (int s = 0; s < n; ++s) {
    RequestParams p;
    p.prompt = prompt;
    p.sampling = sp;
    p.sampling.seed = seed0 + static_cast<uint64_t>(s);
    p.max_tokens = 3;
    reqs.push_back(p);
  }
  return reqs;
}

// Speculative sampling with a draft model whose distribution differs from
// the target's: tokens 2 and 3 (drafted and verified by the rejection rule)
// have the plain distribution; the draft model's own samples do not (the
// test has the power to see a wrong rule).
// head > 0: the draft's head truncated to that many tokens (q = 0 off it).
// ngram_first > 0: n-gram lookup first and the draft for the rest, both in
// the same runs: the prompt is then 30 distinct tokens, so most sampled
// tokens are found in it and the lookup proposes what followed them.
void sampled_distribution(const SamplingParams& sp, int n, int head = 0, int ngram_first = 0) {
  std::vector<int32_t> prompt = {5, 9, 5, 9, 5};
  if (ngram_first > 0) {
    prompt.clear();
    for (int i = 0; i < 30; ++i) prompt.push_back(2 * i + 1);
  }
  auto target = load(kTinyQwen);
  auto full_draft = load(kTinyQwen3);
  ASSERT_TRUE(target && full_draft);
  std::unique_ptr<Model> draft = std::move(full_draft);
  if (head > 0) {
    auto v = make_draft_view(*draft, {}, head_subset(head));
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    full_draft = std::move(draft);
    draft = std::move(v.value());
  }
  const Model& own_model = head > 0 ? *full_draft : *draft;
  const int V = target->config().n_vocab;
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.num_kv_blocks = 4096;
  cfg.max_num_batched_tokens = 256;
  const RunResult plain = run(*target, pool, cfg, seeded_runs(n, 1, sp, prompt));
  const RunResult own = run(own_model, pool, cfg, seeded_runs(n, 1, sp, prompt));
  EngineConfig spec = cfg;
  spec.spec.num_speculative_tokens = 2;
  int64_t n_lookup = 0;
  const RunResult sp_run =
      run_draft(*target, *draft, pool, spec, seeded_runs(n, 500000, sp, prompt), 4096, ngram_first, &n_lookup);
  if (ngram_first > 0) {
    EXPECT_GT(n_lookup, n / 10);
  }
  ASSERT_EQ(sp_run.finished.size(), static_cast<size_t>(n));
  const double acc = sp_run.stats.spec.acceptance_rate();
  EXPECT_GT(acc, 0.02);
  EXPECT_LT(acc, 0.98);  // both branches of the rule are taken
  const auto hp = histograms(plain, V), hs = histograms(sp_run, V), hd = histograms(own, V);
  for (int j = 0; j < 2; ++j) {
    int df = 0;
    const double x = chi2_two_sample(hp[j], hs[j], &df);
    EXPECT_LT(x, chi2_crit(df)) << "token " << j + 2 << " df " << df;
    const double xd = chi2_two_sample(hp[j], hd[j], &df);
    EXPECT_GT(xd, chi2_crit(df)) << "draft's own distribution, token " << j + 2;
  }
}

TEST(DraftSpec, SampledMatchesPlainDistributionFull) { sampled_distribution(test::seeded(0), 3000); }

// The target's own stack with a truncated head as the draft, built by the
// engine: the draft's rows and K/V are handed to the verification
// (DraftProposer::before_verify), whose target distribution p must still be
// the plain one. (The draft's own q is the target's, truncated to 40 tokens
// and renormalized: rejections happen.)
TEST(DraftSpec, SampledMatchesPlainDistributionWholeStackHandover) {
  auto target = load(kTinyQwen);
  ASSERT_TRUE(target);
  auto draft = make_draft_view(*target, {}, head_subset(40));
  ASSERT_TRUE(draft.is_ok()) << draft.status().message();
  const SamplingParams sp = test::seeded(0);
  const int n = 3000, V = target->config().n_vocab;
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.num_kv_blocks = 4096;
  cfg.max_num_batched_tokens = 256;
  const RunResult plain = run(*target, pool, cfg, seeded_runs(n, 1, sp));
  EngineConfig spec = cfg;
  spec.spec.method = SpecMethod::kLayerSkip;
  spec.spec.draft_model = draft.value().get();
  spec.spec.num_speculative_tokens = 2;
  spec.spec.max_running = 0;
  int64_t handed = 0;
  const RunResult sp_run = run(*target, pool, spec, seeded_runs(n, 500000, sp), nullptr, [&](const Engine& e) {
    const auto* dp = dynamic_cast<const DraftProposer*>(e.proposer());
    ASSERT_NE(dp, nullptr);
    EXPECT_TRUE(dp->hands_over_rows());
    handed = dp->n_rows_handed();
  });
  EXPECT_GT(handed, n / 2);
  const double acc = sp_run.stats.spec.acceptance_rate();
  EXPECT_GT(acc, 0.02);
  EXPECT_LT(acc, 0.98);
  const auto hp = histograms(plain, V), hs = histograms(sp_run, V);
  for (int j = 0; j < 2; ++j) {
    int df = 0;
    const double x = chi2_two_sample(hp[j], hs[j], &df);
    EXPECT_LT(x, chi2_crit(df)) << "token " << j + 2 << " df " << df;
  }
}

TEST(DraftSpec, SampledMatchesPlainDistributionNgramFirst) { sampled_distribution(test::seeded(0), 3000, 0, 1); }

TEST(DraftSpec, SampledMatchesPlainDistributionTruncatedDraftHead) { sampled_distribution(test::seeded(0), 3000, 40); }

TEST(DraftSpec, SampledMatchesPlainDistributionTruncatedWithPenalties) {
  SamplingParams sp = test::seeded(0);
  sp.temperature = 0.8f;
  sp.top_k = 12;
  sp.top_p = 0.9f;
  sp.min_p = 0.02f;
  sp.repetition_penalty = 1.3f;
  sp.presence_penalty = 0.5f;
  sampled_distribution(sp, 3000);
}

// distribution() is what sample() draws from: over many seeds the sampled
// tokens follow it (chi-square), and never fall outside its support.
TEST(DraftSpec, SamplerDistributionIsTheLawOfSample) {
  const int V = 50;
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> logits(V);
  for (float& l : logits) l = nd(rng);
  std::vector<SamplingParams> sets(3, test::seeded(0));
  sets[1].top_k = 10;
  sets[1].min_p = 0.05f;
  sets[2].top_p = 0.8f;
  sets[2].temperature = 0.7f;
  sets[2].frequency_penalty = 0.4f;
  for (const SamplingParams& base : sets) {
    const int N = 20000;
    std::vector<float> p(V);
    std::vector<int64_t> counts(V, 0);
    for (int s = 0; s < N; ++s) {
      SamplingParams sp = base;
      sp.seed = 100 + s;
      Sampler smp(sp);
      smp.accept(3);
      smp.accept(3);
      std::vector<float> l = logits;
      if (s == 0) {
        std::vector<float> l2 = logits;
        smp.distribution(l2.data(), V, p.data());
      }
      ++counts[smp.sample(l.data(), V)];
    }
    double x = 0, total = 0;
    int df = -1;
    for (int j = 0; j < V; ++j) {
      total += p[j];
      if (p[j] == 0) {
        EXPECT_EQ(counts[j], 0) << j;
        continue;
      }
      const double e = p[j] * N;
      x += (counts[j] - e) * (counts[j] - e) / e;
      ++df;
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
    EXPECT_LT(x, chi2_crit(df));
  }
  SamplingParams g = test::greedy();
  Sampler smp(g);
  std::vector<float> p(V), l = logits;
  smp.distribution(l.data(), V, p.data());
  EXPECT_EQ(p[argmax(logits.data(), V)], 1.f);
}

TEST(AdaptiveK, ChoiceFollowsAcceptanceAndCost) {
  EXPECT_EQ(spec_choose_k(0.0, 8, 0.0, 0.05), 0);   // nothing is ever accepted
  EXPECT_EQ(spec_choose_k(0.95, 8, 0.0, 0.0), 8);   // free drafts, high acceptance: all of them
  EXPECT_EQ(spec_choose_k(0.9, 8, 2.0, 0.05), 0);   // a draft step dearer than a target step
  const int mid = spec_choose_k(0.6, 8, 0.1, 0.05);
  EXPECT_GT(mid, 0);
  EXPECT_LT(mid, 8);
  EXPECT_LE(spec_choose_k(0.5, 8, 0.1, 0.05), spec_choose_k(0.8, 8, 0.1, 0.05));
  // Rejections drive k to 0; steps without drafts bring it back.
  SpecAcceptance a;
  EXPECT_GT(spec_choose_k(spec_alpha(a), 4, 0.2, 0.05), 0);  // the prior tries
  for (int i = 0; i < 10; ++i) spec_observe(&a, 4, 0);
  EXPECT_EQ(spec_choose_k(spec_alpha(a), 4, 0.2, 0.05), 0);
  int idle = 0;
  while (spec_choose_k(spec_alpha(a), 4, 0.2, 0.05) == 0 && idle < 100) {
    spec_idle(&a);
    ++idle;
  }
  EXPECT_GT(idle, 2);
  EXPECT_LT(idle, 100);
}

// Adaptive k in the engine: outputs stay identical; on drafts that are
// never right (another model as the draft) it drafts far less than fixed k.
// The measured verification cost: steps of t = a + b n seconds give
// c_verify = b / (a + b); before two sizes were seen, the fallback.
TEST(AdaptiveK, StepCostFitsTheVerificationCost) {
  SpecStepCost c;
  EXPECT_EQ(c.verify_cost(0.05), 0.05);
  EXPECT_EQ(c.one_token_seconds(), 0.0);
  for (int i = 0; i < 20; ++i) c.observe(1, 0.010);
  EXPECT_EQ(c.verify_cost(0.05), 0.05);  // one size only
  EXPECT_NEAR(c.one_token_seconds(), 0.010, 1e-12);
  for (int i = 0; i < 40; ++i) {
    const int n = 1 + i % 5;
    c.observe(n, 0.008 + 0.002 * n);  // a = 8 ms, b = 2 ms: c_verify 0.2
  }
  EXPECT_NEAR(c.verify_cost(0.05), 0.2, 1e-6);
  EXPECT_NEAR(c.one_token_seconds(), 0.010, 1e-9);
  SpecStepCost busy;  // compute-bound: every position costs a full step
  for (int i = 0; i < 30; ++i) busy.observe(1 + i % 4, 0.01 * (1 + i % 4));
  EXPECT_NEAR(busy.verify_cost(0.05), 1.0, 1e-6);
  EXPECT_EQ(spec_choose_k(0.7, 8, 0.0, busy.verify_cost(0.05)), 0);  // then speculation does not pay
}

TEST(AdaptiveK, EngineStaysExactAndBacksOff) {
  auto t = load(kTinyQwen);
  auto d = load(kTinyQwen3);
  ASSERT_TRUE(t && d);
  ThreadPool pool(2);
  EngineConfig base;
  base.num_kv_blocks = 512;
  base.block_size = 8;
  std::vector<RequestParams> reqs = workload(8, t->config().n_vocab, 21);
  for (RequestParams& p : reqs) {
    p.sampling = test::greedy();
    p.n = 1;
    p.max_tokens = 40;
    p.stop_token_ids.clear();
  }
  const RunResult want = solo_reference(*t, pool, base, reqs);
  EngineConfig fixed = base;
  fixed.spec.num_speculative_tokens = 4;
  fixed.spec.draft_cost = 0.3;
  const RunResult f = run_draft(*t, *d, pool, fixed, reqs, 512);
  EngineConfig ad = fixed;
  ad.spec.adaptive = true;
  const RunResult a = run_draft(*t, *d, pool, ad, reqs, 512);
  expect_same(want, f, "fixed k");
  expect_same(want, a, "adaptive k");
  EXPECT_LT(f.stats.spec.acceptance_rate(), 0.5);
  EXPECT_LT(a.stats.spec.n_draft_tokens * 2, f.stats.spec.n_draft_tokens);
  EXPECT_GT(a.stats.spec.n_draft_tokens, 0);  // it keeps probing
}

// A stateful logits processor (a grammar stand-in): after the i-th
// generated token only ids = i mod 3 (mod 3) are allowed; its state moves
// with accept() only. Speculation must advance it per accepted token and
// never show it a rejected one.
class ModThreeProcessor final : public LogitsProcessor {
 public:
  void process(const int32_t*, int64_t, int64_t, float* logits, int n_vocab) override {
    for (int j = 0; j < n_vocab; ++j)
      if (j % 3 != n_ % 3) logits[j] = -INFINITY;
  }
  void accept(int32_t t) override {
    EXPECT_EQ(t % 3, n_ % 3);  // only tokens it allowed are ever accepted
    ++n_;
  }
  std::unique_ptr<LogitsProcessor> clone() const override { return std::make_unique<ModThreeProcessor>(*this); }

 private:
  int n_ = 0;
};

TEST(DraftSpec, LogitsProcessorRequestsStayExact) {
  auto m = load(kTinyGemma);
  ASSERT_TRUE(m);
  ThreadPool pool(2);
  EngineConfig base;
  base.num_kv_blocks = 512;
  base.block_size = 8;
  std::vector<RequestParams> reqs = workload(12, m->config().n_vocab, 31);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].logits_processor = std::make_shared<ModThreeProcessor>();
    reqs[i].n = 1;
    reqs[i].sampling = test::greedy();
  }
  const RunResult want = solo_reference(*m, pool, base, reqs);
  EngineConfig spec = base;
  spec.spec.num_speculative_tokens = 4;
  RunResult got = run_draft(*m, *m, pool, spec, reqs, 512);  // drafts ignore the processor: many rejected
  expect_same(want, got, "draft model + logits processor");
  EXPECT_GT(got.stats.spec.n_draft_tokens, 0);
  EXPECT_LT(got.stats.spec.n_accepted_tokens, got.stats.spec.n_draft_tokens);
  spec.spec.method = SpecMethod::kNgram;
  got = run(*m, pool, spec, reqs);
  expect_same(want, got, "ngram + logits processor");
}

TEST(DraftSpec, VocabularyMismatchIsAClearError) {
  Metadata a, b;
  a.set("tokenizer.ggml.tokens", Metadata::make_string_array({"<s>", "a", "b", "c"}));
  b.set("tokenizer.ggml.tokens", Metadata::make_string_array({"<s>", "a", "x", "c"}));
  EXPECT_TRUE(check_same_vocabulary(a, 4, a, 4).is_ok());
  Status st = check_same_vocabulary(a, 4, b, 4);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("token 2"), std::string::npos) << st.message();
  st = check_same_vocabulary(a, 4, a, 5);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("tokenizers must match"), std::string::npos) << st.message();
  Metadata c;
  EXPECT_FALSE(check_same_vocabulary(a, 4, c, 4).is_ok());
  Metadata d = a;
  d.set("tokenizer.ggml.eos_token_id", Metadata::make_int(1));
  Metadata e = a;
  e.set("tokenizer.ggml.eos_token_id", Metadata::make_int(2));
  EXPECT_FALSE(check_same_vocabulary(d, 4, e, 4).is_ok());

  // The engine: a draft method without a draft model.
  auto m = load(kTinyQwen);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  EngineConfig cfg;
  cfg.spec.method = SpecMethod::kDraft;
  cfg.spec.num_speculative_tokens = 2;
  auto eng = Engine::create(*m, pool, cfg);
  ASSERT_FALSE(eng.is_ok());
  EXPECT_NE(eng.status().message().find("needs a draft model"), std::string::npos);
  cfg.spec.draft_model = m.get();
  EXPECT_TRUE(Engine::create(*m, pool, cfg).is_ok());
}

}  // namespace
}  // namespace ember
