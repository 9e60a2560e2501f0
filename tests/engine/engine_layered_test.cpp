// The serving engine on models whose layers differ in head counts and FFN
// width (what structured pruning produces): the paged pool's page slots are
// as wide as their widest layer, and every layer reads and writes its own
// rows. Checked end to end: under chunked prefill, preemption and sliding
// windows, each generated token's log-probability equals, bit for bit, the
// one computed from ForwardContext logits over a contiguous cache.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "kernels/ops.h"
#include "model/tiny_layered_model.h"

namespace ember {
namespace {

TEST(EngineLayered, PagedPoolServesLayersOfDifferentWidths) {
  for (const test::TinySpec& spec : test::tiny_specs()) {
    SCOPED_TRACE(spec.arch);
    std::unique_ptr<Model> m = test::load_tiny(spec);
    ASSERT_TRUE(m);
    const ModelConfig& cfg = m->config();
    ASSERT_NE(cfg.layers[0].n_head_kv, cfg.layers[1].n_head_kv);
    ThreadPool pool(2);
    EngineConfig ec;
    ec.block_size = 4;
    ec.num_kv_blocks = 36;  // tight: preemptions
    ec.max_num_batched_tokens = 16;
    auto e = Engine::create(*m, pool, ec);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    std::mt19937 rng(17);
    std::map<std::string, std::vector<int32_t>> prompts;
    for (int i = 0; i < 6; ++i) {
      RequestParams p;
      for (int j = 0, len = 4 + static_cast<int>(rng() % 24); j < len; ++j)
        p.prompt.push_back(static_cast<int32_t>(rng() % cfg.n_vocab));
      p.sampling.temperature = i % 2 ? 0.f : 1.0f;
      p.sampling.seed = 40 + i;
      p.max_tokens = 12;
      p.logprobs = true;
      const std::string id = std::to_string(i);
      prompts[id] = p.prompt;
      ASSERT_TRUE((*e)->add_request(id, p).is_ok());
    }
    std::map<std::string, FinishedRequest> done;
    while ((*e)->has_unfinished()) {
      auto out = (*e)->step();
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      for (auto& f : out->finished) done[f.id] = f;
      ASSERT_TRUE((*e)->check_invariants().is_ok());
    }
    EXPECT_GT((*e)->stats().n_preemptions, 0);
    ASSERT_EQ(done.size(), 6u);
    const int V = cfg.n_vocab;
    for (auto& [id, f] : done) {
      std::vector<int32_t> toks = prompts[id];
      toks.insert(toks.end(), f.output.begin(), f.output.end());
      const int64_t n = static_cast<int64_t>(toks.size()) - 1;
      ForwardContext ctx(*m, pool, 64);
      ContiguousKvCache cache(cfg, n);
      std::vector<float> all(static_cast<size_t>(n) * V);
      ASSERT_TRUE(ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()).is_ok());
      ASSERT_EQ(f.logprobs.size(), f.output.size());
      for (size_t i = 0; i < f.output.size(); ++i) {
        const float* lg = all.data() + (prompts[id].size() - 1 + i) * V;
        const float want = static_cast<float>(lg[f.output[i]] - log_sum_exp_row(lg, V));
        EXPECT_EQ(f.logprobs[i], want) << "request " << id << " token " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ember
