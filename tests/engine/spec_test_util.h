// A test proposer for speculative decoding: it knows (from a function of
// the request) the output the request will produce without speculation and
// proposes its next tokens, corrupting some at random, so verification sees
// every case: all drafts accepted (+ the bonus token), a mismatch at any
// position, empty and short proposals. Deterministic (own seeded RNG).
#pragma once

#include <functional>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "engine/spec/proposer.h"

namespace ember::test {

class ReplayProposer final : public Proposer {
 public:
  // expected(r): r's whole output without speculation (called once per
  // sequence); n_vocab: for corrupted tokens.
  ReplayProposer(std::function<std::vector<int32_t>(const Request&)> expected, int n_vocab, uint32_t seed,
                 double p_corrupt = 0.15)
      : expected_(std::move(expected)), n_vocab_(n_vocab), rng_(seed), p_corrupt_(p_corrupt) {}

  SpecMethod method() const override { return SpecMethod::kNgram; }
  Status propose(const std::vector<ProposeItem>& items) override {
    std::uniform_real_distribution<double> uni(0, 1);
    for (const ProposeItem& it : items) {
      ++n_calls_;
      auto f = cache_.find(it.req->seq_id);
      if (f == cache_.end()) f = cache_.emplace(it.req->seq_id, expected_(*it.req)).first;
      const std::vector<int32_t>& want = f->second;
      it.out->q.clear();
      it.out->tokens.clear();
      const int k = static_cast<int>(rng_() % (it.max_k + 1));  // 0 .. max_k
      for (int j = 0; j < k; ++j) {
        const size_t at = static_cast<size_t>(it.req->n_output() + j);
        int32_t t = at < want.size() ? want[at] : static_cast<int32_t>(rng_() % n_vocab_);
        if (uni(rng_) < p_corrupt_) t = (t + 1 + static_cast<int32_t>(rng_() % (n_vocab_ - 1))) % n_vocab_;
        it.out->tokens.push_back(t);
      }
    }
    return Status::ok();
  }
  void release(const Request& r) override { cache_.erase(r.seq_id); }
  int64_t n_calls() const { return n_calls_; }

 private:
  std::function<std::vector<int32_t>(const Request&)> expected_;
  int n_vocab_;
  std::mt19937 rng_;
  double p_corrupt_;
  std::map<uint64_t, std::vector<int32_t>> cache_;
  int64_t n_calls_ = 0;
};

}  // namespace ember::test
