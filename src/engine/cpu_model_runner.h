// CpuModelRunner: the ModelRunner over a loaded Model with host KV pages: a
// paged KV pool (KvBlockPool, in the chosen KvTypes), host swap pages, and
// ForwardContext's ragged forward pass on a Backend (kernels/backend.h) it
// owns: the CPU backend by default, or any backend whose buffers are host
// memory (Engine::create makes it from EngineConfig::backend). See
// model_runner.h.
//
// It runs plain step inputs (step_input.h): execute(SchedulerOutput) makes
// one (StepInputBuilder) and runs it with execute_step, which is all a rank
// of a tensor- or pipeline-parallel job runs (parallel_runner.h): the same
// code in one process or many. The tables it reads are its own copy, kept
// by the inputs' edits (SeqTables).
//
// A runner over a shard of a model (model/shard.h) is one rank: with a
// tensor-parallel shard it needs the group's collective (set_collective);
// as a pipeline stage it gets its input rows from the previous stage's rank
// and sends its output rows to the next (set_stage_links) instead of
// embedding the tokens or running the head.
//
// Ownership: borrows the Model, the ThreadPool and the collective (all must
// outlive it); owns the pool, the swap pages and the forward buffers. One
// thread (the engine thread, or a worker rank's main thread).
#pragma once

#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "engine/step_input.h"
#include "kernels/collective.h"
#include "model/model.h"

namespace ember {

// A pipeline stage's neighbours (ranks of the collective).
struct StageLinks {
  Collective* comm = nullptr;
  int prev = -1;  // the rank sending this stage's input rows [n_tokens, n_embd]; -1: it embeds the tokens
  int next = -1;  // the rank it sends its output rows to; -1: it runs the head
};
constexpr int kTagHidden = 11;  // the message tag of a stage's rows

class CpuModelRunner final : public ModelRunner {
 public:
  // max_batch: most tokens per forward pass; kv_types: the page formats.
  // The CPU backend over `pool`, or `backend` (owned; the model's weights
  // checked against it: Model::check_backend).
  CpuModelRunner(const Model& model, ThreadPool& pool, int max_batch, KvTypes kv_types = {});
  CpuModelRunner(const Model& model, std::unique_ptr<Backend> backend, int max_batch, KvTypes kv_types = {});

  int n_vocab() const override { return model_.config().n_logits(); }  // a truncated head's rows
  int64_t n_ctx_train() const override { return model_.config().n_ctx_train; }
  int max_batch_tokens() const override { return fwd_.max_batch(); }
  KvSpec kv_spec() const override { return kv_spec_from_config(model_.config(), kv_types_); }
  // `layout` may cover more layers than this model (a pipeline stage in the
  // job's layout, parallel_runner.h): its first n_layer entries are used.
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
  RunnerStepTimes last_step_times() const override { return times_; }
  bool measures_step_times() const override { return true; }
  // Experts the model's MoE layers have read over every execute() so far
  // (ForwardContext::moe_stats; zero without MoE layers).
  const MoeStats& moe_stats() const { return fwd_.moe_stats(); }

  // Runs one step input: the tables' edits, the page ops, then the forward
  // pass over its slices. Returns in.n_logit_rows rows of n_vocab logits
  // (valid until the next call), or null when this runner is a pipeline
  // stage without the head (its rows went to links.next). Errors: a bad
  // input (a table entry or page op out of range, a sequence without
  // tables, a step out of order), a failed collective.
  Result<float*> execute_step(const StepInput& in);

  // Tensor parallelism: the group of a tensor-parallel shard.
  void set_collective(Collective* comm) { fwd_.set_collective(comm); }
  // Pipeline parallelism: where this stage's rows come from and go.
  void set_stage_links(const StageLinks& links) { links_ = links; }
  const Model& model() const { return model_; }

 private:
  Status check_ops(const StepInput& in) const;
  const Model& model_;
  KvTypes kv_types_;
  ForwardContext fwd_;
  StageLinks links_;
  StepInputBuilder builder_;
  StepInput input_;                                   // execute()'s step
  SeqTables tables_;                                  // the tables the steps' edits make
  std::unique_ptr<KvBlockPool> kv_;
  KvSwapPages swap_;                                  // host pages by swap slot
  std::vector<std::unique_ptr<PagedKvCache>> views_;  // reused across steps, one per scheduled slice
  std::vector<KvFrontier> frontiers_;                 // where every sequence holding pages writes next
  std::vector<SeqBatch> batch_;
  // Room for n rows of logits: logits_ on a host backend; on a device
  // backend its page-locked host memory (Backend::alloc_host), grown as
  // needed, which the head's rows are copied into.
  Result<float*> logit_rows(size_t n);
  std::vector<float> logits_;                         // [rows, n_vocab]
  std::unique_ptr<BackendBuffer> logits_host_;        // a device backend's: [rows, n_vocab]
  double forward_seconds_ = 0;                        // execute_step's forward pass, wall
  RunnerStepTimes times_;                             // execute()'s
};

}  // namespace ember
