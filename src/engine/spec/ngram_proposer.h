// NgramProposer: prompt-lookup decoding. For each request, the last n
// tokens of prompt + output (n from max_n down to min_n, longest first) are
// looked up earlier in the same token list; the tokens that followed the
// most recent earlier occurrence are proposed (at most k). No model: the
// drafts are point masses (q = 1), so the verifier accepts a draft token
// with the target's probability of it (see verify.h).
//
// Cost: O(length * n) compares per request and step, a few microseconds
// for the contexts ember serves.
#pragma once

#include "engine/spec/proposer.h"

namespace ember {

struct NgramConfig {
  int min_n = 1;  // shortest suffix to match
  int max_n = 4;  // longest suffix to match (tried first)
  // Look back at most this many tokens for a match (0: the whole context).
  int64_t max_lookback = 0;
  Status validate() const;
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const NgramConfig& cfg) : cfg_(cfg) {}
  SpecMethod method() const override { return SpecMethod::kNgram; }
  Status propose(const std::vector<ProposeItem>& items) override;

  // The proposal for one token list (exposed for tests): up to max_k tokens
  // following the most recent earlier occurrence of the longest matching
  // suffix of tokens[0 .. n).
  static void lookup(const NgramConfig& cfg, const int32_t* tokens, int64_t n, int max_k, std::vector<int32_t>* out);

 private:
  NgramConfig cfg_;
};

}  // namespace ember
