// The DRAM read ceiling of activation-sparse decode (docs/pruning.md, TEAL):
// how fast T threads read the active runs of an input-channel-blocked
// layout (runs of R bytes, each active with probability A, the threads
// splitting every run as the column kernels' row split does) against a plain
// sequential read of the same bytes. A software prefetch (prefetcht0, inline
// asm) runs D lines ahead of each thread's reads in their order, as the Q8_0
// column kernel's cursor does. Trials alternate dense / runs; medians.
//
//   g++ -O2 -mavx2 -pthread tools/run_stream_bench.cpp -o /tmp/run_stream_bench
//   /tmp/run_stream_bench [threads=2] [run_bytes=2048] [active=0.5] [ahead_lines=96] [trials=7] [regions=0]
//
// regions = 1: each thread reads whole runs of run_bytes / threads bytes in
// its own part of the buffer instead (panels of n_out / threads rows: the
// same run length per thread, no two threads in one run).
//
// Prints GB/s of the bytes actually read (dense: all; runs: the active ones)
// and the ratio runs / dense: the fraction of the dense rate a column path
// can stream, so its best decode gain is (that fraction) / (the fraction of
// the bytes it reads).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <sys/mman.h>

namespace {

inline void prefetch_l1(const void* p) { asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums the 64-byte lines [lines, lines + n) (a thread's reads, in order),
// prefetching `ahead` lines ahead.
__m256i read_lines(const char* const* lines, size_t n, size_t ahead) {
  __m256i acc = _mm256_setzero_si256();
  for (size_t i = 0; i < n; ++i) {
    if (ahead && i + ahead < n) prefetch_l1(lines[i + ahead]);
    acc = _mm256_add_epi32(acc, _mm256_load_si256(reinterpret_cast<const __m256i*>(lines[i])));
    acc = _mm256_add_epi32(acc, _mm256_load_si256(reinterpret_cast<const __m256i*>(lines[i] + 32)));
  }
  return acc;
}

double run_threads(const std::vector<std::vector<const char*>>& per_thread, size_t ahead, size_t bytes) {
  std::vector<std::thread> th;
  std::vector<int> sink(per_thread.size());
  const double t0 = seconds();
  for (size_t t = 0; t < per_thread.size(); ++t)
    th.emplace_back([&, t] {
      const __m256i a = read_lines(per_thread[t].data(), per_thread[t].size(), ahead);
      sink[t] = _mm256_extract_epi32(a, 0);
    });
  for (auto& x : th) x.join();
  const double dt = seconds() - t0;
  volatile int keep = 0;
  for (int s : sink) keep = keep + s;
  return static_cast<double>(bytes) / dt / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t run = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 2048;
  const double active = argc > 3 ? std::atof(argv[3]) : 0.5;
  const size_t ahead = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 96;
  const int trials = argc > 5 ? std::atoi(argv[5]) : 7;
  const bool regions = argc > 6 && std::atoi(argv[6]) != 0;
  if (threads < 1 || run < 64 * static_cast<size_t>(threads) || run % (64 * threads) != 0 || !(active > 0 && active <= 1) ||
      trials < 1) {
    std::fprintf(stderr, "usage: run_stream_bench [threads] [run_bytes: a multiple of 64 * threads] [active in (0, 1]] "
                         "[ahead_lines] [trials]\n");
    return 2;
  }
  const size_t total = size_t{1} << 30;  // 1 GiB: far past the caches
  char* buf = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, total));
  if (!buf) return 1;
  madvise(buf, total, MADV_HUGEPAGE);
  std::memset(buf, 1, total);

  // Dense: each thread reads its contiguous share. Runs: every run is split
  // into `threads` slices; thread t reads slice t of the active runs.
  const size_t n_runs = total / run, slice = run / threads;
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<const char*>> dense(threads), runs(threads);
  size_t run_bytes = 0;
  for (size_t r = 0; r < n_runs; ++r) {
    if (u(rng) >= active) continue;
    for (int t = 0; t < threads; ++t)
      for (size_t o = 0; o < slice; o += 64)
        runs[t].push_back(regions ? buf + t * (total / threads) + r * slice + o : buf + r * run + t * slice + o);
    run_bytes += run;
  }
  const size_t share = run_bytes / threads / 64 * 64;  // the same bytes, read sequentially
  for (int t = 0; t < threads; ++t)
    for (size_t o = 0; o < share; o += 64) dense[t].push_back(buf + t * (total / threads) + o);

  std::vector<double> gd, gr, ratio;
  for (int i = 0; i < trials; ++i) {
    const double d = run_threads(dense, ahead, share * threads);
    const double r = run_threads(runs, ahead, run_bytes);
    gd.push_back(d);
    gr.push_back(r);
    ratio.push_back(r / d);
  }
  std::printf("threads %d, runs of %zu bytes (%zu per thread%s), %.0f%% active, prefetch %zu lines ahead, %d trials:\n",
              threads, run, slice, regions ? ", each in its own region" : "", 100 * active, ahead, trials);
  std::printf("  dense %.1f GB/s, runs %.1f GB/s (medians); runs / dense per trial: median %.2f (min %.2f, max %.2f)\n",
              median(gd), median(gr), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
              *std::max_element(ratio.begin(), ratio.end()));
  std::free(buf);
  return 0;
}
