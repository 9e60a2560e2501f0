// The SIGTERM notice of an MPI job's ranks; see job_notice.h.
#include "dist/job_notice.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace ember::dist {

namespace {

std::atomic<const char*> g_op{nullptr};
std::atomic<bool> g_ending{false};
std::atomic<uint64_t> g_step{0};
int g_rank = 0, g_size = 0;

// Async-signal-safe formatting: only write(2) and arithmetic.
void put(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  ssize_t r = ::write(2, s, n);
  (void)r;
}
void put_u(uint64_t v) {
  char buf[24];
  int i = 23;
  buf[i] = 0;
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  put(buf + i);
}

void on_term(int sig) {
  put("ember dist: rank ");
  put_u(static_cast<uint64_t>(g_rank));
  put(" of ");
  put_u(static_cast<uint64_t>(g_size));
  put(": the MPI launcher is ending the job");
  if (const char* op = g_op.load(std::memory_order_relaxed)) {
    put(" while this rank was in ");
    put(op);
    put(" (step ");
    put_u(g_step.load(std::memory_order_relaxed));
    put(")");
  }
  put(": another rank exited or was killed (the launcher's message names it)\n");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_job_end_notice(int rank, int size) {
  g_rank = rank;
  g_size = size;
  struct sigaction sa{};
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
}

void note_job_ending() { g_ending.store(true, std::memory_order_relaxed); }
bool job_ending() { return g_ending.load(std::memory_order_relaxed); }

void set_current_op(const char* op, uint64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  g_op.store(op, std::memory_order_relaxed);
}

}  // namespace ember::dist
