// Measured per-layer cost for pipeline stage balancing; see layer_cost.h.
#include "model/layer_cost.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"

namespace ember {

Result<std::vector<double>> measure_layer_seconds(const Model& model, ThreadPool& pool, int tokens, int reps) {
  if (tokens < 1 || tokens > 64 || reps < 1 || reps > 64)
    return Status::errorf("layer timing: {} tokens and {} passes must be in [1, 64]", tokens, reps);
  if (!model.shard().embeds() || model.shard().tensor_parallel())
    return Status::error("layer timing needs a model that embeds and is not tensor-parallel (the whole model)");
  const ModelConfig& cfg = model.config();
  const int L = cfg.n_layer;
  ForwardContext fc(model, pool, tokens);
  ContiguousKvCache cache(cfg, tokens);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int t = 0; t < tokens; ++t) ids[static_cast<size_t>(t)] = (t * 7919 + 13) % cfg.n_vocab;  // any valid ids
  SeqBatch sb;
  sb.tokens = ids.data();
  sb.n = tokens;
  sb.cache = &cache;
  sb.all_logits = true;
  const bool head = model.shard().has_head();
  std::vector<int64_t> rows(static_cast<size_t>(tokens));
  for (int t = 0; t < tokens; ++t) rows[static_cast<size_t>(t)] = t;
  std::vector<float> logits(head ? static_cast<size_t>(tokens) * cfg.n_logits() : 0);
  using clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> times(static_cast<size_t>(L) + 1);
  for (int pass = 0; pass <= reps; ++pass) {  // pass 0: untimed
    EMBER_RETURN_IF_ERROR(fc.prepare(&sb, 1));
    fc.embed();
    for (int l = 0; l <= L; ++l) {
      if (l == L && !head) break;
      const auto t0 = clock::now();
      if (l < L) {
        fc.run_layers(l, l + 1);
      } else {
        fc.head(rows.data(), tokens, logits.data());
      }
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      if (pass > 0) times[static_cast<size_t>(l)].push_back(s);
    }
  }
  EMBER_RETURN_IF_ERROR(fc.collective_status());
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> cost(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) cost[static_cast<size_t>(l)] = std::max(1e-9, median(times[static_cast<size_t>(l)]));
  if (head && L > 0) cost[static_cast<size_t>(L) - 1] += median(times[static_cast<size_t>(L)]);
  return cost;
}

}  // namespace ember
