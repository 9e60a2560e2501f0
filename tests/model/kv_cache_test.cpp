// The contiguous KV cache with q4c keys (model/kv_cache.h: f16 tails of
// unfinished token groups, encoded groups, tails of full groups freed by the
// next pass): the logits of every position are the same bits whether the
// sequence goes through in one forward pass, in passes of 7 or 8 tokens
// (groups filled across passes, passes that start inside a group), or token
// by token; and they differ from an f32 cache's (the keys really are
// quantized), on the tiny models of every architecture at head dim 32.
#include <gtest/gtest.h>

#include <vector>

#include "model/tiny_layered_model.h"

namespace ember {
namespace {

std::vector<float> logits_in_steps(const Model& m, ThreadPool& pool, const std::vector<int32_t>& t, KvTypes kv,
                                   int step) {
  ContiguousKvCache cache(m.config(), static_cast<int64_t>(t.size()), kv);
  ForwardContext ctx(m, pool, step);
  std::vector<float> out(t.size() * m.config().n_vocab);
  EXPECT_TRUE(ctx.forward(t.data(), static_cast<int64_t>(t.size()), 0, cache, nullptr, out.data()).is_ok());
  return out;
}

TEST(ContiguousKvCacheQ4c, SameBitsWhateverThePassesAndNotF32) {
  for (test::TinySpec spec : test::tiny_specs()) {
    spec.head_dim = 32;
    SCOPED_TRACE(spec.arch);
    std::unique_ptr<Model> m = test::load_tiny(spec);
    ASSERT_TRUE(m);
    ThreadPool pool(2);
    std::vector<int32_t> t;
    for (int i = 0; i < 41; ++i) t.push_back((i * 31 + 5) % m->config().n_vocab);
    for (KvTypes kv : {KvTypes{KvType::kQ4C, KvType::kQ4}, KvTypes{KvType::kQ4C, KvType::kF16, KvRotation::kHadamard,
                                                                   KvRotation::kHadamard}}) {
      const std::vector<float> whole = logits_in_steps(*m, pool, t, kv, 64);
      for (int step : {1, 7, 8}) EXPECT_EQ(logits_in_steps(*m, pool, t, kv, step), whole) << "passes of " << step;
      EXPECT_NE(logits_in_steps(*m, pool, t, {}, 64), whole);
    }
  }
}

}  // namespace
}  // namespace ember
