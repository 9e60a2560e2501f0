// Test helper: the logits of a 20-token prompt (prefill: more tokens than
// the few-token forms take, so the tile / token-lane kernels run), then of
// 1, 3 and 9 tokens appended (decode and the few-token forms), on one
// ForwardContext and cache: every matmul path of a model's weights.
#pragma once

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "model/model.h"

namespace ember {

inline std::vector<float> prompt_steps_logits(const Model& m, ThreadPool& pool) {
  ForwardContext ctx(m, pool, 32);
  ContiguousKvCache cache(m.config(), 64);
  std::vector<float> all;
  std::vector<int32_t> toks;
  for (int i = 0; i < 33; ++i) toks.push_back((i * 37 + 11) % m.config().n_vocab);
  int pos = 0;
  for (int n : {20, 1, 3, 9}) {
    std::vector<float> logits(static_cast<size_t>(n) * m.config().n_vocab);
    EXPECT_TRUE(ctx.forward(toks.data() + pos, n, pos, cache, nullptr, logits.data()).is_ok());
    all.insert(all.end(), logits.begin(), logits.end());
    pos += n;
  }
  return all;
}

}  // namespace ember
