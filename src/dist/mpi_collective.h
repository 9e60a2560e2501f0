// The Collective interface (kernels/collective.h) over MPI (Debian's
// OpenMPI: shared memory between ranks of one host, TCP between hosts).
//
// all_reduce_sum keeps the rank-order contract with two algorithms that
// fold the same way: small messages (up to kGatherAllReduceBytes) gather
// every rank's vector to every rank (one MPI_Iallgather) and fold locally;
// larger ones reduce-scatter by chunk (MPI_Ialltoallv: rank r folds chunk r
// of every rank's vector, in rank order) then all-gather the folded chunks,
// moving 2 (N-1)/N of the vector per rank like a ring all-reduce.
//
// Every operation is a non-blocking MPI call polled against a deadline
// (DistOptions::timeout_s), with MPI errors returned rather than aborting,
// so a dead or stuck peer is an error, never a hang; the launcher (mpirun)
// usually notices a dead rank first and ends the job (see job_notice.h for
// the message rank 0 then prints).
//
// A rank may also be told that the job is ending (job_notice.h,
// note_job_ending: the launcher's SIGTERM in a program that takes its
// signals itself, as `ember serve` does): every wait then fails at once, so
// the requests in flight end with an error instead of being cut off.
//
// Ownership: init() calls MPI_Init_thread; the MpiCollective init() made
// calls MPI_Finalize when destroyed, after any split() of it (after a
// failure, MPI_Abort is left to the caller).
// Threading: MPI_THREAD_SERIALIZED: one thread at a time uses it (the
// engine thread of a server, not necessarily the one that called init()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/collective.h"

namespace ember::dist {

struct DistOptions {
  double timeout_s = 60;  // longest wait of one operation before it fails
};

// Ends the job now: MPI_Abort on the world (the launcher then stops every
// rank). For a program that gives up after a failed collective.
[[noreturn]] void abort_job(int code);

// Messages up to this many bytes per rank are all-reduced by all-gather.
constexpr size_t kGatherAllReduceBytes = 64 << 10;

class MpiCollective final : public Collective {
 public:
  // Initializes MPI (argc / argv may be null) and duplicates the world
  // communicator. Errors if MPI cannot start.
  static Result<std::unique_ptr<MpiCollective>> init(int* argc, char*** argv, const DistOptions& opts = {});
  ~MpiCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(float* data, size_t n) override;
  Status all_gather(const float* in, size_t n, float* out) override;
  Status send(const void* data, size_t bytes, int dst, int tag) override;
  using Collective::recv;
  Status recv(void* data, size_t bytes, int src, int tag, double timeout_s) override;
  Result<int64_t> isend(const void* data, size_t bytes, int dst, int tag) override;
  Status wait(int64_t handle) override;
  Status barrier() override;

  // A communicator over the ranks that pass the same `color`, ranked by
  // `key` (MPI_Comm_split; every rank of this one calls it, as one
  // collective): tensor parallelism within a pipeline stage. It does not
  // own MPI: destroy it before this one.
  Result<std::unique_ptr<MpiCollective>> split(int color, int key);

  // The library's own collective, for comparison in benchmarks: MPI_Allreduce
  // with MPI_SUM (no order promised).
  Status mpi_all_reduce_sum(float* data, size_t n);
  // "Open MPI v4.1.4, ..." and the host name.
  std::string library_version() const;
  std::string host_name() const;

 private:
  struct Impl;  // the MPI handles (mpi.h stays out of this header)
  MpiCollective();
  Status check_usable(const char* op) const;

  int rank_ = 0, size_ = 1;
  std::unique_ptr<Impl> impl_;
  std::vector<float> scratch_;  // gathered vectors or chunks, [size][...]
};

}  // namespace ember::dist
