// Token masks ahead of use: the mask for step t+1 depends only on the
// tokens up to t, so it can be computed on a worker thread while the
// forward pass of step t+1 runs, instead of on the engine thread after it.
//
// MaskWorker is a small thread pool of mask jobs (one per server, shared by
// every request). MaskPrefetch is one sample's mask slot: want(s) asks for
// the mask of state s (a later want() supersedes an earlier one: only the
// latest state is computed, so a run of forced tokens costs one mask); the
// next take(s) waits for it and hands it over, or reports that no mask for
// s was prefetched (the caller computes it then).
//
// Threading: the stack pool a prefetch computes in is shared with the
// request's matchers on the engine thread, so every use of that pool must
// hold the pool mutex given to want() (CompiledGrammar::fill_mask and
// StackPool::advance both intern states). A slot is used by one thread
// (its sample's), the jobs run on the worker's threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "grammar/token_mask.h"

namespace ember::grammar {

class MaskWorker {
 public:
  explicit MaskWorker(int n_threads = 1);
  // Finishes the queued jobs, then joins the threads.
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;
  void submit(std::function<void()> job);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class MaskPrefetch {
 public:
  MaskPrefetch(std::shared_ptr<MaskWorker> worker, std::shared_ptr<const CompiledGrammar> g,
               std::shared_ptr<StackPool> pool, std::shared_ptr<std::mutex> pool_mu);
  // Queues the mask of state s (superseding any earlier state not taken).
  void want(StateId s);
  // The prefetched mask of s swapped into *bits ((n_vocab + 63) / 64 words)
  // after waiting for it; false (bits untouched) if s was not the state wanted.
  bool take(StateId s, std::vector<uint64_t>* bits);

 private:
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    StateId wanted = -1;    // the state asked for (-1: none)
    StateId computed = -1;  // the state `bits` holds
    bool running = false;   // a job is queued or computing
    std::vector<uint64_t> bits;
  };
  static void compute(const std::shared_ptr<Slot>& slot, const std::shared_ptr<const CompiledGrammar>& g,
                      const std::shared_ptr<StackPool>& pool, const std::shared_ptr<std::mutex>& pool_mu);

  std::shared_ptr<MaskWorker> worker_;
  std::shared_ptr<const CompiledGrammar> g_;
  std::shared_ptr<StackPool> pool_;
  std::shared_ptr<std::mutex> pool_mu_;
  std::shared_ptr<Slot> slot_ = std::make_shared<Slot>();
};

}  // namespace ember::grammar
