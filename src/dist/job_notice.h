// What rank 0 (and every rank) says when the MPI launcher ends the job: when
// one rank dies, mpirun names it ("process rank 1 ... exited on signal 9")
// and sends SIGTERM to the others before killing them. With the notice
// installed, a rank that gets that SIGTERM writes one line to stderr, e.g.
//   ember dist: rank 0 of 2: the MPI launcher is ending the job while this
//   rank was in all_reduce (step 812): another rank exited or was killed
// and then ends by the signal's default action, as it would have.
//
// Process-wide (a signal handler): programs install it at start-up, after
// MPI is initialized; libraries never do. set_current_op is one relaxed
// atomic store, called by MpiCollective around each operation.
#pragma once

#include <cstdint>

namespace ember::dist {

void install_job_end_notice(int rank, int size);
// The job is ending (the launcher's SIGTERM, taken by a program that waits
// for its signals itself, as `ember serve` does): from now on every
// MpiCollective wait fails at once with that reason. Async-signal-safe.
void note_job_ending();
bool job_ending();
// op: a string with static storage duration ("all_reduce", ...), or nullptr when idle.
void set_current_op(const char* op, uint64_t step);

}  // namespace ember::dist
