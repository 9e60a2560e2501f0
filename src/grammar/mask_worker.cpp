// Token masks computed ahead of use on worker threads; see mask_worker.h.
#include "grammar/mask_worker.h"

#include <algorithm>
#include <utility>

namespace ember::grammar {

MaskWorker::MaskWorker(int n_threads) {
  for (int i = 0; i < std::max(1, n_threads); ++i) threads_.emplace_back([this] { run(); });
}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void MaskWorker::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void MaskWorker::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

MaskPrefetch::MaskPrefetch(std::shared_ptr<MaskWorker> worker, std::shared_ptr<const CompiledGrammar> g,
                           std::shared_ptr<StackPool> pool, std::shared_ptr<std::mutex> pool_mu)
    : worker_(std::move(worker)), g_(std::move(g)), pool_(std::move(pool)), pool_mu_(std::move(pool_mu)) {}

// Computes the latest wanted state until the result is for it.
void MaskPrefetch::compute(const std::shared_ptr<Slot>& slot, const std::shared_ptr<const CompiledGrammar>& g,
                           const std::shared_ptr<StackPool>& pool, const std::shared_ptr<std::mutex>& pool_mu) {
  std::vector<uint64_t> bits((g->vocab().n_vocab + 63) / 64);
  for (;;) {
    StateId s;
    {
      std::lock_guard<std::mutex> lk(slot->mu);
      s = slot->wanted;
      if (s < 0 || s == slot->computed) {
        slot->running = false;
        slot->cv.notify_all();
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lk(*pool_mu);
      g->fill_mask(*pool, s, bits.data());
    }
    std::lock_guard<std::mutex> lk(slot->mu);
    slot->bits.swap(bits);
    slot->computed = s;
    if (bits.size() != slot->bits.size()) bits.assign(slot->bits.size(), 0);
  }
}

void MaskPrefetch::want(StateId s) {
  std::lock_guard<std::mutex> lk(slot_->mu);
  slot_->wanted = s;
  if (slot_->running || s == slot_->computed) return;
  slot_->running = true;
  worker_->submit([slot = slot_, g = g_, pool = pool_, mu = pool_mu_] { compute(slot, g, pool, mu); });
}

bool MaskPrefetch::take(StateId s, std::vector<uint64_t>* bits) {
  std::unique_lock<std::mutex> lk(slot_->mu);
  if (slot_->wanted != s) return false;
  slot_->cv.wait(lk, [&] { return !slot_->running || slot_->computed == s; });
  if (slot_->computed != s) return false;
  bits->swap(slot_->bits);
  slot_->computed = -1;
  slot_->wanted = -1;
  if (slot_->bits.size() != bits->size()) slot_->bits.assign(bits->size(), 0);
  return true;
}

}  // namespace ember::grammar
