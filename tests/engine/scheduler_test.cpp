// Scheduler, KV manager and engine loop without a model file: the
// FakeModelRunner checks every KV row it reads (right page, right token,
// right position, never a released page) and its logits are a function of
// the token history alone, so a correct engine's outputs equal a plain
// reference loop over FakeModelRunner::reference_logits — whatever the
// batching, chunking, prefix hits, forks, preemptions, swaps, sliding-window
// releases and aborts. Also: the scheduling policy (budget, caps, priority,
// running-first, preemption order) and that the fake really catches paging
// mistakes.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine/engine.h"
#include "engine/fake_model_runner.h"
#include "engine/speculative_test_util.h"
#include "engine/test_sampling.h"

namespace ember {
namespace {

using test::greedy;
using test::seeded;

std::unique_ptr<Engine> fake_engine(const FakeModelConfig& mc, const EngineConfig& cfg) {
  auto e = Engine::create(std::make_unique<FakeModelRunner>(mc), cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e.value()) : nullptr;
}

// What one sample must produce: the plain loop over the reference logits.
std::vector<int32_t> reference_output(const FakeModelConfig& mc, const RequestParams& p, int sample,
                                      int64_t max_seq_len) {
  SamplingParams sp = p.sampling;
  sp.seed += static_cast<uint64_t>(sample);
  Sampler s(sp);
  std::vector<int32_t> toks = p.prompt;
  for (int32_t t : toks) s.accept(t);
  std::vector<float> lg(mc.n_vocab);
  std::vector<int32_t> out;
  for (;;) {
    FakeModelRunner::reference_logits(mc, toks.data(), static_cast<int64_t>(toks.size()) - 1, lg.data());
    const int32_t t = s.sample(lg.data(), mc.n_vocab);
    s.accept(t);
    toks.push_back(t);
    out.push_back(t);
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end()) break;
    if (static_cast<int>(out.size()) >= p.max_tokens || static_cast<int64_t>(toks.size()) >= max_seq_len) break;
  }
  return out;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int len, int vocab) {
  std::vector<int32_t> p(len);
  for (auto& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

struct StressCase {
  FakeModelConfig model;
  EngineConfig cfg;
  int n_requests = 300;
  uint32_t seed = 1;
  int spec_k = 0;  // > 0: speculative decoding with a ReplayProposer of up to spec_k drafts
};

struct StressResult {
  EngineStats stats;
  int n_checked = 0;
};

// Random arrivals (shared prefixes, n > 1, priorities, stop tokens, prompt
// logprobs), random aborts and stop_sample calls, invariants after every
// step, every finished sample compared with its reference.
StressResult stress(const StressCase& c) {
  StressResult res;
  EngineConfig cfg = c.cfg;
  if (c.spec_k > 0) {
    cfg.spec.method = SpecMethod::kNgram;  // replaced by the replay proposer below
    cfg.spec.num_speculative_tokens = c.spec_k;
  }
  auto e = fake_engine(c.model, cfg);
  if (!e) return res;
  if (c.spec_k > 0) {
    const FakeModelConfig mc = c.model;
    const int64_t max_len = e->max_seq_len();
    e->set_proposer(std::make_unique<test::ReplayProposer>(
        [mc, max_len](const Request& r) {
          RequestParams p;
          p.prompt.assign(r.tokens.begin(), r.tokens.begin() + r.n_prompt);
          p.sampling = r.sampling;  // a fork's seed is already seed + index
          p.max_tokens = r.max_tokens;
          p.stop_token_ids = r.stop_token_ids;
          return reference_output(mc, p, 0, max_len);
        },
        c.model.n_vocab, c.seed + 99));
  }
  std::mt19937 rng(c.seed);
  const int V = c.model.n_vocab;
  std::map<std::string, RequestParams> reqs;
  std::map<std::string, FinishedRequest> done;
  std::map<std::string, std::vector<int32_t>> streamed;
  std::set<std::string> cut;  // aborted or stopped early
  int next = 0;
  for (int step = 0; next < c.n_requests || e->has_unfinished(); ++step) {
    EXPECT_LT(step, 200000);
    if (step >= 200000) break;
    if (next < c.n_requests && rng() % 2 == 0) {
      RequestParams p;
      p.prompt = random_tokens(rng, 1 + static_cast<int>(rng() % 50), V);
      if (rng() % 2 && !reqs.empty()) {
        const auto& other = std::next(reqs.begin(), static_cast<long>(rng() % reqs.size()))->second.prompt;
        p.prompt.insert(p.prompt.begin(), other.begin(), other.begin() + static_cast<long>(other.size() * 3 / 4));
        if (p.prompt.size() > 90) p.prompt.resize(90);
      }
      p.sampling = rng() % 2 ? greedy() : seeded(rng());
      if (rng() % 4 == 0) p.sampling.repetition_penalty = 1.3f;
      p.max_tokens = 1 + static_cast<int>(rng() % 24);
      p.priority = static_cast<int>(rng() % 3);
      p.logprobs = true;
      p.n = 1 + static_cast<int>(rng() % 3);
      if (rng() % 5 == 0) p.stop_token_ids = {static_cast<int32_t>(rng() % V)};
      if (rng() % 7 == 0) p.prompt_logprobs = 1;
      const std::string id = "r" + std::to_string(next++);
      const Status st = e->add_request(id, p);
      EXPECT_TRUE(st.is_ok()) << st.message();
      reqs[id] = p;
    }
    if (rng() % 23 == 0 && next > 0) {
      const std::string id = "r" + std::to_string(rng() % next);
      if (e->abort(id)) cut.insert(id);
    }
    if (rng() % 29 == 0 && next > 0) {
      const std::string id = "r" + std::to_string(rng() % next);
      const int k = static_cast<int>(rng() % 3);
      if (e->stop_sample(id, k)) cut.insert(id + "/" + std::to_string(k));
    }
    auto out = e->step();
    EXPECT_TRUE(out.is_ok()) << "step " << step << ": " << out.status().message();
    if (!out.is_ok()) break;
    EXPECT_LE(out->n_batched_tokens, c.cfg.max_num_batched_tokens);
    for (const TokenEvent& t : out->tokens) streamed[t.id + "/" + std::to_string(t.index)].push_back(t.token);
    for (FinishedRequest& f : out->finished) done[f.id + "/" + std::to_string(f.index)] = f;
    const Status inv = e->check_invariants();
    EXPECT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.message();
    if (!inv.is_ok()) break;
  }
  res.stats = e->stats();
  if (c.spec_k > 0) {  // every verification case happened
    const SpecCounters& sc = res.stats.spec;
    EXPECT_GT(sc.n_verifications, 100);
    EXPECT_GT(sc.accepted_hist[0], 0);
    EXPECT_GT(sc.accepted_hist[static_cast<size_t>(c.spec_k)], 0);
    EXPECT_GT(sc.n_accepted_tokens, 0);
    EXPECT_LT(sc.n_accepted_tokens, sc.n_draft_tokens);
  }
  EXPECT_EQ(res.stats.blocks_used, 0);
  EXPECT_EQ(res.stats.blocks_free, res.stats.blocks_total);
  EXPECT_EQ(res.stats.swap_bytes_used, 0);
  for (auto& [key, f] : done) {
    const std::string id = f.id;
    EXPECT_EQ(streamed[key], f.output) << key;  // nothing streamed twice or lost (preemptions)
    if (f.reason == FinishReason::kAbort || cut.count(id) || cut.count(key)) continue;
    const RequestParams& p = reqs[id];
    EXPECT_EQ(f.output, reference_output(c.model, p, f.index, e->max_seq_len())) << key;
    ++res.n_checked;
  }
  return res;
}

TEST(FakeEngine, StressMatchesReferencePlainCache) {
  StressCase c;
  c.cfg.block_size = 4;
  c.cfg.num_kv_blocks = 48;
  c.cfg.max_num_batched_tokens = 20;
  c.cfg.max_num_seqs = 6;
  const StressResult r = stress(c);
  EXPECT_GT(r.n_checked, 300);
  EXPECT_GT(r.stats.n_preemptions, 0);
  EXPECT_GT(r.stats.prefix.hits, 0);
  EXPECT_GT(r.stats.n_cow_copies, 0);
}

TEST(FakeEngine, StressMatchesReferenceSlidingWindowsAndSwap) {
  StressCase c;
  c.model.windows = {0, 6, 6, 0, 6, 6};  // two global layers, four sliding: 3 groups of 2
  c.cfg.block_size = 4;
  c.cfg.num_kv_blocks = 90;
  c.cfg.max_num_batched_tokens = 24;
  c.cfg.max_num_seqs = 8;
  c.cfg.preempt_swap = true;
  c.cfg.swap_space_bytes = size_t{1} << 20;
  c.seed = 7;
  auto e = fake_engine(c.model, c.cfg);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->n_kv_groups(), 3);
  const StressResult r = stress(c);
  EXPECT_GT(r.n_checked, 300);
  EXPECT_GT(r.stats.n_swap_outs, 0);
  EXPECT_GT(r.stats.n_swap_ins, 0);
  EXPECT_GT(r.stats.prefix.hits, 0);
}

TEST(FakeEngine, StressMatchesReferenceWithoutPrefixCacheOrWindowRelease) {
  StressCase c;
  c.model.windows = {5, 0, 5};
  c.cfg.block_size = 3;
  c.cfg.num_kv_blocks = 60;
  c.cfg.max_num_batched_tokens = 17;
  c.cfg.max_num_seqs = 5;
  c.cfg.enable_prefix_caching = false;
  c.cfg.sliding_window_release = false;
  c.seed = 11;
  const StressResult r = stress(c);
  EXPECT_GT(r.n_checked, 300);
  EXPECT_EQ(r.stats.prefix.hits, 0);
  EXPECT_GT(r.stats.n_preemptions, 0);
}

// Request-level batching (dynamic, static) under the same random traffic,
// preemption and swap included: every output still equals its reference.
TEST(FakeEngine, StressMatchesReferenceUnderRequestLevelBatching) {
  for (BatchingPolicy policy : {BatchingPolicy::kDynamic, BatchingPolicy::kStatic}) {
    StressCase c;
    c.cfg.block_size = 4;
    c.cfg.num_kv_blocks = 40;
    c.cfg.max_num_batched_tokens = 20;
    c.cfg.max_num_seqs = 6;
    c.cfg.preempt_swap = policy == BatchingPolicy::kStatic;
    c.cfg.batching = policy;
    c.cfg.batch_window_s = 0.0005;
    c.n_requests = 120;
    c.seed = 5;
    const StressResult r = stress(c);
    EXPECT_GT(r.n_checked, 120) << batching_policy_name(policy);
    EXPECT_GT(r.stats.n_preemptions, 0) << batching_policy_name(policy);
  }
}

// Request-level batching with speculative decoding: drafts verified inside
// the fixed batch.
TEST(FakeEngine, StressSpeculativeUnderDynamicBatching) {
  StressCase c;
  c.cfg.block_size = 4;
  c.cfg.num_kv_blocks = 48;
  c.cfg.max_num_batched_tokens = 20;
  c.cfg.max_num_seqs = 6;
  c.cfg.batching = BatchingPolicy::kDynamic;
  c.cfg.batch_window_s = 0.0005;
  c.n_requests = 120;
  c.spec_k = 4;
  const StressResult r = stress(c);
  EXPECT_GT(r.n_checked, 120);
}

// The same stress with speculative decoding: drafts (right, wrong, short)
// verified in the mixed batch, rejected slots rolled back, under
// preemption (recompute and swap), prefix hits, forks, sliding windows,
// aborts and stop_sample: every output still equals the plain reference.
TEST(FakeEngine, StressSpeculativeMatchesReference) {
  StressCase c;
  c.cfg.block_size = 4;
  c.cfg.num_kv_blocks = 48;
  c.cfg.max_num_batched_tokens = 20;
  c.cfg.max_num_seqs = 6;
  c.spec_k = 5;
  const StressResult r = stress(c);
  EXPECT_GT(r.n_checked, 300);
  EXPECT_GT(r.stats.n_preemptions, 0);
  EXPECT_GT(r.stats.prefix.hits, 0);
}

TEST(FakeEngine, StressSpeculativeSlidingWindowsAndSwap) {
  StressCase c;
  c.model.windows = {0, 6, 6, 0, 6, 6};
  c.cfg.block_size = 4;
  c.cfg.num_kv_blocks = 90;
  c.cfg.max_num_batched_tokens = 24;
  c.cfg.max_num_seqs = 8;
  c.cfg.preempt_swap = true;
  c.cfg.swap_space_bytes = size_t{1} << 20;
  c.seed = 7;
  c.spec_k = 3;
  const StressResult r = stress(c);
  EXPECT_GT(r.n_checked, 300);
  EXPECT_GT(r.stats.n_swap_outs, 0);
  EXPECT_GT(r.stats.prefix.hits, 0);
}

// The same requests give the same outputs whatever the budget, block size
// and memory (batch invariance of the engine loop itself).
TEST(FakeEngine, OutputsIndependentOfBatchingAndMemory) {
  FakeModelConfig mc;
  mc.windows = {0, 8};
  std::mt19937 rng(3);
  std::vector<RequestParams> reqs;
  for (int i = 0; i < 12; ++i) {
    RequestParams p;
    p.prompt = random_tokens(rng, 5 + static_cast<int>(rng() % 40), mc.n_vocab);
    p.sampling = i % 2 ? greedy() : seeded(100 + i);
    p.max_tokens = 20;
    p.n = 1 + i % 2;
    reqs.push_back(p);
  }
  std::map<std::string, std::vector<int32_t>> first;
  for (int variant = 0; variant < 4; ++variant) {
    EngineConfig cfg;
    cfg.block_size = variant % 2 ? 4 : 16;
    cfg.num_kv_blocks = variant < 2 ? 1000 : 40;
    cfg.max_num_batched_tokens = variant == 1 ? 7 : 64;
    auto e = fake_engine(mc, cfg);
    ASSERT_TRUE(e);
    for (size_t i = 0; i < reqs.size(); ++i) ASSERT_TRUE(e->add_request(std::to_string(i), reqs[i]).is_ok());
    std::map<std::string, std::vector<int32_t>> got;
    while (e->has_unfinished()) {
      auto out = e->step();
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      for (auto& f : out->finished) got[f.id + "/" + std::to_string(f.index)] = f.output;
    }
    if (variant == 0) first = got;
    else EXPECT_EQ(got, first) << "variant " << variant;
  }
}

// Aborting a request while its pages are in swap space gives the space back
// (it used to stay counted, and the accounting check failed).
TEST(FakeEngine, AbortWhileSwappedOutFreesSwapSpace) {
  FakeModelConfig mc;
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 12;
  cfg.max_num_batched_tokens = 64;
  cfg.preempt_swap = true;
  cfg.swap_space_bytes = size_t{1} << 20;
  auto e = fake_engine(mc, cfg);
  ASSERT_TRUE(e);
  std::mt19937 rng(9);
  for (int i = 0; i < 3; ++i) {
    RequestParams p;
    p.prompt = random_tokens(rng, 10, mc.n_vocab);
    p.sampling = greedy();
    p.max_tokens = 30;
    p.priority = i;  // request 2 is the one preempted first
    ASSERT_TRUE(e->add_request(std::to_string(i), p).is_ok());
  }
  bool aborted = false;
  for (int step = 0; step < 200 && e->has_unfinished(); ++step) {
    ASSERT_TRUE(e->step().is_ok());
    const EngineStats st = e->stats();
    if (!aborted && st.n_swapped > 0) {
      ASSERT_GT(st.swap_bytes_used, 0);
      EXPECT_TRUE(e->abort("2"));
      aborted = true;
      EXPECT_EQ(e->stats().swap_bytes_used, 0);
    }
    ASSERT_TRUE(e->check_invariants().is_ok()) << e->check_invariants().message();
  }
  EXPECT_TRUE(aborted);
  EXPECT_EQ(e->stats().swap_bytes_used, 0);
}

// ---- the scheduling policy, on the Scheduler and KvCacheManager directly ----

struct Bench {
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Request>> reqs;
  Bench(int block_size, int32_t n_blocks, SchedulerConfig sc)
      : kv(KvLayout::from_spec(KvSpec{{{0, 2, 2}}, {}}, true), block_size, n_blocks, true, 0), sched(sc, kv) {}
  Request* add(int n_prompt, int priority = 0, int first_token = 0) {
    auto r = std::make_unique<Request>();
    r->seq_id = reqs.size() + 1;
    r->id = "q" + std::to_string(reqs.size());
    r->priority = priority;
    r->arrival = reqs.size();
    for (int i = 0; i < n_prompt; ++i) r->tokens.push_back(first_token + i);
    r->n_prompt = n_prompt;
    r->max_tokens = 100;
    kv.add(*r);
    sched.add_waiting(r.get());
    reqs.push_back(std::move(r));
    return reqs.back().get();
  }
  // Completes a step as the engine would: computed, and one new token for
  // every request that reached its end.
  void complete(const SchedulerOutput& so) {
    for (const ScheduledRequest& sr : so.scheduled) {
      sched.on_computed(sr);
      if (sr.want_logits) sr.req->tokens.push_back(7);
    }
  }
};

TEST(Scheduler, RunningFirstThenWaitingWithinBudget) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 10;
  sc.max_num_seqs = 4;
  Bench b(4, 100, sc);
  Request* a = b.add(25);
  SchedulerOutput s1 = b.sched.schedule();
  ASSERT_EQ(s1.scheduled.size(), 1u);
  EXPECT_EQ(s1.scheduled[0].n_tokens, 10);  // chunked prefill: the budget
  EXPECT_FALSE(s1.scheduled[0].want_logits);
  b.complete(s1);
  Request* c = b.add(3);
  SchedulerOutput s2 = b.sched.schedule();
  ASSERT_EQ(s2.scheduled.size(), 1u);  // the running prompt takes the whole budget first
  EXPECT_EQ(s2.scheduled[0].req, a);
  b.complete(s2);
  SchedulerOutput s3 = b.sched.schedule();
  ASSERT_EQ(s3.scheduled.size(), 2u);
  EXPECT_EQ(s3.scheduled[0].req, a);
  EXPECT_EQ(s3.scheduled[0].n_tokens, 5);
  EXPECT_TRUE(s3.scheduled[0].want_logits);
  EXPECT_EQ(s3.scheduled[1].req, c);
  EXPECT_EQ(s3.scheduled[1].n_tokens, 3);
  EXPECT_EQ(s3.n_tokens, 8);
  EXPECT_EQ(s3.n_logit_rows, 2);
  b.complete(s3);
  SchedulerOutput s4 = b.sched.schedule();  // two decodes
  ASSERT_EQ(s4.scheduled.size(), 2u);
  EXPECT_EQ(s4.scheduled[0].n_tokens + s4.scheduled[1].n_tokens, 2);
  EXPECT_TRUE(b.kv.check({a, c}).is_ok());
}

// A verification slice: last token + drafts in lookahead slots, trimmed to
// the budget; drafts whose slots do not fit are dropped instead of
// preempting anyone; on_verified gives back the rejected slots.
TEST(Scheduler, SpeculativeSlicesTrimDropAndRollBack) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 9;
  Bench b(4, 5, sc);
  Request* a = b.add(5);
  Request* c = b.add(3);
  b.complete(b.sched.schedule());  // both prompts; each has its first token
  ASSERT_EQ(a->num_tokens(), 6);
  a->spec_tokens = {1, 2, 3, 4, 5, 6, 7};
  c->spec_tokens = {9, 9, 9};
  SchedulerOutput s = b.sched.schedule();
  ASSERT_EQ(s.scheduled.size(), 2u);
  EXPECT_EQ(s.scheduled[0].n_spec, 7);
  EXPECT_EQ(s.scheduled[0].n_tokens, 8);
  EXPECT_TRUE(s.scheduled[0].want_logits);
  EXPECT_EQ(s.scheduled[1].n_spec, 0);  // one token of budget left: c's drafts are dropped
  EXPECT_EQ(s.scheduled[1].n_tokens, 1);
  EXPECT_TRUE(c->spec_tokens.empty());
  EXPECT_EQ(s.n_logit_rows, 8 + 1);
  EXPECT_EQ(b.kv.capacity(*a), 16);  // positions 0 .. 12 in 4 blocks (lookahead slots)
  // Verified: two drafts accepted + the target's token: 3 tokens appended.
  b.sched.on_computed(s.scheduled[0]);
  EXPECT_EQ(a->num_computed_tokens, 13);
  for (int t : {1, 2, 8}) a->tokens.push_back(t);
  b.sched.on_verified(s.scheduled[0]);
  EXPECT_EQ(a->num_computed_tokens, 8);
  EXPECT_EQ(b.kv.capacity(*a), 8);  // the blocks of rejected positions went back
  EXPECT_TRUE(a->spec_tokens.empty());
  b.sched.on_computed(s.scheduled[1]);
  c->tokens.push_back(7);
  EXPECT_TRUE(b.kv.check({a, c}).is_ok());
  // a holds 2 of the 5 pages, c 1: 8 drafts would need 3 more pages, and c
  // one: the drafts are dropped rather than preempting c.
  a->spec_tokens = std::vector<int32_t>(8, 3);
  SchedulerOutput s2 = b.sched.schedule();
  EXPECT_EQ(s2.n_preempted, 0);
  ASSERT_EQ(s2.scheduled.size(), 2u);
  EXPECT_EQ(s2.scheduled[0].n_tokens, 1);
  EXPECT_EQ(s2.scheduled[0].n_spec, 0);
  EXPECT_EQ(s2.scheduled[1].n_tokens, 1);
  b.complete(s2);
  EXPECT_TRUE(b.kv.check({a, c}).is_ok());
}

TEST(Scheduler, PriorityAndSequenceCap) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 100;
  sc.max_num_seqs = 2;
  Bench b(4, 100, sc);
  b.add(5, 1);
  Request* hi = b.add(5, 0);
  Request* hi2 = b.add(5, 0);
  SchedulerOutput s = b.sched.schedule();
  ASSERT_EQ(s.scheduled.size(), 2u);  // the cap
  EXPECT_EQ(s.scheduled[0].req, hi);  // lower priority value first, FCFS within
  EXPECT_EQ(s.scheduled[1].req, hi2);
  EXPECT_EQ(b.sched.waiting().size(), 1u);
}

TEST(Scheduler, PreemptsNewestLowestPriorityAndAdmitsNothingThatStep) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 64;
  sc.max_num_seqs = 8;
  Bench b(4, 6, sc);  // 24 positions
  Request* a = b.add(8, 0, 0);
  Request* c = b.add(8, 1, 100);
  SchedulerOutput s1 = b.sched.schedule();
  ASSERT_EQ(s1.scheduled.size(), 2u);  // 4 blocks used
  b.complete(s1);
  b.add(4, 0, 200);
  // Decodes need new blocks (positions 8): a gets one, c another -> 6; the
  // waiting request does not fit and is not admitted.
  SchedulerOutput s2 = b.sched.schedule();
  b.complete(s2);
  EXPECT_EQ(s2.n_preempted, 0);
  // Keep decoding until the pool runs out: c (priority 1) is preempted, a keeps running.
  int preempted = 0;
  for (int i = 0; i < 8 && !preempted; ++i) {
    SchedulerOutput s = b.sched.schedule();
    preempted += s.n_preempted;
    if (s.n_preempted) {
      for (const ScheduledRequest& sr : s.scheduled) EXPECT_NE(sr.req, c);
      EXPECT_FALSE(c->running());
      EXPECT_EQ(c->num_computed_tokens, 0);  // recomputed later
      EXPECT_EQ(c->n_preemptions, 1);
      EXPECT_FALSE(b.kv.holds_blocks(*c));
      EXPECT_TRUE(a->running());
    }
    b.complete(s);
  }
  EXPECT_EQ(preempted, 1);
}

// Dynamic batching: a batch starts when full or when its oldest request has
// waited the window, and admits no one else until every member finished.
TEST(Scheduler, DynamicBatchingWaitsForAFullBatchOrTheWindow) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 64;
  sc.max_num_seqs = 3;
  sc.policy = BatchingPolicy::kDynamic;
  sc.batch_window_s = 0.1;
  Bench b(4, 100, sc);
  Request* a = b.add(5);
  Request* c = b.add(5);
  a->t_arrival = 10.0;
  c->t_arrival = 10.02;
  EXPECT_TRUE(b.sched.schedule_at(10.05).empty());  // neither full nor the window
  EXPECT_NEAR(b.sched.seconds_until_admission(10.05), 0.05, 1e-9);
  SchedulerOutput s1 = b.sched.schedule_at(10.11);  // the oldest waited the window
  ASSERT_EQ(s1.scheduled.size(), 2u);
  b.complete(s1);
  Request* late = b.add(5);
  late->t_arrival = 10.1;
  for (int i = 0; i < 3; ++i) {  // the batch runs without the newcomer, though a slot is free
    SchedulerOutput s = b.sched.schedule_at(10.5 + i);
    ASSERT_EQ(s.scheduled.size(), 2u);
    for (const ScheduledRequest& sr : s.scheduled) EXPECT_NE(sr.req, late);
    EXPECT_TRUE(std::isinf(b.sched.seconds_until_admission(10.5 + i)));
    b.complete(s);
  }
  // a finishes; c still runs: still closed.
  b.sched.remove(a);
  b.kv.free_blocks(*a);
  SchedulerOutput s2 = b.sched.schedule_at(20);
  ASSERT_EQ(s2.scheduled.size(), 1u);
  EXPECT_EQ(s2.scheduled[0].req, c);
  b.complete(s2);
  b.sched.remove(c);
  b.kv.free_blocks(*c);
  // The batch is over: the newcomer waited long enough, a new batch starts.
  EXPECT_EQ(b.sched.seconds_until_admission(20), 0);
  SchedulerOutput s3 = b.sched.schedule_at(20);
  ASSERT_EQ(s3.scheduled.size(), 1u);
  EXPECT_EQ(s3.scheduled[0].req, late);
}

TEST(Scheduler, DynamicBatchStartsWhenFullAndKeepsItsMembersAcrossChunks) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 8;  // one prompt per step: members join over several steps
  sc.max_num_seqs = 3;
  sc.policy = BatchingPolicy::kDynamic;
  sc.batch_window_s = 1000;
  Bench b(4, 100, sc);
  std::vector<Request*> members;
  for (int i = 0; i < 3; ++i) members.push_back(b.add(8, 0, 10 * i));
  Request* outsider = b.add(8, 0, 100);
  for (Request* r : members) r->t_arrival = 0;
  outsider->t_arrival = 0;
  std::set<Request*> seen;
  for (int step = 0; step < 6; ++step) {
    SchedulerOutput s = b.sched.schedule_at(1.0);  // full at once: no wait for the window
    ASSERT_FALSE(s.scheduled.empty());
    for (const ScheduledRequest& sr : s.scheduled) {
      EXPECT_NE(sr.req, outsider);
      seen.insert(sr.req);
    }
    b.complete(s);
  }
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_FALSE(outsider->running());
}

TEST(Scheduler, StaticBatchingTakesWhatWaitsAndRunsItToCompletion) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 64;
  sc.max_num_seqs = 4;
  sc.policy = BatchingPolicy::kStatic;
  Bench b(4, 100, sc);
  Request* a = b.add(5);
  SchedulerOutput s1 = b.sched.schedule_at(0);  // no waiting for company
  ASSERT_EQ(s1.scheduled.size(), 1u);
  b.complete(s1);
  Request* c = b.add(5, 0, 50);
  Request* d = b.add(5, 0, 60);
  SchedulerOutput s2 = b.sched.schedule_at(1);
  ASSERT_EQ(s2.scheduled.size(), 1u);
  EXPECT_EQ(s2.scheduled[0].req, a);
  b.complete(s2);
  b.sched.remove(a);
  b.kv.free_blocks(*a);
  SchedulerOutput s3 = b.sched.schedule_at(2);
  ASSERT_EQ(s3.scheduled.size(), 2u);
  EXPECT_EQ(s3.scheduled[0].req, c);
  EXPECT_EQ(s3.scheduled[1].req, d);
  // Continuous batching would have taken them at once.
  SchedulerConfig cc = sc;
  cc.policy = BatchingPolicy::kContinuous;
  Bench bc(4, 100, cc);
  bc.add(5);
  bc.complete(bc.sched.schedule_at(0));
  bc.add(5, 0, 50);
  EXPECT_EQ(bc.sched.schedule_at(1).scheduled.size(), 2u);
  EXPECT_EQ(bc.sched.seconds_until_admission(1), 0);
}

TEST(Scheduler, BatchingPolicyNames) {
  for (BatchingPolicy p : {BatchingPolicy::kContinuous, BatchingPolicy::kDynamic, BatchingPolicy::kStatic}) {
    auto q = parse_batching_policy(batching_policy_name(p));
    ASSERT_TRUE(q.is_ok());
    EXPECT_EQ(*q, p);
  }
  EXPECT_FALSE(parse_batching_policy("windowed").is_ok());
}

// The fake runner reports paging mistakes instead of computing on them.
TEST(FakeModelRunner, DetectsWrongPagesAndReleasedPages) {
  FakeModelConfig mc;
  mc.windows = {0};
  FakeModelRunner runner(mc);
  const KvLayout layout = KvLayout::from_spec(runner.kv_spec(), true);
  ASSERT_TRUE(runner.allocate_kv(layout, 4, 0, 8, {}).is_ok());
  Request r;
  r.id = "x";
  r.tokens = {1, 2, 3, 4, 5, 6};
  BlockTables t = {{0, 1}};
  SchedulerOutput so;
  so.scheduled.push_back({&r, 0, 6, true, false, &t});
  so.n_tokens = 6;
  so.n_logit_rows = 1;
  ASSERT_TRUE(runner.execute(so).is_ok());
  std::vector<float> want(mc.n_vocab);
  FakeModelRunner::reference_logits(mc, r.tokens.data(), 5, want.data());
  auto got = runner.execute(so);  // rewriting the same rows is fine
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(std::vector<float>(got.value(), got.value() + mc.n_vocab), want);
  // Decode position 6 through a table whose first page is wrong.
  r.tokens.push_back(9);
  BlockTables wrong = {{2, 1}};
  SchedulerOutput bad;
  bad.scheduled.push_back({&r, 6, 1, true, false, &wrong});
  bad.n_tokens = 1;
  bad.n_logit_rows = 1;
  EXPECT_FALSE(runner.execute(bad).is_ok());
  BlockTables released = {{-1, 1}};
  bad.scheduled[0].tables = &released;
  EXPECT_FALSE(runner.execute(bad).is_ok());
  // A copy-on-write copy of too few rows leaves the tail unwritten.
  SchedulerOutput cow;
  cow.kv_ops.push_back({KvOp::Kind::kCopy, 1, 3, 1});
  ASSERT_TRUE(runner.execute(cow).is_ok());
  BlockTables copied = {{0, 3}};
  bad.scheduled[0].tables = &copied;
  EXPECT_FALSE(runner.execute(bad).is_ok());  // position 5 was not copied
}

}  // namespace
}  // namespace ember
