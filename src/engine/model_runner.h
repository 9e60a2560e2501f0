// ModelRunner: what the engine needs from a model: the shape of its KV
// cache, KV memory (pages, swap space), and execute(SchedulerOutput) — apply
// the step's KV memory ops, then one forward pass over every scheduled
// slice, returning the logits rows the schedule asks for. The KV formats
// are the KvSpec's business (engine/kv/kv_pool.h): a runner passes the
// step's frontiers and ops to its pool. The CPU runner wraps
// ForwardContext over a paged pool (KvBlockPool); the fake runner
// (fake_model_runner.h) needs no model file and checks the paging itself,
// so scheduler and KV tests run without one. A GPU runner implements the
// same interface; the tensor- and pipeline-parallel one (parallel_runner.h)
// sends each step as plain data (step_input.h) to the other ranks. A
// pipelined runner (pipeline parallelism) takes max_in_flight() > 1 steps
// before the first one's rows come back (submit / collect); the Engine then
// keeps that many steps in flight over disjoint sets of requests.
//
// Ownership and threading: owned by the Engine, called on the engine thread.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/kv/kv_pool.h"
#include "engine/scheduler.h"

namespace ember {

// Where the last execute() spent its time (seconds; ModelRunner::
// last_step_times): the host's preparation of the step (its input, block
// tables, page ops and views), the forward pass's wall time (host launches
// and waits for the backend included) and, from the backend's own
// measures over the whole execute() (Backend::times), host <-> backend
// copies and the device's time where it measures one.
struct RunnerStepTimes {
  double inputs = 0;
  double forward = 0;
  double copies = 0;
  bool device_measured = false;
  double device = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Width of a logits row: the vocabulary (a truncated draft head: its rows).
  virtual int n_vocab() const = 0;
  // Trained context length (the default max_model_len).
  virtual int64_t n_ctx_train() const = 0;
  // Most tokens one execute() may carry.
  virtual int max_batch_tokens() const = 0;
  // What each layer's K/V rows look like.
  virtual KvSpec kv_spec() const = 0;

  // Allocates the KV pages for `layout` (n_blocks > 0: that many; else as
  // many as fit in memory_bytes, after what the KV format reserves for
  // `limits`: KvBlockPool::create). Returns the number of pages; errors on a
  // budget below that reserve and one page, or a failed allocation. Call
  // once.
  virtual Result<int32_t> allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes, int64_t n_blocks,
                                      const KvPoolLimits& limits) = 0;
  // The KV memory (after allocate_kv): a page's bytes (the unit of swap
  // space) and what the format holds outside the pages (KvMemory).
  virtual KvMemory kv_memory() const = 0;

  // Applies so.kv_ops in order, then runs every scheduled slice (if any) in
  // one forward pass. Returns so.n_logit_rows rows of n_vocab logits, in
  // schedule order (every row of an all_logits slice, else one row for a
  // slice with want_logits), valid and writable until the next call.
  virtual Result<float*> execute(const SchedulerOutput& so) = 0;

  // The breakdown of the last execute() (or collect()); zeros where the
  // runner does not measure it (the engine then counts the whole execute()
  // as the forward pass).
  virtual RunnerStepTimes last_step_times() const { return {}; }
  virtual bool measures_step_times() const { return false; }

  // Pipelining: steps the runner takes before the first one's rows are
  // collected (1: execute() only).
  virtual int max_in_flight() const { return 1; }
  // Starts a step (its tables and tokens are read now); collect() returns
  // the oldest started step's rows, as execute() would have (valid until
  // the next collect()). Only for max_in_flight() > 1.
  virtual Status submit(const SchedulerOutput& so) { return Status::error("this model runner is not pipelined"); }
  virtual Result<float*> collect() { return Status::error("this model runner is not pipelined"); }
};

}  // namespace ember
