// Persistent thread pool; see thread_pool.h.
#include "core/thread_pool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ember {

namespace {
// Workers poll this many times (PAUSE, ~40-140 cycles each) for the next job
// before sleeping on the futex: long enough to bridge the gaps between the
// ops of one forward pass, short enough not to steal a shared core.
constexpr int kSpinIterations = 4000;
// The caller polls this many times for workers to finish, then yields its
// core (a preempted worker needs it to finish).
constexpr int kWaitSpins = 1000;

// Direct futex calls: libstdc++ 12's atomic::wait can miss wake-ups.
void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  threads_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  futex_wake_all(&generation_);
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_impl(Call call, void* ctx) {
  if (n_threads_ == 1) {
    call(ctx, 0, 1);
    return;
  }
  call_ = call;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: ordered before the sleepers_ load
  if (sleepers_.load() > 0) futex_wake_all(&generation_);
  call(ctx, 0, n_threads_);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kWaitSpins) _mm_pause();
    else sched_yield();
  }
}

void ThreadPool::worker(int ith) {
  uint32_t seen = 0;  // generation_ at construction; never read it here (a job may already be posted)
  for (;;) {
    int spins = 0;
    uint32_t g;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        _mm_pause();
      } else {
        sleepers_.fetch_add(1);  // seq_cst: ordered before the futex's value check
        futex_wait(&generation_, seen);
        sleepers_.fetch_sub(1);
      }
    }
    seen = g;
    if (stop_.load()) return;
    call_(ctx_, ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

int default_thread_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

}  // namespace ember
