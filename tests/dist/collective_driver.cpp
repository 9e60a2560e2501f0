// Test driver for dist/ (run under mpirun by tests/dist/dist_test.sh):
//
//   collective_driver collectives   every collective against its exact
//                                   expected bits; prints a digest of the
//                                   all-reduce results (the same on every
//                                   rank; the script compares runs and
//                                   transports)
//   collective_driver kill          rank 1 kills itself (SIGKILL) in the middle
//                                   of a loop of all-reduces
//   collective_driver hang T        rank 1 stops taking part; the others must
//                                   fail within T s with a clear error
//
// Each rank computes every rank's inputs (a hash of rank and index), so the
// expected values are known everywhere: the all-reduce's reference is the
// rank-order fold of kernels/collective.h written out as a loop.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dist/job_notice.h"
#include "dist/mpi_collective.h"

namespace {

using ember::Status;
using ember::dist::MpiCollective;

// A value of rank r at index i: mixed signs and magnitudes 2^-20 .. 2^20,
// so that the order of the additions changes the rounded sums.
float input(int r, size_t i) {
  uint64_t h = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(r + 1) * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const float frac = static_cast<float>(h & 0xFFFFFF) / 16777216.0f + 0.5f;
  const int e = static_cast<int>((h >> 24) % 41) - 20;
  return ((h >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(frac, e);
}

uint64_t fnv(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

int failures = 0;
void check(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
    ++failures;
  }
}

int run_collectives(MpiCollective& c) {
  const int p = c.size(), me = c.rank();
  uint64_t digest = 0;
  int order_matters = 0;
  // Around the all-gather / reduce-scatter switch and far past it.
  for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{16384}, size_t{16385}, size_t{100003}, size_t{1} << 20}) {
    std::vector<float> x(n), want(n), rev(n);
    for (size_t i = 0; i < n; ++i) x[i] = input(me, i);
    for (size_t i = 0; i < n; ++i) {
      float s = input(0, i);
      for (int r = 1; r < p; ++r) s += input(r, i);
      want[i] = s;
      float t = input(p - 1, i);
      for (int r = p - 2; r >= 0; --r) t += input(r, i);
      rev[i] = t;
    }
    Status st = c.all_reduce_sum(x.data(), n);
    check(st.is_ok(), "all_reduce: " + st.message(), me);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += std::memcmp(&x[i], &want[i], sizeof(float)) != 0;
    check(bad == 0, "all_reduce n=" + std::to_string(n) + ": " + std::to_string(bad) + " elements differ from the rank-order fold", me);
    order_matters += std::memcmp(want.data(), rev.data(), n * sizeof(float)) != 0;
    digest = fnv(x.data(), n * sizeof(float), digest ^ n);

    std::vector<float> g(n * static_cast<size_t>(p));
    st = c.all_gather(x.data(), n, g.data());
    check(st.is_ok(), "all_gather: " + st.message(), me);
    for (int r = 0; r < p; ++r)
      check(std::memcmp(g.data() + static_cast<size_t>(r) * n, want.data(), n * sizeof(float)) == 0,
            "all_gather n=" + std::to_string(n), me);
  }
  // Point to point around the ring, as pipeline stages pass activations.
  {
    const size_t n = 4096;
    std::vector<float> out(n), in(n);
    for (size_t i = 0; i < n; ++i) out[i] = input(me + 100, i);
    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    Status st;
    if (me % 2 == 0) {
      st = c.send(out.data(), n * sizeof(float), next, 7);
      if (st.is_ok()) st = c.recv(in.data(), n * sizeof(float), prev, 7);
    } else {
      st = c.recv(in.data(), n * sizeof(float), prev, 7);
      if (st.is_ok()) st = c.send(out.data(), n * sizeof(float), next, 7);
    }
    check(st.is_ok(), "send/recv: " + st.message(), me);
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok &= in[i] == input(prev + 100, i);
    check(ok, "recv content", me);
  }
  // Bad arguments are errors, not crashes (and do not break the communicator).
  float v = 0;
  check(!c.send(&v, sizeof(v), me, 1).is_ok(), "send to self must fail", me);
  check(!c.recv(&v, sizeof(v), p, 1).is_ok(), "recv from a rank out of range must fail", me);
  check(c.barrier().is_ok(), "barrier", me);
  if (p >= 3) check(order_matters > 0, "the inputs must make the order of additions matter", me);
  std::printf("rank %d of %d: %s: digest %016llx, %d failures\n", me, p, failures ? "FAILED" : "ok",
              static_cast<unsigned long long>(digest), failures);
  return failures ? 1 : 0;
}

int run_kill(MpiCollective& c) {
  ember::dist::install_job_end_notice(c.rank(), c.size());
  std::vector<float> x(2048, 1.0f);
  for (int it = 0; it < 1000000; ++it) {
    if (c.rank() == 1 && it == 200) std::raise(SIGKILL);
    Status st = c.all_reduce_sum(x.data(), x.size());
    if (!st.is_ok()) {
      std::fprintf(stderr, "rank %d: %s\n", c.rank(), st.message().c_str());
      return 3;
    }
    std::fill(x.begin(), x.end(), 1.0f);
  }
  return 0;
}

int run_hang(MpiCollective& c) {
  std::vector<float> x(2048, 1.0f);
  for (int it = 0; it < 1000000; ++it) {
    if (c.rank() == 1 && it == 200) {
      std::this_thread::sleep_for(std::chrono::seconds(120));  // alive but silent
      return 0;
    }
    Status st = c.all_reduce_sum(x.data(), x.size());
    if (!st.is_ok()) {
      std::fprintf(stderr, "rank %d: error: %s\n", c.rank(), st.message().c_str());
      // A later call fails at once, naming the first failure.
      Status again = c.barrier();
      std::fprintf(stderr, "rank %d: then: %s\n", c.rank(), again.message().c_str());
      return 3;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: collective_driver collectives|kill|hang T\n");
    return 2;
  }
  const std::string mode = argv[1];
  ember::dist::DistOptions opts;
  if (mode == "hang") opts.timeout_s = argc > 2 ? std::atof(argv[2]) : 3;
  auto c = MpiCollective::init(&argc, &argv, opts);
  if (!c.is_ok()) {
    std::fprintf(stderr, "%s\n", c.status().message().c_str());
    return 2;
  }
  int rc = 2;
  if (mode == "collectives") rc = run_collectives(**c);
  if (mode == "kill") rc = run_kill(**c);
  if (mode == "hang") rc = run_hang(**c);
  std::fflush(stdout);
  if (rc == 3) {
    // A rank that failed cannot finalize with a dead or silent peer: end the job.
    std::fflush(stderr);
    std::_Exit(rc);
  }
  return rc;
}
