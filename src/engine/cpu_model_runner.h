// CpuModelRunner: the ModelRunner over a loaded Model on the CPU: a paged
// KV pool (KvBlockPool, in the chosen KvTypes), host swap pages, and
// ForwardContext's ragged forward pass. See model_runner.h.
//
// Ownership: borrows the Model and the ThreadPool (both must outlive it);
// owns the pool, the swap pages and the forward buffers. Engine thread only.
#pragma once

#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "model/model.h"

namespace ember {

class CpuModelRunner final : public ModelRunner {
 public:
  // max_batch: most tokens per forward pass; kv_types: the page formats.
  CpuModelRunner(const Model& model, ThreadPool& pool, int max_batch, KvTypes kv_types = {});

  int n_vocab() const override { return model_.config().n_logits(); }  // a truncated head's rows
  int64_t n_ctx_train() const override { return model_.config().n_ctx_train; }
  int max_batch_tokens() const override { return fwd_.max_batch(); }
  KvSpec kv_spec() const override { return kv_spec_from_config(model_.config(), kv_types_); }
  Result<int32_t> allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes, int64_t n_blocks,
                              const KvPoolLimits& limits) override;
  KvMemory kv_memory() const override { return kv_ ? kv_->memory() : KvMemory{}; }
  // The final residual row [n_embd] behind logits row j of the last
  // execute (a slice without given rows).
  const float* hidden_of_row(int j) const {
    return fwd_.hidden() + fwd_.logit_rows()[static_cast<size_t>(j)] * model_.config().n_embd;
  }
  // The KV pages (after allocate_kv; null before).
  KvBlockPool* kv_pool() { return kv_.get(); }
  const KvBlockPool* kv_pool() const { return kv_.get(); }
  Result<float*> execute(const SchedulerOutput& so) override;
  // Experts the model's MoE layers have read over every execute() so far
  // (ForwardContext::moe_stats; zero without MoE layers).
  const MoeStats& moe_stats() const { return fwd_.moe_stats(); }

 private:
  const Model& model_;
  KvTypes kv_types_;
  ForwardContext fwd_;
  std::unique_ptr<KvBlockPool> kv_;
  KvSwapPages swap_;                                  // host pages by swap slot
  std::vector<std::unique_ptr<PagedKvCache>> views_;  // reused across steps, one per scheduled slice
  std::vector<KvFrontier> frontiers_;                 // where every sequence holding pages writes next
  std::vector<SeqBatch> batch_;
  std::vector<std::vector<int32_t>> spec_tokens_;     // per slice: the tokens of a verification slice
  std::vector<float> logits_;                         // [rows, n_vocab]
};

}  // namespace ember
