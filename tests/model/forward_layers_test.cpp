// The forward pass with layers that differ (per-layer head counts, KV heads
// and FFN widths, as structured pruning makes them): tiny models of each
// architecture's wiring against a float64 reference forward pass written in
// the test, batch invariance with such layers, the KV cache sized for the
// largest layer, and what Model::from_parts rejects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "model/model.h"
#include "tiny_layered_model.h"

namespace ember {
namespace {

using test::load_tiny;
using test::TinySpec;

std::vector<int32_t> some_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

std::vector<float> all_logits(const Model& m, ThreadPool& pool, int max_batch, const std::vector<int32_t>& toks) {
  ForwardContext ctx(m, pool, max_batch);
  ContiguousKvCache cache(m.config(), static_cast<int64_t>(toks.size()));
  std::vector<float> all(toks.size() * m.config().n_vocab);
  EXPECT_TRUE(ctx.forward(toks.data(), static_cast<int64_t>(toks.size()), 0, cache, nullptr, all.data()).is_ok());
  return all;
}

TEST(ForwardLayers, PerLayerSizesMatchFloatReference) {
  ThreadPool pool(2);
  for (const TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = load_tiny(s);
    ASSERT_TRUE(m);
    const ModelConfig& c = m->config();
    // The layers really differ, and one has more KV heads than the file says.
    ASSERT_EQ(c.layers[1].n_head_kv, 4);
    ASSERT_EQ(c.n_head_kv, 2);
    ASSERT_EQ(c.layers[2].n_head, 2);
    ASSERT_EQ(c.layers[2].n_ff, 24);
    ASSERT_EQ(c.max_n_ff(), 64);
    const int V = c.n_vocab;
    const std::vector<int32_t> toks = some_tokens(9, V, 3);
    const std::vector<test::Vec> ref = test::reference_forward(*m, toks);
    // max_batch 4: the 9 tokens run in chunks of 4, 4, 1 (later chunks read
    // the K/V of earlier ones).
    const std::vector<float> got = all_logits(*m, pool, 4, toks);
    for (size_t t = 0; t < toks.size(); ++t) {
      const float* row = got.data() + t * V;
      const double d = test::rel_l2(row, ref[t]);
      EXPECT_LT(d, 1e-5) << "position " << t;
      const auto ref_top = std::max_element(ref[t].begin(), ref[t].end()) - ref[t].begin();
      EXPECT_EQ(std::max_element(row, row + V) - row, ref_top) << "position " << t;
    }
    // Same bits in one batch as in chunks.
    const std::vector<float> one = all_logits(*m, pool, 16, toks);
    EXPECT_EQ(0, std::memcmp(one.data(), got.data(), got.size() * sizeof(float)));
  }
}

TEST(ForwardLayers, RaggedBatchOfDifferingLayersMatchesEachSequenceAlone) {
  ThreadPool pool(2);
  for (const TinySpec& s : test::tiny_specs()) {
    SCOPED_TRACE(s.arch);
    auto m = load_tiny(s);
    ASSERT_TRUE(m);
    const int V = m->config().n_vocab;
    const std::vector<int32_t> a = some_tokens(7, V, 11), b = some_tokens(5, V, 12);
    const std::vector<float> ra = all_logits(*m, pool, 16, a), rb = all_logits(*m, pool, 16, b);
    ContiguousKvCache ca(m->config(), 16), cb(m->config(), 16);
    ForwardContext ctx(*m, pool, 16);
    // a's first 4 tokens alone, then a's last 3 with all of b in one batch.
    SeqBatch first{a.data(), 4, 0, &ca, false, false};
    ASSERT_TRUE(ctx.forward_ragged(&first, 1, nullptr).is_ok());
    const SeqBatch batch[] = {{a.data() + 4, 3, 4, &ca, false, true}, {b.data(), 5, 0, &cb, true, false}};
    std::vector<float> logits(4 * V);
    ASSERT_TRUE(ctx.forward_ragged(batch, 2, logits.data()).is_ok());
    EXPECT_EQ(0, std::memcmp(logits.data(), ra.data() + 4 * V, 3 * V * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(logits.data() + 3 * V, rb.data() + 4 * V, V * sizeof(float)));
  }
}

TEST(ForwardLayers, ContiguousKvCacheRowsFitTheLargestLayer) {
  auto m = load_tiny(TinySpec{});
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  ASSERT_GT(c.max_n_head_kv(), c.n_head_kv);
  ContiguousKvCache cache(c, 10);
  const int64_t row = static_cast<int64_t>(c.max_n_head_kv()) * c.head_dim;
  for (int il = 0; il < c.n_layer; ++il) {
    const KvView v = cache.view(il);
    EXPECT_EQ(v.k_row_bytes, row * 4);
    EXPECT_EQ(v.v_row_bytes, static_cast<int64_t>(c.max_n_head_kv()) * c.head_dim_v * 4);
    EXPECT_EQ(cache.k_row(il, 3) - cache.k_row(il, 2), row * 4);
  }
  EXPECT_EQ(cache.memory_bytes(), static_cast<size_t>(10 * 2 * row * sizeof(float) * c.n_layer));
}

TEST(ForwardLayers, FromPartsRejectsWhatTheForwardPassCannotRun) {
  const TinySpec s;
  struct Case {
    const char* what;
    std::function<void(ModelConfig&, ModelWeights&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"shard", [](ModelConfig&, ModelWeights& w) { w.layers[0].v.shard.split = LinearShard::Split::kRows; },
       {"layer 0 attn_v", "a tensor-parallel shard", "holds the whole model"}},
      {"output shard", [](ModelConfig&, ModelWeights& w) { w.output.shard.split = LinearShard::Split::kCols; },
       {"output", "a tensor-parallel shard", "holds the whole model"}},
      {"ffn width", [](ModelConfig& c, ModelWeights&) { c.layers[2].n_ff = 32; },
       {"layer 2 ffn_gate", "weight is [24, 32]", "needs [32, 32]"}},
      {"head grouping", [](ModelConfig& c, ModelWeights&) { c.layers[0].n_head_kv = 3; },
       {"layer 0", "multiple of n_head_kv"}},
      {"missing norm", [](ModelConfig&, ModelWeights& w) { w.layers[2].ffn_norm = nullptr; },
       {"layer 2", "norm"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto m = load_tiny(s, k.edit);
    ASSERT_FALSE(m.is_ok());
    for (const std::string& part : k.message)
      EXPECT_NE(m.status().message().find(part), std::string::npos) << m.status().message();
  }
  // Unedited, the same model loads.
  EXPECT_TRUE(load_tiny(s, [](ModelConfig&, ModelWeights&) {}).is_ok());
}

}  // namespace
}  // namespace ember
