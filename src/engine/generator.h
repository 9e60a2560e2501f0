// Generator: prefill + decode loop for one sequence on a contiguous KV
// cache, with timing. Used by `ember run` and `ember bench`; the serving
// engine (paged, batched) builds on the same ForwardContext.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace ember {

struct GenerationStats {
  int64_t n_prompt = 0;
  double prefill_seconds = 0;
  int64_t n_generated = 0;
  int64_t n_decoded = 0;      // single-token forward passes (generated tokens fed back)
  double decode_seconds = 0;  // time spent in those passes
  double prefill_tps() const { return prefill_seconds > 0 ? n_prompt / prefill_seconds : 0; }
  double decode_tps() const { return decode_seconds > 0 ? n_decoded / decode_seconds : 0; }
};

class Generator {
 public:
  // n_ctx: KV cache capacity in tokens (prompt + generated); kv_types: its
  // formats (must fit the model: check with kv_type_check first).
  Generator(const Model& model, ThreadPool& pool, int64_t n_ctx, int max_batch = 512, KvTypes kv_types = {});

  // Runs `prompt`, then samples up to n_predict tokens. on_token(token) is
  // called for each sampled token; returning false stops generation (the
  // token is kept). Generation also stops when the context is full.
  Status generate(const std::vector<int32_t>& prompt, int n_predict, Sampler& sampler,
                  const std::function<bool(int32_t)>& on_token, GenerationStats* stats);

  // Lower-level access (benchmarks, tests).
  Status prefill(const std::vector<int32_t>& tokens, int64_t pos0, float* logits);
  Status decode_one(int32_t token, int64_t pos, float* logits);
  int64_t n_ctx() const { return cache_.capacity(); }
  size_t kv_bytes() const { return cache_.memory_bytes(); }
  const std::vector<float>& logits() const { return logits_; }

 private:
  const Model& model_;
  ForwardContext ctx_;
  ContiguousKvCache cache_;
  std::vector<float> logits_;
};

}  // namespace ember
