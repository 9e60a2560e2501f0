// Collective communication that a forward pass split across ranks calls
// (tensor parallelism: an all-reduce after the attention output projection
// and after the FFN down projection, an all-gather of vocabulary shards at
// the head; pipeline parallelism: activations sent from one stage to the
// next). Defined here, below model/, so that the model never depends on a
// transport: the dist/ room implements it over MPI (dist/mpi_collective.h),
// a GPU build would over NCCL.
//
// Arithmetic contract (tested bit for bit, tests/dist/): all_reduce_sum adds
// the ranks' values element by element in rank order,
//     out[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{n-1}[i]   (f32 adds),
// whatever the message size, the transport's algorithm or the run, so every
// rank holds the same bits and a run repeats them exactly (MPI_Allreduce
// promises neither). The reference is that fold, written out in a loop.
//
// Errors: a peer that died, a broken link, or no answer within the
// communicator's deadline come back as a Status naming the operation and
// the ranks; the communicator is then broken and every later call fails at
// once. Calls never hang past the deadline.
//
// Threading: one thread per rank calls a communicator (collectives must be
// called in the same order on every rank).
#pragma once

#include <cstddef>

#include "core/status.h"

namespace ember {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[n] (every rank the same n) := the sum over ranks, in rank order.
  virtual Status all_reduce_sum(float* data, size_t n) = 0;
  // out[size() * n]: out[r * n + i] = rank r's in[i].
  virtual Status all_gather(const float* in, size_t n, float* out) = 0;
  // Point to point (pipeline stages, step inputs): blocking until the
  // bytes are handed over; a send matches the recv of the same tag on the
  // peer, in order. recv's timeout_s: 0 the communicator's deadline, < 0 none
  // (a rank that waits for work).
  virtual Status send(const void* data, size_t bytes, int dst, int tag) = 0;
  virtual Status recv(void* data, size_t bytes, int src, int tag, double timeout_s) = 0;
  Status recv(void* data, size_t bytes, int src, int tag) { return recv(data, bytes, src, tag, 0); }
  // A send that returns at once with a handle: the bytes must stay valid
  // and unchanged until wait(handle) returns (which every isend needs).
  virtual Result<int64_t> isend(const void* data, size_t bytes, int dst, int tag) = 0;
  virtual Status wait(int64_t handle) = 0;
  virtual Status barrier() = 0;
};

}  // namespace ember
