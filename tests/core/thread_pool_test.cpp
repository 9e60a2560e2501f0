// Tests for the persistent thread pool.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ember {
namespace {

TEST(ThreadPool, RunsEveryThreadOnce) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> hits(3);
    pool.run([&](int ith, int nth) {
      EXPECT_EQ(nth, 3);
      hits[ith].fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(2);
  for (int64_t n : {0, 1, 7, 64, 1000}) {
    std::vector<std::atomic<int>> seen(n);
    pool.parallel_for(n, 5, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i].load(), 1) << i;
  }
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadPool pool(1);
  int calls = 0;
  pool.run([&](int ith, int nth) {
    EXPECT_EQ(ith, 0);
    EXPECT_EQ(nth, 1);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ember
