// Tiny random-weight Mixture-of-Experts models (Qwen3-MoE, Qwen2-MoE with a
// gated shared expert, OLMoE, Mixtral) saved by Hugging Face transformers
// in both expert layouts (one matrix per expert; the fused 3-D
// gate_up_proj / down_proj of v5), against transformers in float32
// (reference: tools/gen_moe_fixtures.py): relative L2 error of the logits
// < 1e-4, the same top-1 at every position, identical 32-token greedy
// continuations. Also: a MoE token's logits do not depend on the batch it
// runs in (alone, in a ragged batch with other sequences, in chunks, on one
// thread or two) at every ISA level, and the two layouts give the same bits.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "engine_free_greedy.h"
#include "logits_compare.h"
#include "model/model.h"

namespace ember {
namespace {

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model/";
const char* const kArchs[] = {"qwen3moe", "qwen2moe", "olmoe", "mixtral"};

const nlohmann::json& reference() {
  static const nlohmann::json ref = [] {
    std::ifstream f(kData + "hf_moe_reference.json");
    return f.good() ? nlohmann::json::parse(f) : nlohmann::json();
  }();
  return ref;
}

void check_folder(const std::string& folder, const std::string& ref_name) {
  SCOPED_TRACE(folder);
  const nlohmann::json& ref = reference()["models"][ref_name];
  ASSERT_FALSE(ref.is_null()) << "missing reference for " << ref_name;
  auto model = Model::load(kData + folder);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const Model& m = **model;
  ASSERT_TRUE(m.config().has_moe());
  const int V = m.config().n_vocab;
  ASSERT_EQ(V, ref["vocab"].get<int>());
  ThreadPool pool(2);
  for (const auto& c : ref["cases"]) {
    const std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(toks.size());
    ForwardContext ctx(m, pool, 16);  // batches of 16: also split prefill
    ContiguousKvCache cache(m.config(), n + 40);
    std::vector<float> all(n * V);
    ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());
    const LogitsComparison cmp = compare_logits(all.data(), c["logits"], V);
    for (int64_t t = 0; t < n; ++t) EXPECT_EQ(cmp.top1[t], cmp.want_top1[t]) << "top-1 at " << t << " of " << n;
    EXPECT_LT(cmp.rel_l2, 1e-4) << "relative L2 error, " << n << " tokens";
    const std::vector<int32_t> greedy = c["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy_continue(ctx, cache, all.data() + (n - 1) * V, V, n, static_cast<int>(greedy.size())), greedy)
        << "greedy continuation of " << n << " tokens";
  }
}

TEST(MoeReference, PerExpertLayoutMatchesTransformers) {
  for (const char* a : kArchs) check_folder(std::string("hf_") + a, std::string("hf_") + a);
}

TEST(MoeReference, FusedLayoutMatchesTransformers) {
  for (const char* a : kArchs) check_folder(std::string("hf_") + a + "_fused", std::string("hf_") + a);
}

TEST(MoeReference, ConfigFromTheHuggingFaceKeys) {
  struct Want {
    const char* arch;
    int n_expert, k, ff_exp, ff_shexp;
    bool norm;
  };
  const Want wants[] = {{"qwen3moe", 8, 2, 32, 0, true},
                        {"qwen2moe", 4, 2, 32, 48, false},
                        {"olmoe", 8, 2, 32, 0, false},
                        {"mixtral", 4, 2, 48, 0, true}};
  for (const Want& w : wants) {
    auto model = Model::load(kData + "hf_" + w.arch);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const ModelConfig& c = (*model)->config();
    EXPECT_EQ(c.arch, std::string(w.arch) == "mixtral" ? "llama" : w.arch);
    for (const LayerConfig& l : c.layers) {
      EXPECT_EQ(l.ffn_kind, FfnKind::kMoe) << w.arch;
      EXPECT_EQ(l.n_expert, w.n_expert) << w.arch;
      EXPECT_EQ(l.n_expert_used, w.k) << w.arch;
      EXPECT_EQ(l.n_ff_exp, w.ff_exp) << w.arch;
      EXPECT_EQ(l.n_ff_shexp, w.ff_shexp) << w.arch;
      EXPECT_EQ(l.moe_norm_topk, w.norm) << w.arch;
      EXPECT_EQ(l.moe_gating, MoeGating::kSoftmax) << w.arch;
    }
    EXPECT_EQ(c.qk_norm_full, std::string(w.arch) == "olmoe");
  }
}

// Experts bind as views of the file's bytes: per-expert matrices are the
// file's tensors; fused gate_up slices point into the 3-D tensor.
TEST(MoeReference, ExpertsAreZeroCopyViews) {
  auto per = Model::load(kData + "hf_qwen3moe");
  auto fused = Model::load(kData + "hf_qwen3moe_fused");
  ASSERT_TRUE(per.is_ok() && fused.is_ok());
  const MoeWeights& a = (*per)->weights().layers[1].moe;
  EXPECT_EQ(a.gate[3].weight, (*per)->file().tensor("blk.1.ffn_gate.3.weight"));
  const MoeWeights& b = (*fused)->weights().layers[1].moe;
  const TensorView* gu = (*fused)->file().tensor("blk.1.ffn_gate_up_exps.weight");
  ASSERT_NE(gu, nullptr);
  const auto* base = static_cast<const uint8_t*>(gu->data);
  const size_t rb = gu->row_bytes();
  EXPECT_EQ(b.gate[3].weight->data, base + (3 * 64 + 0) * rb);   // expert 3: rows [0, 32) of its 64
  EXPECT_EQ(b.up[3].weight->data, base + (3 * 64 + 32) * rb);    // then up
  EXPECT_EQ(b.gate[3].weight->ne[1], 32);
}

// Sequences alone vs together (ragged), in chunks, on 1 or 2 threads, at
// every ISA level the CPU has: the same bits. The per-expert and fused
// layouts hold the same values, so they give the same bits too.
TEST(MoeReference, BatchInvariantAtEveryLevel) {
  const Isa saved = active_isa();
  for (int lv = 0; lv <= static_cast<int>(cpu_max_isa()); ++lv) {
    set_active_isa(static_cast<Isa>(lv));
    SCOPED_TRACE(isa_name(active_isa()));
    for (const char* a : kArchs) {
      SCOPED_TRACE(a);
      auto model = Model::load(kData + "hf_" + a);
      auto fused = Model::load(kData + "hf_" + a + "_fused");
      ASSERT_TRUE(model.is_ok() && fused.is_ok());
      const Model& m = **model;
      const int V = m.config().n_vocab;
      const std::vector<int32_t> s0 = {5, 17, 33, 41, 60, 7, 90, 12, 3, 44, 45, 46};
      const std::vector<int32_t> s1 = {9, 9, 80, 2, 31};
      ThreadPool pool2(2), pool1(1);
      const std::vector<float> alone = prefill_logits(m, pool2, s0, 64);
      ASSERT_EQ(alone.size(), s0.size() * V);
      EXPECT_EQ(prefill_logits(m, pool1, s0, 64), alone) << "one thread";
      EXPECT_EQ(prefill_logits(m, pool2, s0, 5), alone) << "chunks of 5";
      EXPECT_EQ(prefill_logits(**fused, pool2, s0, 64), alone) << "fused layout";
      // Ragged: s1 first, then s0, one step.
      ForwardContext ctx(m, pool2, 64);
      ContiguousKvCache c0(m.config(), 16), c1(m.config(), 16);
      SeqBatch b[2];
      b[0] = {s1.data(), static_cast<int64_t>(s1.size()), 0, &c1, false, true};
      b[1] = {s0.data(), static_cast<int64_t>(s0.size()), 0, &c0, false, true};
      std::vector<float> both((s0.size() + s1.size()) * V);
      ASSERT_TRUE(ctx.forward_ragged(b, 2, both.data()).is_ok());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), both.begin() + s1.size() * V)) << "in a ragged batch";
    }
  }
  set_active_isa(saved);
}

}  // namespace
}  // namespace ember
