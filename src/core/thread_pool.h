// Persistent thread pool. Workers are created once and wait (spin briefly,
// then sleep on a futex) for the next job, so an operation costs one wake-up,
// never a thread creation. The calling thread takes part as thread 0.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace ember {

class ThreadPool {
 public:
  // n_threads: total threads including the caller (>= 1).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs f(ith, nth) on every thread; returns when all have finished.
  template <typename F>
  void run(F&& f) {
    using Fn = std::remove_reference_t<F>;
    run_impl([](void* ctx, int ith, int nth) { (*static_cast<Fn*>(ctx))(ith, nth); },
             static_cast<void*>(&f));
  }

  // Splits [0, n) into chunks of `grain` handed out dynamically;
  // f(begin, end, ith) is called for each chunk.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& f) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      f(int64_t{0}, n, 0);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int ith, int) {
      for (;;) {
        int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
        if (b >= n) break;
        f(b, b + grain < n ? b + grain : n, ith);
      }
    });
  }

 private:
  using Call = void (*)(void*, int, int);
  void run_impl(Call call, void* ctx);
  void worker(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

// A sensible default thread count: physical cores available to this process.
int default_thread_count();

}  // namespace ember
