// CPU time, for cost accounting ("CPU-seconds per 1,000 generated tokens"):
// the time the CPU spent running this process (all threads, user + system),
// or another process on this machine, as opposed to wall time. Thread-safe.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ember {

// CPU seconds used by this process so far (all threads, user + system).
double process_cpu_seconds();

// CPU seconds (user + system) used so far by process `pid` on this machine,
// from /proc/PID/stat. An error if there is no such process or /proc is
// unreadable.
Result<double> process_cpu_seconds(int64_t pid);

// CPU seconds per 1,000 tokens; 0 when there are no tokens.
inline double cpu_seconds_per_1k(double cpu_seconds, double tokens) {
  return tokens > 0 ? 1000.0 * cpu_seconds / tokens : 0.0;
}

}  // namespace ember
