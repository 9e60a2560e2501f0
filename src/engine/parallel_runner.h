// Tensor and pipeline parallelism over a Collective (kernels/collective.h;
// dist/ implements it over MPI): one job of N ranks, each holding one shard
// of the model (model/shard.h) in a CpuModelRunner. Rank 0 runs the engine
// (HTTP, scheduler, sampling) over a ParallelRunner; every other rank runs
// run_parallel_worker and only executes: each step, rank 0 sends the step
// input as plain data (step_input.h: tokens, positions, the block tables'
// changes, page ops) and every rank runs it with CpuModelRunner::
// execute_step, rank 0 included: the same code in one process or many.
//
//   tensor (tp = N): every rank runs every step over its shard; the forward
//     pass all-reduces after O and down and all-gathers the head's
//     vocabulary slices (model/forward.h), so rank 0 gets whole logits rows.
//   pipeline (pp = M): rank r holds stage stage_of(r); rank 0 holds the LAST
//     stage (the head: the logits stay where the sampler is) and ranks
//     1 .. M-1 the stages 0 .. M-2; the rows [tokens, n_embd] pass from
//     stage to stage (send / recv). The runner is pipelined: it takes M
//     steps before the first one's logits come back (submit / collect), so
//     the Engine keeps M micro-batches of disjoint requests in flight and
//     every stage works at once.
//   both (tp = N, pp = M, N x M ranks): each stage is a group of N
//     consecutive ranks, tensor-parallel among themselves over their own
//     communicator (a split of the job's: `tp_comm`); group 0 (ranks
//     0 .. N-1) holds the last stage, group g > 0 the stage g - 1. Tensor
//     rank t of a stage sends its rows to tensor rank t of the next (each
//     holds the whole rows after its all-reduce).
//
// A session (one ParallelRunner's life): rank 0 sends the runner's settings
// (max batch, KV formats, LongRoPE's factor set); each rank answers with the shape of its KV cache
// (KvSpec), which rank 0 merges into the job's layout (per layer position
// the window every stage agrees on, else global); at allocate_kv each rank
// says how many pages its budget holds and all allocate the smallest count,
// so a block id means the same page on every rank. The session ends when
// the runner is destroyed; shutdown_parallel_workers ends the workers.
//
// Failures: every collective has a deadline (dist: DistOptions); a failed
// step fails the runner for good (broken()): the engine then ends every
// request with an error, and the program ends the job.
//
// Ownership: the runner owns rank 0's CpuModelRunner and borrows the
// collective. Threading: the engine thread (one thread per rank).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cpu_model_runner.h"
#include "engine/step_input.h"
#include "kernels/collective.h"
#include "model/shard.h"

namespace ember {

struct ParallelPlan {
  int tp = 1;                    // tensor-parallel ranks (per stage)
  int pp = 1;                    // pipeline stages
  std::vector<int> stage_layers; // pp > 1: pp + 1 layer bounds of the stages, 0 .. n_layer

  int size() const { return tp * pp; }
  // The stage rank r holds (ranks 0 .. tp-1: the last) and its tensor rank
  // there; the rank of tensor rank t in stage s.
  int stage_of(int rank) const { return rank / tp == 0 ? pp - 1 : rank / tp - 1; }
  int tp_rank_of(int rank) const { return rank % tp; }
  int rank_of(int stage, int t) const { return (stage == pp - 1 ? 0 : stage + 1) * tp + t; }
  // What rank r loads.
  ModelShard shard(int rank) const;
  // Rank r's pipeline links (none without a pipeline).
  StageLinks links(int rank, Collective* comm) const;
  // Checks the plan against a job of `world` ranks and a model of n_layer
  // layers (stage bounds increasing from 0 to n_layer).
  Status validate(int world, int n_layer) const;
  std::string describe() const;  // "tensor parallel over 2 ranks", "pipeline of 2 stages (layers 0-8, 9-17)"
};

// The job's KV shape: per layer position, the largest rows and the window
// every rank that has that layer agrees on (0: global where they differ).
KvSpec merge_kv_specs(const std::vector<KvSpec>& specs);

class ParallelRunner final : public ModelRunner {
 public:
  // Starts a session with every other rank of `comm` (running
  // run_parallel_worker). `local` is rank 0's runner over its shard; this
  // sets its collective or stage links. tp_comm: the stage's tensor-parallel
  // group when the plan has both kinds (null: `comm` itself, for tensor
  // parallelism alone).
  static Result<std::unique_ptr<ParallelRunner>> create(std::unique_ptr<CpuModelRunner> local, Collective& comm,
                                                        const ParallelPlan& plan, Collective* tp_comm = nullptr);
  ~ParallelRunner() override;  // ends the session (the workers wait for the next)

  int n_vocab() const override { return local_->n_vocab(); }
  int64_t n_ctx_train() const override { return local_->n_ctx_train(); }
  int max_batch_tokens() const override { return local_->max_batch_tokens(); }
  KvSpec kv_spec() const override { return spec_; }
  Result<int32_t> allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes, int64_t n_blocks,
                              const KvPoolLimits& limits) override;
  KvMemory kv_memory() const override { return local_->kv_memory(); }
  Result<float*> execute(const SchedulerOutput& so) override;
  int max_in_flight() const override { return plan_.pp; }
  Status submit(const SchedulerOutput& so) override;
  Result<float*> collect() override;

  // A step or the session failed: every later call fails. broken() may be
  // read from any thread (a server's main thread watches it); failure()
  // only once broken() said true (it is set before, and never again).
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  const Status& failure() const { return failed_; }
  const ParallelPlan& plan() const { return plan_; }

 private:
  struct Step {  // a submitted step
    StepInput input;
    std::vector<uint8_t> header, payload;
    std::vector<int64_t> sends;
  };
  ParallelRunner(std::unique_ptr<CpuModelRunner> local, Collective& comm, const ParallelPlan& plan);
  Status start();
  Status fail(Status st);
  Status broadcast(uint32_t kind, const std::vector<uint8_t>& payload);

  std::unique_ptr<CpuModelRunner> local_;
  Collective& comm_;
  ParallelPlan plan_;
  KvSpec spec_;
  StepInputBuilder builder_;
  std::deque<Step> steps_;  // submitted, oldest first
  Status failed_;
  std::atomic<bool> broken_{false};
  bool session_ = false;
};

// Rank r > 0: answers sessions until rank 0 ends the job (kShutdown).
// `model` is this rank's shard (plan.shard(rank)); each session start sets
// its LongRoPE factor set to rank 0's (Model::use_rope_long_factors).
// Errors: a failed step or collective, a malformed message.
// tp_comm as in ParallelRunner::create.
Status run_parallel_worker(Model& model, ThreadPool& pool, Collective& comm, const ParallelPlan& plan,
                           Collective* tp_comm = nullptr);
// Rank 0, at the end: every worker returns from run_parallel_worker.
Status shutdown_parallel_workers(Collective& comm);

}  // namespace ember
