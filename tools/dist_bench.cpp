// Latency and bandwidth of the transports under dist/, by the OSU
// micro-benchmarks' method (osu_latency, osu_bw, osu_allreduce), run with 2
// or more ranks under mpirun (tools/dist_bench.sh runs it over shared
// memory, TCP on loopback and TCP between two network namespaces):
//
//   latency    ping-pong between ranks 0 and 1 (MPI_Send / MPI_Recv): half
//              the round trip, averaged over the iterations after a warm-up
//   bandwidth  rank 0 posts a window of 64 MPI_Isend back to back, rank 1
//              the matching receives, then a 4-byte acknowledgement; bytes
//              moved / time
//   p2p        the same ping-pong through dist's Collective::send / recv
//   allreduce  dist's deterministic all_reduce_sum and MPI_Allreduce, each
//              rank's average time per call, the maximum over ranks
//
// Output: one line per measurement, "op bytes median_usec mean_usec MB/s"
// (per-iteration times; MB/s from the median, MB = 1e6 bytes). OSU reports
// means; the median is also given because shared machines add outliers.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dist/mpi_collective.h"

namespace {

int iters_for(size_t bytes, int base) {
  if (bytes <= 8192) return base;
  if (bytes <= (1 << 20)) return std::max(20, base / 10);
  return std::max(10, base / 100);
}

double now() { return MPI_Wtime(); }

struct Stats {
  double median = 0, mean = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  s.median = v[v.size() / 2];
  return s;
}
void row(const char* op, size_t bytes, const Stats& s) {
  std::printf("%s %zu %.2f %.2f %.1f\n", op, bytes, s.median, s.mean, static_cast<double>(bytes) / s.median);
}

}  // namespace

int main(int argc, char** argv) {
  auto cr = ember::dist::MpiCollective::init(&argc, &argv);
  if (!cr.is_ok()) {
    std::fprintf(stderr, "%s\n", cr.status().message().c_str());
    return 2;
  }
  auto& c = **cr;
  const int me = c.rank(), p = c.size();
  const int base = argc > 1 ? std::atoi(argv[1]) : 2000;
  size_t max_bytes = argc > 2 ? static_cast<size_t>(std::atoll(argv[2])) : size_t{4} << 20;
  if (p < 2) {
    std::fprintf(stderr, "dist_bench: run with at least 2 ranks (mpirun -np 2)\n");
    return 2;
  }
  if (me == 0)
    std::printf("# %s, %d ranks, rank 0 on %s\n# op bytes median_usec mean_usec MB/s\n", c.library_version().c_str(), p, c.host_name().c_str());
  std::vector<char> buf(max_bytes), rbuf(max_bytes);
  std::memset(buf.data(), 1, buf.size());
  // osu_latency
  for (size_t s = 1; s <= max_bytes; s *= 4) {
    const int it = iters_for(s, base), warm = it / 10 + 1;
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> t;
    for (int i = 0; i < it + warm; ++i) {
      const double t0 = now();
      if (me == 0) {
        MPI_Send(buf.data(), static_cast<int>(s), MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf.data(), static_cast<int>(s), MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (me == 1) {
        MPI_Recv(rbuf.data(), static_cast<int>(s), MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), static_cast<int>(s), MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      }
      if (i >= warm) t.push_back((now() - t0) * 1e6 / 2);
    }
    if (me == 0) row("latency", s, stats(t));
  }
  // dist's send / recv ping-pong
  for (size_t s = 8; s <= max_bytes; s *= 16) {
    const int it = iters_for(s, base), warm = it / 10 + 1;
    if (ember::Status st = c.barrier(); !st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    std::vector<double> t;
    for (int i = 0; i < it + warm; ++i) {
      const double t0 = now();
      if (me == 0) {
        (void)c.send(buf.data(), s, 1, 2);
        (void)c.recv(rbuf.data(), s, 1, 2);
      } else if (me == 1) {
        (void)c.recv(rbuf.data(), s, 0, 2);
        (void)c.send(buf.data(), s, 0, 2);
      }
      if (i >= warm) t.push_back((now() - t0) * 1e6 / 2);
    }
    if (me == 0) row("p2p", s, stats(t));
  }
  // osu_bw
  const int window = 64;
  for (size_t s = 1024; s <= max_bytes; s *= 4) {
    const int it = std::max(5, iters_for(s, base) / 20);
    std::vector<MPI_Request> reqs(window);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> t;
    for (int i = 0; i < it + 2; ++i) {
      const double t0 = now();
      if (me == 0) {
        for (int w = 0; w < window; ++w)
          MPI_Isend(buf.data(), static_cast<int>(s), MPI_CHAR, 1, 3, MPI_COMM_WORLD, &reqs[static_cast<size_t>(w)]);
        MPI_Waitall(window, reqs.data(), MPI_STATUSES_IGNORE);
        char ack;
        MPI_Recv(&ack, 1, MPI_CHAR, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (me == 1) {
        for (int w = 0; w < window; ++w)
          MPI_Irecv(rbuf.data(), static_cast<int>(s), MPI_CHAR, 0, 3, MPI_COMM_WORLD, &reqs[static_cast<size_t>(w)]);
        MPI_Waitall(window, reqs.data(), MPI_STATUSES_IGNORE);
        char ack = 0;
        MPI_Send(&ack, 1, MPI_CHAR, 0, 4, MPI_COMM_WORLD);
      }
      if (i >= 2) t.push_back((now() - t0) * 1e6 / window);  // per message
    }
    if (me == 0) row("bandwidth", s, stats(t));
  }
  // osu_allreduce: ours and the library's
  std::vector<float> x(max_bytes / sizeof(float));
  for (int which = 0; which < 2; ++which) {
    for (size_t s = 4; s <= max_bytes; s *= 4) {
      const size_t n = s / sizeof(float);
      const int it = iters_for(s, base), warm = it / 10 + 1;
      std::fill(x.begin(), x.begin() + static_cast<long>(n), 1.0f);
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<double> t;
      for (int i = 0; i < it + warm; ++i) {
        const double t0 = now();
        ember::Status st = which == 0 ? c.all_reduce_sum(x.data(), n) : c.mpi_all_reduce_sum(x.data(), n);
        if (!st.is_ok()) {
          std::fprintf(stderr, "%s\n", st.message().c_str());
          return 1;
        }
        if (i >= warm) t.push_back((now() - t0) * 1e6);
      }
      // The slowest rank's figures (osu_allreduce reports the max over ranks).
      Stats mine = stats(t), worst;
      MPI_Reduce(&mine.median, &worst.median, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      MPI_Reduce(&mine.mean, &worst.mean, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (me == 0) row(which == 0 ? "allreduce" : "mpi_allreduce", s, worst);
    }
  }
  std::fflush(stdout);
  return 0;
}
