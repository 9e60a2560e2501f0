// The run-time routing knobs of the MoE layers (Model::set_moe_routing) on
// the tiny Hugging Face fixtures (tests/data/model, tools/gen_moe_fixtures.py):
//   - --moe-top-k N gives the very bits of the same checkpoint whose
//     config.json says num_experts_per_tok = N (an independent path: the
//     config reader), and the file's own k changes nothing;
//   - batch-aware expert sharing off, and at fraction 1, gives the bits of
//     exact routing for every sequence of a batched decode step;
//   - sharing at a small fraction limits the distinct experts a layer reads
//     per decode step (ForwardContext::moe_stats) to the budget, and leaves
//     a lone decode token and the prefill tokens of the step as they were;
//   - bad values are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
const std::string kData = EMBER_SOURCE_DIR "/tests/data/model/";

// Logits of every position of `toks` (one sequence from an empty cache).
std::vector<float> prefill_logits(const Model& m, ThreadPool& pool, const std::vector<int32_t>& toks) {
  ForwardContext ctx(m, pool, 64);
  ContiguousKvCache cache(m.config(), 64);
  std::vector<float> out(toks.size() * m.config().n_vocab);
  EXPECT_TRUE(ctx.forward(toks.data(), static_cast<int64_t>(toks.size()), 0, cache, nullptr, out.data()).is_ok());
  return out;
}

// B sequences decoded in lockstep, one token each per step (the first
// `prefix` tokens of each prefilled alone first); logits [step][seq][V] of
// the decode steps, and the context's expert counters of those steps.
struct Lockstep {
  std::vector<float> logits;
  MoeStats stats;
};
Lockstep lockstep(const Model& m, ThreadPool& pool, const std::vector<std::vector<int32_t>>& seqs, int prefix) {
  const int V = m.config().n_vocab, B = static_cast<int>(seqs.size());
  ForwardContext ctx(m, pool, 64);
  std::vector<std::unique_ptr<ContiguousKvCache>> caches;
  for (int b = 0; b < B; ++b) {
    caches.push_back(std::make_unique<ContiguousKvCache>(m.config(), 64));
    EXPECT_TRUE(ctx.forward(seqs[b].data(), prefix, 0, *caches[b], nullptr).is_ok());
  }
  ctx.reset_moe_stats();
  Lockstep out;
  std::vector<SeqBatch> batch(B);
  std::vector<float> step(static_cast<size_t>(B) * V);
  for (size_t p = prefix; p < seqs[0].size(); ++p) {
    for (int b = 0; b < B; ++b)
      batch[b] = SeqBatch{.tokens = seqs[b].data() + p, .n = 1, .pos0 = static_cast<int64_t>(p),
                          .cache = caches[b].get(), .want_logits = true};
    EXPECT_TRUE(ctx.forward_ragged(batch.data(), B, step.data()).is_ok());
    out.logits.insert(out.logits.end(), step.begin(), step.end());
  }
  out.stats = ctx.moe_stats();
  return out;
}

std::vector<std::vector<int32_t>> workload(int B, int len, int V) {
  std::vector<std::vector<int32_t>> s(B);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < len; ++i) s[b].push_back((b * 37 + i * 11 + (b * i) % 7) % V);
  return s;
}

TEST(MoeRouting, TopKEqualsTheCheckpointsOwnK) {
  for (const char* a : {"qwen3moe", "olmoe", "mixtral", "qwen2moe_fused"}) {
    SCOPED_TRACE(a);
    const std::string src = kData + "hf_" + a;
    auto base = Model::load(src);
    ASSERT_TRUE(base.is_ok()) << base.status().message();
    const int k = (*base)->config().max_n_expert_used(), E = (*base)->config().max_n_expert();
    ThreadPool pool(2);
    const std::vector<int32_t> toks = {5, 17, 33, 41, 60, 7, 90, 12, 3};
    const std::vector<float> exact = prefill_logits(**base, pool, toks);
    for (int want : {1, k, std::min(E, k + 2)}) {
      SCOPED_TRACE(want);
      // The same checkpoint with num_experts_per_tok = want.
      const fs::path dir = fs::temp_directory_path() / ("ember_moe_topk_" + std::string(a) + std::to_string(want));
      fs::remove_all(dir);
      fs::copy(src, dir, fs::copy_options::recursive);
      nlohmann::json cfg;
      {
        std::ifstream f(dir / "config.json");
        cfg = nlohmann::json::parse(f);
      }
      cfg["num_experts_per_tok"] = want;
      std::ofstream(dir / "config.json") << cfg.dump(1);
      auto edited = Model::load(dir.string());
      ASSERT_TRUE(edited.is_ok()) << edited.status().message();
      ASSERT_EQ((*edited)->config().max_n_expert_used(), want);
      auto knob = Model::load(src);
      ASSERT_TRUE(knob.is_ok());
      ASSERT_TRUE((*knob)->set_moe_routing(want, {}).is_ok());
      const std::vector<float> got = prefill_logits(**knob, pool, toks);
      EXPECT_EQ(got, prefill_logits(**edited, pool, toks)) << "--moe-top-k vs the config's k";
      if (want == k) EXPECT_EQ(got, exact) << "the file's own k";
      else EXPECT_NE(got, exact);
      EXPECT_LT((*knob)->decode_reads().bytes, want < k ? (*base)->decode_reads().bytes : 1e18);
      fs::remove_all(dir);
    }
  }
}

TEST(MoeRouting, SharingOffAndWholeAreExactRouting) {
  for (const char* a : {"qwen3moe", "olmoe", "qwen2moe"}) {
    SCOPED_TRACE(a);
    auto m = Model::load(kData + "hf_" + a);
    ASSERT_TRUE(m.is_ok());
    ThreadPool pool(2);
    const auto seqs = workload(6, 12, (*m)->config().n_vocab);
    const Lockstep exact = lockstep(**m, pool, seqs, 4);
    // Each sequence alone: the same bits (batch invariance of exact routing).
    for (int b = 0; b < 6; ++b) {
      const Lockstep alone = lockstep(**m, pool, {seqs[b]}, 4);
      const int V = (*m)->config().n_vocab;
      for (size_t p = 0; p < 8; ++p)
        EXPECT_TRUE(std::equal(alone.logits.begin() + p * V, alone.logits.begin() + (p + 1) * V,
                               exact.logits.begin() + (p * 6 + b) * V))
            << "sequence " << b << " step " << p;
    }
    ASSERT_TRUE((*m)->set_moe_routing(0, {.fraction = 0.f}).is_ok());
    EXPECT_EQ(lockstep(**m, pool, seqs, 4).logits, exact.logits) << "sharing off";
    ASSERT_TRUE((*m)->set_moe_routing(0, {.fraction = 1.f, .keep = 1}).is_ok());
    const Lockstep whole = lockstep(**m, pool, seqs, 4);
    EXPECT_EQ(whole.logits, exact.logits) << "sharing at fraction 1";
    EXPECT_EQ(whole.stats.experts_read, exact.stats.experts_read);
  }
}

TEST(MoeRouting, SharingHoldsTheBudgetAndSparesLoneAndPrefillTokens) {
  auto m = Model::load(kData + "hf_qwen3moe");
  ASSERT_TRUE(m.is_ok());
  const ModelConfig& c = (*m)->config();
  const int V = c.n_vocab, k = c.max_n_expert_used(), E = c.max_n_expert(), B = 8;
  ThreadPool pool(2);
  const auto seqs = workload(B, 12, V);
  const Lockstep exact = lockstep(**m, pool, seqs, 4);
  const std::vector<float> lone_exact = lockstep(**m, pool, {seqs[0]}, 4).logits;
  const std::vector<int32_t> prompt = {5, 17, 33, 41, 60, 7, 90};
  const std::vector<float> prompt_exact = prefill_logits(**m, pool, prompt);

  const float fraction = 0.4f;
  ASSERT_TRUE((*m)->set_moe_routing(0, {.fraction = fraction, .keep = 1}).is_ok());
  const Lockstep shared = lockstep(**m, pool, seqs, 4);
  EXPECT_NE(shared.logits, exact.logits);
  // Per layer and step: at most max(k, ceil(0.4 U)) experts, U <= E, unless
  // the warm-up (each token's first expert, at most B of them) needs more.
  const double per_step_exact = exact.stats.experts_per_layer_step();
  const double per_step_shared = shared.stats.experts_per_layer_step();
  EXPECT_GT(per_step_exact, k);
  EXPECT_LT(per_step_shared, per_step_exact);
  EXPECT_LE(per_step_shared, std::max<double>({static_cast<double>(k), std::ceil(fraction * E), 1.0 * B}));
  // A lone decode token: nothing to share with.
  EXPECT_EQ(lockstep(**m, pool, {seqs[0]}, 4).logits, lone_exact);
  // Prefill tokens in a step with decode tokens keep exact routing.
  ForwardContext ctx(**m, pool, 64);
  std::vector<std::unique_ptr<ContiguousKvCache>> caches;
  for (int b = 0; b < 3; ++b) {
    caches.push_back(std::make_unique<ContiguousKvCache>(c, 64));
    ASSERT_TRUE(ctx.forward(seqs[b].data(), 4, 0, *caches[b], nullptr).is_ok());
  }
  ContiguousKvCache pc(c, 64);
  std::vector<SeqBatch> batch;
  for (int b = 0; b < 3; ++b)
    batch.push_back({.tokens = seqs[b].data() + 4, .n = 1, .pos0 = 4, .cache = caches[b].get(), .want_logits = true});
  batch.push_back({.tokens = prompt.data(), .n = static_cast<int64_t>(prompt.size()), .pos0 = 0, .cache = &pc,
                   .all_logits = true});
  std::vector<float> out((3 + prompt.size()) * V);
  ASSERT_TRUE(ctx.forward_ragged(batch.data(), static_cast<int>(batch.size()), out.data()).is_ok());
  EXPECT_TRUE(std::equal(prompt_exact.begin(), prompt_exact.end(), out.begin() + 3 * V)) << "prefill tokens";
}

TEST(MoeRouting, BadValuesAreClearErrors) {
  auto m = Model::load(kData + "hf_qwen3moe");
  ASSERT_TRUE(m.is_ok());
  const int E = (*m)->config().max_n_expert(), k = (*m)->config().max_n_expert_used();
  Status st = (*m)->set_moe_routing(E + 1, {});
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("experts per token"), std::string::npos) << st.message();
  EXPECT_FALSE((*m)->set_moe_routing(-1, {}));
  EXPECT_FALSE((*m)->set_moe_routing(0, {.fraction = 1.5f}));
  EXPECT_FALSE((*m)->set_moe_routing(0, {.fraction = 0.5f, .keep = k + 1}));
  EXPECT_FALSE((*m)->set_moe_routing(0, {.fraction = 0.5f, .keep = 0}));
  EXPECT_EQ((*m)->config().max_n_expert_used(), k) << "a failed call changes nothing";
  EXPECT_FALSE((*m)->config().moe_sharing.on());
  auto dense = Model::load(kData + "hf_qwen3");
  ASSERT_TRUE(dense.is_ok());
  EXPECT_TRUE((*dense)->set_moe_routing(0, {}).is_ok());
  st = (*dense)->set_moe_routing(2, {});
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("no Mixture-of-Experts"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ember
