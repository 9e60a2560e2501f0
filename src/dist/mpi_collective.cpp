// Collectives over MPI with a fixed reduction order; see mpi_collective.h.
#include "dist/mpi_collective.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "dist/job_notice.h"

namespace ember::dist {

using Clock = std::chrono::steady_clock;

struct MpiCollective::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  DistOptions opts;
  bool broken = false;
  bool owns_mpi = false;  // made by init(): finalizes MPI
  std::string broken_why;
  uint64_t n_ops = 0;
  std::unordered_map<int64_t, MPI_Request> sends;  // isend handles
  int64_t next_handle = 1;

  std::string mpi_error(int code) const {
    char buf[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
    return std::string(buf, static_cast<size_t>(len));
  }

  Status fail(int rank, const char* op, const std::string& why) {
    broken = true;
    broken_why = fmt::format("dist: rank {}: {} #{} failed: {}", rank, op, n_ops, why);
    set_current_op(nullptr, n_ops);
    return Status::error(broken_why);
  }

  // Polls the request until it completes, fails or the deadline passes
  // (timeout_s: 0 the options' deadline, < 0 none). Spins for kSpin first
  // (latency: a decode step's all-reduce takes microseconds when the ranks
  // arrive together), then yields the core between polls until kYield (a
  // rank sharing its core with the peer it waits for, as on an
  // oversubscribed host, lets it run instead of spinning its time slice
  // away), then sleeps briefly (longer after a second: a rank waiting for
  // work).
  static constexpr auto kSpin = std::chrono::microseconds(30);
  static constexpr auto kYield = std::chrono::milliseconds(2);
  Status wait(int rank, MPI_Request* req, const char* op, MPI_Status* status = MPI_STATUS_IGNORE,
              double timeout_s = 0) {
    const double limit = timeout_s == 0 ? opts.timeout_s : timeout_s;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    bool spinning = true;
    for (uint64_t polls = 0;; ++polls) {
      int done = 0;
      const int rc = MPI_Test(req, &done, status);
      if (rc != MPI_SUCCESS) return fail(rank, op, mpi_error(rc) + " (a peer rank died or the link broke)");
      if (done) {
        set_current_op(nullptr, n_ops);
        return Status::ok();
      }
      if (spinning && (polls & 15) != 0) continue;
      const auto waited = Clock::now() - start;
      if (spinning) {
        spinning = waited < kSpin;
        continue;
      }
      if (job_ending()) return fail(rank, op, "the MPI launcher is ending the job: another rank exited or was killed");
      if (limit > 0 && start + waited >= deadline)
        return fail(rank, op, fmt::format("no answer from the other ranks within {} s (a rank died or hangs)", limit));
      if (waited < kYield) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(waited > std::chrono::seconds(1) ? 500 : 50));
      }
    }
  }

  Status begin(int rank, const char* op, int rc) {
    if (rc != MPI_SUCCESS) return fail(rank, op, mpi_error(rc));
    return Status::ok();
  }
};

MpiCollective::MpiCollective() : impl_(std::make_unique<Impl>()) {}

Result<std::unique_ptr<MpiCollective>> MpiCollective::init(int* argc, char*** argv, const DistOptions& opts) {
  if (!(opts.timeout_s > 0)) return Status::error("dist: the timeout must be positive");
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      return Status::error("dist: MPI_Init_thread failed (is this program started by mpirun?)");
    if (provided < MPI_THREAD_SERIALIZED)
      return Status::error("dist: this MPI library cannot be called from a thread other than the main one");
  }
  std::unique_ptr<MpiCollective> c(new MpiCollective());
  c->impl_->opts = opts;
  c->impl_->owns_mpi = true;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c->impl_->comm) != MPI_SUCCESS) return Status::error("dist: MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(c->impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->impl_->comm, &c->rank_);
  MPI_Comm_size(c->impl_->comm, &c->size_);
  return c;
}

Result<std::unique_ptr<MpiCollective>> MpiCollective::split(int color, int key) {
  EMBER_RETURN_IF_ERROR(check_usable("split"));
  if (color < 0 || key < 0) return Status::error("dist: split: negative color or key");
  std::unique_ptr<MpiCollective> c(new MpiCollective());
  c->impl_->opts = impl_->opts;
  if (const int rc = MPI_Comm_split(impl_->comm, color, key, &c->impl_->comm); rc != MPI_SUCCESS)
    return Status::errorf("dist: MPI_Comm_split failed: {}", impl_->mpi_error(rc));
  MPI_Comm_set_errhandler(c->impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->impl_->comm, &c->rank_);
  MPI_Comm_size(c->impl_->comm, &c->size_);
  return c;
}

MpiCollective::~MpiCollective() {
  if (impl_->comm != MPI_COMM_NULL && !impl_->broken) MPI_Comm_free(&impl_->comm);
  if (!impl_->owns_mpi) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failure MPI may be unable to finalize (a peer is gone): leave
  // the process's end to the caller.
  if (!finalized && !impl_->broken) MPI_Finalize();
}

Status MpiCollective::check_usable(const char* op) const {
  if (impl_->broken) return Status::errorf("dist: {}: the communicator failed before: {}", op, impl_->broken_why);
  return Status::ok();
}

std::string MpiCollective::library_version() const {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  const size_t nl = s.find_first_of("\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::string MpiCollective::host_name() const {
  char buf[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

Status MpiCollective::all_reduce_sum(float* data, size_t n) {
  EMBER_RETURN_IF_ERROR(check_usable("all_reduce"));
  if (n > static_cast<size_t>(INT32_MAX) / static_cast<size_t>(size_))
    return Status::errorf("dist: all_reduce of {} floats is too large for one message", n);
  ++impl_->n_ops;
  set_current_op("all_reduce", impl_->n_ops);
  const size_t p = static_cast<size_t>(size_);
  if (p == 1) return Status::ok();
  MPI_Request req;
  if (n * sizeof(float) <= kGatherAllReduceBytes || n < p) {
    scratch_.resize(n * p);
    EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "all_reduce",
                                       MPI_Iallgather(data, static_cast<int>(n), MPI_FLOAT, scratch_.data(),
                                                      static_cast<int>(n), MPI_FLOAT, impl_->comm, &req)));
    EMBER_RETURN_IF_ERROR(impl_->wait(rank_, &req, "all_reduce"));
    std::memcpy(data, scratch_.data(), n * sizeof(float));
    for (size_t r = 1; r < p; ++r) {
      const float* x = scratch_.data() + r * n;
      for (size_t i = 0; i < n; ++i) data[i] += x[i];
    }
    return Status::ok();
  }
  // Reduce-scatter: chunk r (rank r folds it) of every rank's vector.
  std::vector<int> counts(p), displs(p);
  for (size_t r = 0; r < p; ++r) {
    const size_t b = n * r / p, e = n * (r + 1) / p;
    counts[r] = static_cast<int>(e - b);
    displs[r] = static_cast<int>(b);
  }
  const size_t mine = static_cast<size_t>(counts[static_cast<size_t>(rank_)]);
  scratch_.resize(mine * p);
  std::vector<int> rcounts(p, static_cast<int>(mine)), rdispls(p);
  for (size_t r = 0; r < p; ++r) rdispls[r] = static_cast<int>(r * mine);
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "all_reduce",
                                     MPI_Ialltoallv(data, counts.data(), displs.data(), MPI_FLOAT, scratch_.data(),
                                                    rcounts.data(), rdispls.data(), MPI_FLOAT, impl_->comm, &req)));
  EMBER_RETURN_IF_ERROR(impl_->wait(rank_, &req, "all_reduce"));
  float* own = data + displs[static_cast<size_t>(rank_)];
  std::memcpy(own, scratch_.data(), mine * sizeof(float));
  for (size_t r = 1; r < p; ++r) {
    const float* x = scratch_.data() + r * mine;
    for (size_t i = 0; i < mine; ++i) own[i] += x[i];
  }
  // All-gather the folded chunks back into every rank's vector.
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "all_reduce",
                                     MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, counts.data(), displs.data(),
                                                     MPI_FLOAT, impl_->comm, &req)));
  return impl_->wait(rank_, &req, "all_reduce");
}

Status MpiCollective::mpi_all_reduce_sum(float* data, size_t n) {
  EMBER_RETURN_IF_ERROR(check_usable("mpi_all_reduce"));
  if (n > static_cast<size_t>(INT32_MAX)) return Status::error("dist: message too large");
  ++impl_->n_ops;
  set_current_op("mpi_all_reduce", impl_->n_ops);
  MPI_Request req;
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "mpi_all_reduce",
                                     MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                                    impl_->comm, &req)));
  return impl_->wait(rank_, &req, "mpi_all_reduce");
}

Status MpiCollective::all_gather(const float* in, size_t n, float* out) {
  EMBER_RETURN_IF_ERROR(check_usable("all_gather"));
  if (n > static_cast<size_t>(INT32_MAX) / static_cast<size_t>(size_))
    return Status::errorf("dist: all_gather of {} floats is too large for one message", n);
  ++impl_->n_ops;
  set_current_op("all_gather", impl_->n_ops);
  MPI_Request req;
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "all_gather",
                                     MPI_Iallgather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n),
                                                    MPI_FLOAT, impl_->comm, &req)));
  return impl_->wait(rank_, &req, "all_gather");
}

Status MpiCollective::send(const void* data, size_t bytes, int dst, int tag) {
  EMBER_RETURN_IF_ERROR(check_usable("send"));
  if (dst < 0 || dst >= size_ || dst == rank_) return Status::errorf("dist: send to rank {} of {}", dst, size_);
  if (bytes > static_cast<size_t>(INT32_MAX) || tag < 0) return Status::error("dist: send: bad size or tag");
  ++impl_->n_ops;
  set_current_op("send", impl_->n_ops);
  MPI_Request req;
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "send",
                                     MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dst, tag, impl_->comm, &req)));
  return impl_->wait(rank_, &req, "send");
}

Result<int64_t> MpiCollective::isend(const void* data, size_t bytes, int dst, int tag) {
  EMBER_RETURN_IF_ERROR(check_usable("send"));
  if (dst < 0 || dst >= size_ || dst == rank_) return Status::errorf("dist: send to rank {} of {}", dst, size_);
  if (bytes > static_cast<size_t>(INT32_MAX) || tag < 0) return Status::error("dist: send: bad size or tag");
  ++impl_->n_ops;
  MPI_Request req;
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "send",
                                     MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dst, tag, impl_->comm, &req)));
  const int64_t h = impl_->next_handle++;
  impl_->sends.emplace(h, req);
  return h;
}

Status MpiCollective::wait(int64_t handle) {
  auto it = impl_->sends.find(handle);
  if (it == impl_->sends.end()) return Status::errorf("dist: wait on an unknown send {}", handle);
  MPI_Request req = it->second;
  impl_->sends.erase(it);
  EMBER_RETURN_IF_ERROR(check_usable("send"));
  set_current_op("send", impl_->n_ops);
  return impl_->wait(rank_, &req, "send");
}

Status MpiCollective::recv(void* data, size_t bytes, int src, int tag, double timeout_s) {
  EMBER_RETURN_IF_ERROR(check_usable("recv"));
  if (src < 0 || src >= size_ || src == rank_) return Status::errorf("dist: recv from rank {} of {}", src, size_);
  if (bytes > static_cast<size_t>(INT32_MAX) || tag < 0) return Status::error("dist: recv: bad size or tag");
  ++impl_->n_ops;
  set_current_op("recv", impl_->n_ops);
  MPI_Request req;
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "recv",
                                     MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, src, tag, impl_->comm, &req)));
  MPI_Status st;
  EMBER_RETURN_IF_ERROR(impl_->wait(rank_, &req, "recv", &st, timeout_s));
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if (static_cast<size_t>(got) != bytes)
    return impl_->fail(rank_, "recv", fmt::format("rank {} sent {} bytes, {} expected", src, got, bytes));
  return Status::ok();
}

Status MpiCollective::barrier() {
  EMBER_RETURN_IF_ERROR(check_usable("barrier"));
  ++impl_->n_ops;
  set_current_op("barrier", impl_->n_ops);
  MPI_Request req;
  EMBER_RETURN_IF_ERROR(impl_->begin(rank_, "barrier", MPI_Ibarrier(impl_->comm, &req)));
  return impl_->wait(rank_, &req, "barrier");
}

}  // namespace ember::dist

namespace ember::dist {

void abort_job(int code) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace ember::dist
