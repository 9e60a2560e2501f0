// Tensor and pipeline parallelism for `ember run`, `ember serve` and `ember
// bench`: the flags (--tensor-parallel-size N, --pipeline-parallel-size M,
// --pipeline-layers A,B,.., --dist-timeout S) and the job they start when
// the program runs under mpirun (engine/parallel_runner.h): MPI, this rank's
// shard of the model, and either rank 0's model runner or the other ranks'
// worker loop. Every rank parses the same command line; rank 0 does the
// command's work (HTTP, sampling, output), the others only execute steps.
//
// Ownership: a ParallelJob owns the communicators (the job's, and with both
// kinds its stage's tensor group); destroying it on rank 0 ends the workers
// first. One per process.
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "engine/parallel_runner.h"
#include "engine/speculative/proposer.h"
#include "model/model.h"

namespace ember::cli {

struct ParallelOptions {
  int tp = 1, pp = 1;
  std::string pipeline_layers;  // "9,9": layers per stage; empty: balanced by pipeline_balance
  std::string pipeline_balance = "bytes";  // bytes (each layer's weight bytes) | measured (each layer's time)
  float timeout_s = 300;        // longest wait of one collective / message

  void add_to(ArgParser& p);
  bool enabled() const { return tp > 1 || pp > 1; }
};

class ParallelJob;
// The command's job when the flags ask for one (*job stays null without
// them): the model path from -m (`model_flag`). Speculative decoding: n-gram
// drafts and a draft model (run whole on rank 0) with either kind (the
// verification slices are plain step inputs; with a pipeline the engine
// then runs one step at a time); layerskip is refused.
// Returns 0, or the exit code after printing the usage error.
int start_parallel_job(const ArgParser& p, const ParallelOptions& o, const std::string& model_flag, SpecMethod spec,
                       std::unique_ptr<ParallelJob>* job);

class ParallelJob {
 public:
  // Starts MPI and checks the job against the flags and the model file at
  // `model_path` (its layer count; stage bounds from --pipeline-layers, or
  // balanced by the bytes each layer's weights take, what a decode step
  // reads, or with --pipeline-balance measured by each layer's time: rank 0
  // maps the whole model, times every layer (model/layer_cost.h; the head
  // counts to the last layer) and sends the times to the other ranks, so
  // every rank computes the same stages). Errors: built without MPI, not
  // started by mpirun with the right number of ranks, a plan the model
  // cannot take, a timing that failed.
  static Result<std::unique_ptr<ParallelJob>> start(const ParallelOptions& o, const std::string& model_path);
  ~ParallelJob();

  int rank() const;
  bool leader() const { return rank() == 0; }
  const ParallelPlan& plan() const { return plan_; }
  ModelShard shard() const { return plan_.shard(rank()); }
  std::string describe() const;  // "tensor parallelism over 2 ranks (rank 0 of 2 on host ...)"

  // Rank 0: the engine's model runner over this rank's shard.
  Result<std::unique_ptr<ParallelRunner>> make_runner(const Model& model, ThreadPool& pool, int max_batch,
                                                      KvTypes kv_types);
  // Rank > 0: serves the job's sessions until rank 0 ends it; the exit code.
  int run_worker(Model& model, int threads, const char* command);
  // `ember serve` took a SIGTERM (the launcher ending the job): pending
  // collectives fail at once so the requests in flight end with an error.
  void note_ending();
  // The job failed for good (a broken collective): ends every rank now.
  [[noreturn]] void abort(int code);

 private:
  struct Impl;
  ParallelJob();
  std::unique_ptr<Impl> impl_;
  ParallelPlan plan_;
};

}  // namespace ember::cli
