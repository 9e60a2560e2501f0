// Test helper: greedy decoding straight on a ForwardContext (no sampler).
#pragma once

#include <vector>

#include "model/model.h"

namespace ember {

inline std::vector<int32_t> greedy_continue(ForwardContext& ctx, KvCache& cache, const float* last_logits, int V,
                                            int64_t pos, int n) {
  std::vector<int32_t> out;
  std::vector<float> logits(last_logits, last_logits + V);
  for (int i = 0; i < n; ++i) {
    int best = 0;
    for (int j = 1; j < V; ++j)
      if (logits[j] > logits[best]) best = j;
    out.push_back(best);
    if (i + 1 == n) break;
    if (!ctx.forward(&out.back(), 1, pos++, cache, logits.data()).is_ok()) break;
  }
  return out;
}

}  // namespace ember
