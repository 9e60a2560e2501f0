// CPU-time accounting: the clock counts work, not waiting, and /proc agrees.
#include "core/cpu_time.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

namespace ember {
namespace {

// Busy until this process has used `cpu_s` more CPU seconds (or 20 s of
// wall time passed, on a machine too loaded to give it that).
double burn(double cpu_s) {
  volatile double x = 1;
  const double c0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  while (process_cpu_seconds() - c0 < cpu_s &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20)
    for (int i = 0; i < 1000; ++i) x = std::sqrt(x + i);
  return x;
}

TEST(CpuTime, CountsWorkNotSleep) {
  const double c0 = process_cpu_seconds();
  burn(0.1);
  const double c1 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double c2 = process_cpu_seconds();
  EXPECT_GE(c1 - c0, 0.1);   // the clock advances with work
  EXPECT_LT(c2 - c1, 0.05);  // and not while asleep
}

TEST(CpuTime, ProcAgreesWithTheClock) {
  burn(0.05);
  auto p = process_cpu_seconds(static_cast<int64_t>(getpid()));
  const double c = process_cpu_seconds();
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  // /proc counts in clock ticks (usually 10 ms) and is read first.
  EXPECT_LE(*p, c + 0.02);
  EXPECT_GT(*p, c - 0.05);
}

TEST(CpuTime, BadPidIsAnError) {
  EXPECT_FALSE(process_cpu_seconds(int64_t{0}).is_ok());
  EXPECT_FALSE(process_cpu_seconds(int64_t{-5}).is_ok());
  EXPECT_FALSE(process_cpu_seconds(int64_t{1} << 40).is_ok());
}

TEST(CpuTime, PerThousand) {
  EXPECT_DOUBLE_EQ(cpu_seconds_per_1k(2.0, 500), 4.0);
  EXPECT_DOUBLE_EQ(cpu_seconds_per_1k(2.0, 0), 0.0);
}

}  // namespace
}  // namespace ember
