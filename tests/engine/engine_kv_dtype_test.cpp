// The serving engine with every KV-cache dtype (f32, f16, bf16, q8, q4, and
// mixed K/V types, q8 and q4 with the Hadamard rotation (what
// --kv-rotation auto picks for them), q4c keys with q4 / f16
// values, rotated and not, in pages of 16 positions, the q4c group: partial
// groups live in f16 tails that COW, swap and chunked prefill must carry):
// tiny models with a head dim of 32 (one q8 / q4 group
// per head), layers that differ in width, Gemma 3's sliding-window groups
// (page release), under a tight pool (preemption by recomputation and by
// swap to host memory), shared prompt prefixes (prefix-cache hits) and n = 2
// samples (copy-on-write of the shared partial block). Every generated
// token's log-probability must equal, bit for bit, the one computed from
// ForwardContext logits over a contiguous cache of the same dtype: the
// compressed pages are batch-invariant and move through swap, COW and the
// prefix cache unchanged. A compressed dtype must also change the outputs'
// log-probabilities against f32 (the dtype really is in use).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/speculative_test_util.h"
#include "kernels/ops.h"
#include "model/tiny_layered_model.h"

namespace ember {
namespace {

struct ServeRun {
  std::map<std::string, FinishedRequest> done;  // by "id/index"
  std::map<std::string, std::vector<int32_t>> prompts;
  EngineStats stats;
};

// Pages of 4 positions (16 for q4c, whose token groups must not straddle
// pages).
int block_size_for(KvTypes kv) { return kv_token_grouped(kv.k) ? kKvTokenGroup : 4; }

ServeRun serve(const Model& m, ThreadPool& pool, KvTypes kv, bool swap, int n_blocks = 48, int block_size = 0) {
  const ModelConfig& cfg = m.config();
  EngineConfig ec;
  ec.block_size = block_size > 0 ? block_size : block_size_for(kv);
  ec.num_kv_blocks = n_blocks;  // tight: preemptions
  ec.max_num_batched_tokens = 16;
  ec.preempt_swap = swap;
  ec.kv_types = kv;
  ServeRun r;
  auto e = Engine::create(m, pool, ec);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e) return r;
  std::mt19937 rng(23);
  std::vector<int32_t> shared;
  for (int j = 0; j < 2 * ec.block_size + 1; ++j) shared.push_back(static_cast<int32_t>(rng() % cfg.n_vocab));
  for (int i = 0; i < 6; ++i) {
    RequestParams p;
    p.prompt = shared;  // two full blocks in common, then a tail of its own
    for (int j = 0, len = 2 + static_cast<int>(rng() % 16); j < len; ++j)
      p.prompt.push_back(static_cast<int32_t>(rng() % cfg.n_vocab));
    p.sampling.temperature = i % 2 ? 0.f : 1.0f;
    p.sampling.seed = 40 + i;
    p.n = i == 2 ? 2 : 1;
    p.max_tokens = 12;
    p.logprobs = true;
    const std::string id = std::to_string(i);
    r.prompts[id] = p.prompt;
    EXPECT_TRUE((*e)->add_request(id, p).is_ok());
    if (i == 0) {  // the first one alone first, so that later prompts find its prefix cached
      while ((*e)->has_unfinished()) {
        auto out = (*e)->step();
        EXPECT_TRUE(out.is_ok()) << out.status().message();
        if (!out) return r;
        for (auto& f : out->finished) r.done[f.id + "/" + std::to_string(f.index)] = f;
      }
    }
  }
  for (int guard = 0; (*e)->has_unfinished() && guard < 10000; ++guard) {
    auto out = (*e)->step();
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    if (!out) break;
    for (auto& f : out->finished) r.done[f.id + "/" + std::to_string(f.index)] = f;
    Status st = (*e)->check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st) break;
  }
  r.stats = (*e)->stats();
  return r;
}

// Log-probabilities of each finished sample's tokens from one forward pass
// over a contiguous cache of the same dtype.
void expect_matches_contiguous(const Model& m, ThreadPool& pool, KvTypes kv, const ServeRun& r) {
  const ModelConfig& cfg = m.config();
  const int V = cfg.n_vocab;
  for (const auto& [key, f] : r.done) {
    const std::vector<int32_t>& prompt = r.prompts.at(f.id);
    std::vector<int32_t> toks = prompt;
    toks.insert(toks.end(), f.output.begin(), f.output.end());
    const int64_t n = static_cast<int64_t>(toks.size()) - 1;
    ForwardContext ctx(m, pool, 64);
    ContiguousKvCache cache(cfg, n, kv);
    std::vector<float> all(static_cast<size_t>(n) * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());
    ASSERT_EQ(f.logprobs.size(), f.output.size());
    for (size_t i = 0; i < f.output.size(); ++i) {
      const float* lg = all.data() + (prompt.size() - 1 + i) * V;
      const float want = static_cast<float>(lg[f.output[i]] - log_sum_exp_row(lg, V));
      ASSERT_EQ(f.logprobs[i], want) << "sample " << key << " token " << i;
    }
  }
}

// f(arch, model, pool) for the tiny qwen2 and gemma3 models at a head dim
// of 32 (one q8 / q4 group per head).
template <class F>
void for_tiny_archs(F f) {
  for (test::TinySpec spec : test::tiny_specs()) {
    if (spec.arch != "qwen2" && spec.arch != "gemma3") continue;
    spec.head_dim = 32;
    SCOPED_TRACE(spec.arch);
    std::unique_ptr<Model> m = test::load_tiny(spec);
    ASSERT_TRUE(m);
    ThreadPool pool(2);
    f(spec.arch, *m, pool);
  }
}

class EngineKvDtype : public ::testing::TestWithParam<KvTypes> {};

TEST_P(EngineKvDtype, PagedCompressedCacheMatchesContiguousUnderPressure) {
  const KvTypes kv = GetParam();
  for_tiny_archs([&](const std::string& arch, const Model& m, ThreadPool& pool) {
    for (bool swap : {false, true}) {
      SCOPED_TRACE(swap ? "swap" : "recompute");
      // Gemma's three groups (one global, two sliding) release pages; qwen2 keeps all.
      const int scale = block_size_for(kv) / 4;  // q4c: about the same pressure in positions
      const ServeRun r = serve(m, pool, kv, swap, (arch == "gemma3" ? 48 : 24) / scale + (scale > 1 ? 4 : 0));
      ASSERT_EQ(r.done.size(), 7u);
      EXPECT_GT(r.stats.n_preemptions, 0);
      EXPECT_GT(r.stats.prefix.hit_tokens, 0);
      EXPECT_GT(r.stats.n_cow_copies, 0);
      if (swap) {
        EXPECT_GT(r.stats.n_swap_outs, 0);
      }
      expect_matches_contiguous(m, pool, kv, r);
      if (kv_token_grouped(kv.k)) {  // pages of two token groups: the same bits again
        SCOPED_TRACE("pages of 32");
        const ServeRun r32 = serve(m, pool, kv, swap, arch == "gemma3" ? 12 : 8, 32);
        ASSERT_EQ(r32.done.size(), 7u);
        expect_matches_contiguous(m, pool, kv, r32);
      }
    }
  });
}

// The dtype reaches the pages: bytes per token follow the format, and the
// outputs' log-probabilities move against the f32 cache (q8 / q4 change the
// values attention reads).
TEST_P(EngineKvDtype, DtypeChangesBytesAndValues) {
  const KvTypes kv = GetParam();
  test::TinySpec spec;  // qwen2, layers of 2, 4, 1 KV heads
  spec.head_dim = 32;
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  const ServeRun f32 = serve(*m, pool, {}, false), got = serve(*m, pool, kv, false);
  int64_t want_bytes = 0;
  for (const LayerConfig& l : m->config().layers)
    want_bytes += static_cast<int64_t>(kv_row_bytes(kv.k, int64_t{l.n_head_kv} * 32) +
                                       kv_row_bytes(kv.v, int64_t{l.n_head_kv} * 32));
  EXPECT_EQ(got.stats.kv_bytes_per_token, want_bytes);
  EXPECT_EQ(f32.stats.kv_bytes_per_token, (2 + 4 + 1) * 32 * 4 * 2);
  if (kv == KvTypes{}) return;
  const FinishedRequest& a = f32.done.at("1/0");  // greedy
  const FinishedRequest& b = got.done.at("1/0");
  EXPECT_NE(a.logprobs, b.logprobs);
}

std::string kv_name(const ::testing::TestParamInfo<KvTypes>& i) {
  const bool rot = i.param.rot_k == KvRotation::kHadamard || i.param.rot_v == KvRotation::kHadamard;
  return std::string(kv_type_name(i.param.k)) + "_" + kv_type_name(i.param.v) + (rot ? "_hadamard" : "");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EngineKvDtype,
                         ::testing::Values(KvTypes{}, KvTypes{KvType::kF16, KvType::kF16},
                                           KvTypes{KvType::kBF16, KvType::kBF16}, KvTypes{KvType::kQ8, KvType::kQ8},
                                           KvTypes{KvType::kQ4, KvType::kQ4}, KvTypes{KvType::kQ8, KvType::kF16},
                                           KvTypes{KvType::kQ8, KvType::kQ8, KvRotation::kHadamard,
                                                   KvRotation::kHadamard},
                                           KvTypes{KvType::kQ4, KvType::kQ4, KvRotation::kHadamard,
                                                   KvRotation::kHadamard},
                                           KvTypes{KvType::kQ4C, KvType::kQ4}, KvTypes{KvType::kQ4C, KvType::kF16},
                                           KvTypes{KvType::kQ4C, KvType::kQ4, KvRotation::kHadamard,
                                                   KvRotation::kHadamard}),
                         kv_name);

// A q8 / q4 cache on a head dim that does not split into groups of 32 is
// refused with a message, not built.
TEST(EngineKvDtypeErrors, GroupedDtypeNeedsHeadDimMultipleOf32) {
  test::TinySpec spec;  // head dim 8
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  EngineConfig ec;
  ec.num_kv_blocks = 16;
  ec.kv_types = {KvType::kQ8, KvType::kQ8};
  auto e = Engine::create(*m, pool, ec);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("multiple of 32"), std::string::npos) << e.status().message();
  ec.kv_types = {KvType::kF16, KvType::kBF16};  // no groups: any head dim
  EXPECT_TRUE(Engine::create(*m, pool, ec).is_ok());
}

// q4c keys need pages of whole token groups and are a key format only.
TEST(EngineKvDtypeErrors, Q4cNeedsWholeGroupsPerPageAndIsForKeys) {
  test::TinySpec spec;
  spec.head_dim = 32;
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  EngineConfig ec;
  ec.num_kv_blocks = 16;
  ec.block_size = 8;
  ec.kv_types = {KvType::kQ4C, KvType::kQ4};
  auto e = Engine::create(*m, pool, ec);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("multiple of 16"), std::string::npos) << e.status().message();
  ec.block_size = 32;
  EXPECT_TRUE(Engine::create(*m, pool, ec).is_ok());
  ec.kv_types = {KvType::kQ4, KvType::kQ4C};
  auto v = Engine::create(*m, pool, ec);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find("key format"), std::string::npos) << v.status().message();
}

// q4c under speculative decoding: verification writes draft keys that may
// finish a token group, rejected ones are withdrawn and rewritten (the
// group's f16 tail is kept until the next pass, so the rewrite is exact).
// Replayed drafts (mostly right, some corrupted) give every accept length;
// each request's outputs and log-probabilities must equal its plain run's.
TEST(EngineKvDtypeQ4c, SpeculativeRollbackKeepsTheBits) {
  for_tiny_archs([&](const std::string& arch, const Model& m, ThreadPool& pool) {
    const int V = m.config().n_vocab;
    EngineConfig base;
    base.block_size = kKvTokenGroup;
    base.max_num_batched_tokens = 48;
    base.num_kv_blocks = 256;
    base.kv_types = {KvType::kQ4C, KvType::kQ4};
    const std::vector<RequestParams> reqs = test::workload(8, V, 9);
    const test::RunResult want = test::run_each_alone(m, pool, base, reqs);
    EngineConfig sc = base;
    sc.spec.method = SpecMethod::kNgram;
    sc.spec.num_speculative_tokens = 5;
    auto replay = [&](const Engine&) -> std::unique_ptr<Proposer> {
      return std::make_unique<test::ReplayProposer>(
          [&](const Request& r) { return want.finished.at(test::key(r.id, r.index)).output; }, V, 4, 0.3);
    };
    const test::RunResult got = test::run(m, pool, sc, reqs, replay);
    test::expect_same(want, got, "replay");
    EXPECT_GT(got.stats.spec.n_accepted_tokens, 0);
    EXPECT_LT(got.stats.spec.n_accepted_tokens, got.stats.spec.n_draft_tokens);  // some were rolled back
  });
}

// q4c keys under a byte budget: the f16 tails' worst case comes out of the
// budget (kv_pool.h, "q4c tails"). Many more requests than max_num_seqs
// (each leaves an unfinished group when it finishes), prefills across
// groups, n = 2 samples (copy-on-write), preemption by recomputation and by
// swap, speculative rollbacks: after every step the high-water mark of the
// tail bytes stays within the reserve and pages + tails within the budget,
// and every output is the bits of its request run alone.
TEST(EngineKvDtypeQ4c, TailsStayWithinTheReserveAndTheBudget) {
  int64_t preemptions = 0, swap_outs = 0, cow = 0, rolled_back = 0;
  for_tiny_archs([&](const std::string& arch, const Model& m, ThreadPool& pool) {
    const int V = m.config().n_vocab;
    const std::vector<RequestParams> reqs = test::workload(20, V, 31);
    for (int variant = 0; variant < 5; ++variant) {
      // 0-3: a tight pool; 4: a roomy one, whose freed pages wait long
      // before they are written again (a tail left on them must not).
      const bool swap = variant % 2 == 1, spec = variant == 2 || variant == 3, roomy = variant == 4;
      const int bs = variant == 1 || variant == 2 ? 2 * kKvTokenGroup : kKvTokenGroup;
      SCOPED_TRACE(fmt::format("{}, {}, pages of {}{}", swap ? "swap" : "recompute", spec ? "spec" : "no spec", bs,
                               roomy ? ", roomy" : ""));
      EngineConfig ec;
      ec.block_size = bs;
      ec.kv_types = {KvType::kQ4C, KvType::kQ4};
      ec.max_num_seqs = 4;
      ec.max_num_batched_tokens = 24;
      ec.preempt_swap = swap;
      // The page size and the reserve, then a budget of that reserve plus a
      // tight pool (and half a page that must stay unused).
      ec.num_kv_blocks = 4;
      auto probe = Engine::create(m, pool, ec);
      ASSERT_TRUE(probe.is_ok()) << probe.status().message();
      const size_t page = (*probe)->runner().kv_memory().page_bytes;
      const int64_t reserve = (*probe)->stats().kv_tail_reserve_bytes;
      ASSERT_GT(reserve, 0);
      ec.num_kv_blocks = 0;
      const int n_pages = (arch == "gemma3" ? 40 : 16) * kKvTokenGroup / bs * (roomy ? 8 : 1);
      ec.kv_cache_bytes = static_cast<size_t>(reserve) + n_pages * page + page / 2;
      const test::RunResult want = test::run_each_alone(m, pool, ec, reqs);

      EngineConfig rc = ec;
      if (spec) {
        rc.spec.method = SpecMethod::kNgram;
        rc.spec.num_speculative_tokens = 5;
      }
      auto e = Engine::create(m, pool, rc);
      ASSERT_TRUE(e.is_ok()) << e.status().message();
      Engine& eng = **e;
      EXPECT_EQ(eng.stats().kv_tail_reserve_bytes, reserve);
      EXPECT_EQ(eng.stats().blocks_total, n_pages);
      if (spec)
        eng.set_proposer(std::make_unique<test::ReplayProposer>(
            [&](const Request& r) { return want.finished.at(test::key(r.id, r.index)).output; }, V, 5, 0.3));
      for (size_t i = 0; i < reqs.size(); ++i) ASSERT_TRUE(eng.add_request(std::to_string(i), reqs[i]).is_ok());
      test::RunResult got;
      int64_t peak = 0;
      for (int guard = 0; eng.has_unfinished() && guard < 100000; ++guard) {
        auto out = eng.step();
        ASSERT_TRUE(out.is_ok()) << out.status().message();
        for (auto& t : out->tokens) got.streamed[test::key(t.id, t.index)].push_back(t.token);
        for (auto& f : out->finished) got.finished[test::key(f.id, f.index)] = f;
        const EngineStats st = eng.stats();
        ASSERT_LE(st.kv_tail_bytes, st.kv_tail_peak_bytes);
        ASSERT_LE(st.kv_tail_peak_bytes, reserve) << "step " << guard;
        ASSERT_LE(static_cast<size_t>(st.blocks_total) * page + static_cast<size_t>(st.kv_tail_peak_bytes),
                  ec.kv_cache_bytes)
            << "step " << guard;
        peak = st.kv_tail_peak_bytes;
        const Status inv = eng.check_invariants();
        ASSERT_TRUE(inv.is_ok()) << inv.message();
      }
      got.stats = eng.stats();
      EXPECT_GT(peak, 0);
      test::expect_same(want, got, "under the budget");
      preemptions += got.stats.n_preemptions;
      swap_outs += got.stats.n_swap_outs;
      cow += got.stats.n_cow_copies;
      rolled_back += got.stats.spec.n_draft_tokens - got.stats.spec.n_accepted_tokens;
    }
  });
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(swap_outs, 0);
  EXPECT_GT(cow, 0);
  EXPECT_GT(rolled_back, 0);
}

// The tail a finished sequence leaves in its last, unfinished group goes
// with it: one sequence at a time in pages of four token groups, each
// request ending one group earlier in the page the previous one freed (and
// the next one takes first), never finishing the groups left there. Kept,
// those tails would reach four per layer; the reserve (one sequence, steps
// of 2 tokens) holds two.
TEST(EngineKvDtypeQ4c, TailsOfFinishedSequencesDoNotPileUp) {
  test::TinySpec spec;
  spec.head_dim = 32;
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  EngineConfig ec;
  ec.block_size = 4 * kKvTokenGroup;
  ec.kv_types = {KvType::kQ4C, KvType::kQ4};
  ec.max_num_seqs = 1;
  ec.max_num_batched_tokens = 2;
  ec.enable_prefix_caching = false;
  EXPECT_EQ(kv_tails_per_layer(kKvTokenGroup, 1, 2), 2);
  ec.num_kv_blocks = 4;
  auto probe = Engine::create(*m, pool, ec);
  ASSERT_TRUE(probe.is_ok()) << probe.status().message();
  const size_t page = (*probe)->runner().kv_memory().page_bytes;
  const int64_t reserve = (*probe)->stats().kv_tail_reserve_bytes;
  ec.num_kv_blocks = 0;
  ec.kv_cache_bytes = static_cast<size_t>(reserve) + 4 * page;
  auto e = Engine::create(*m, pool, ec);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  Engine& eng = **e;
  std::mt19937 rng(5);
  int64_t peak = 0;
  for (int len : {56, 40, 24, 8}) {  // ends in group 3, 2, 1, 0 of the page
    RequestParams p;
    for (int j = 0; j < len; ++j) p.prompt.push_back(static_cast<int32_t>(rng() % m->config().n_vocab));
    p.max_tokens = 1;
    ASSERT_TRUE(eng.add_request(std::to_string(len), p).is_ok());
    while (eng.has_unfinished()) {
      auto out = eng.step();
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      const EngineStats st = eng.stats();
      ASSERT_LE(st.kv_tail_peak_bytes, reserve) << "request of " << len;
      ASSERT_LE(static_cast<size_t>(st.blocks_total) * page + static_cast<size_t>(st.kv_tail_peak_bytes),
                ec.kv_cache_bytes);
      peak = st.kv_tail_peak_bytes;
    }
  }
  EXPECT_EQ(peak, reserve / 2);  // one tail per layer: 2-token steps from 0 never straddle two groups
}

// A budget that cannot hold the q4c tails reserve (or the reserve and one
// page) is refused at start-up with a message; so is a request with more
// samples than the max_num_seqs the reserve is sized for.
TEST(EngineKvDtypeErrors, Q4cBudgetMustHoldTheTailsReserve) {
  test::TinySpec spec;  // qwen2, layers of 2, 4, 1 KV heads
  spec.head_dim = 32;
  std::unique_ptr<Model> m = test::load_tiny(spec);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  EngineConfig ec;
  ec.block_size = 16;
  ec.kv_types = {KvType::kQ4C, KvType::kQ4};
  ec.max_num_seqs = 8;
  ec.max_num_batched_tokens = 64;
  // 8 + (64 + 14 * 8) / 16 = 19 tails per layer, of 16 f16 rows of 64, 128
  // and 32 elements.
  EXPECT_EQ(kv_tails_per_layer(kKvTokenGroup, 8, 64), 19);
  const size_t reserve = 19 * 16 * 2 * (64 + 128 + 32);
  const KvSpec ks = kv_spec_from_config(m->config(), ec.kv_types);
  EXPECT_EQ(kv_tail_reserve_bytes(ks, KvLayout::from_spec(ks, true), {8, 64}), reserve);
  ec.num_kv_blocks = 3;  // a page count: the reserve is reported, not taken out
  auto fixed = Engine::create(*m, pool, ec);
  ASSERT_TRUE(fixed.is_ok()) << fixed.status().message();
  EXPECT_EQ((*fixed)->stats().kv_tail_reserve_bytes, static_cast<int64_t>(reserve));
  const size_t page = (*fixed)->runner().kv_memory().page_bytes;
  ec.num_kv_blocks = 0;

  ec.kv_cache_bytes = reserve;
  auto none = Engine::create(*m, pool, ec);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("cannot hold the q4c key tails reserve of " + std::to_string(reserve)),
            std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("max_num_seqs"), std::string::npos);
  ec.kv_cache_bytes = reserve + page - 1;
  auto below = Engine::create(*m, pool, ec);
  ASSERT_FALSE(below.is_ok());
  EXPECT_NE(below.status().message().find("tails reserve"), std::string::npos) << below.status().message();
  EXPECT_NE(below.status().message().find("below one block"), std::string::npos) << below.status().message();

  ec.kv_cache_bytes = reserve + 3 * page + page / 2;
  auto ok = Engine::create(*m, pool, ec);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  const EngineStats st = (*ok)->stats();
  EXPECT_EQ(st.blocks_total, 3);
  EXPECT_EQ(st.kv_tail_reserve_bytes, static_cast<int64_t>(reserve));
  EXPECT_EQ(st.kv_tail_bytes_per_token(), (static_cast<int64_t>(reserve) + 3 * 16 - 1) / (3 * 16));
  EXPECT_EQ(st.kv_bytes_per_token_with_tails(), st.kv_bytes_per_token + st.kv_tail_bytes_per_token());
  RequestParams p;
  p.prompt = {1, 2, 3};
  p.n = 9;
  const Status many = (*ok)->add_request("many", p);
  ASSERT_FALSE(many.is_ok());
  EXPECT_NE(many.message().find("max_num_seqs 8"), std::string::npos) << many.message();
  p.n = 8;
  EXPECT_TRUE((*ok)->add_request("eight", p).is_ok());

  ec.kv_types = {KvType::kQ4, KvType::kQ4};  // other key formats reserve nothing
  ec.kv_cache_bytes = reserve;
  auto q4 = Engine::create(*m, pool, ec);
  ASSERT_TRUE(q4.is_ok()) << q4.status().message();
  EXPECT_EQ((*q4)->stats().kv_tail_reserve_bytes, 0);
}

}  // namespace
}  // namespace ember
