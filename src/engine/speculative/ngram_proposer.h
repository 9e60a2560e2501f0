// NgramProposer: prompt-lookup decoding. For each request, the last n
// tokens of prompt + output (n from max_n down to min_n, longest first) are
// looked up earlier in the same token list; the tokens that followed the
// most recent earlier occurrence are proposed (at most k). No model: the
// drafts are point masses (q = 1), so the verifier accepts a draft token
// with the target's probability of it (see verify.h).
//
// With k_by_match the proposal is at most 2^(n-1) tokens for a match of n
// tokens (docs/engine.md, "How k is chosen").
//
// Cost: O(length * n) compares per request and step, a few microseconds
// for the contexts ember serves.
#pragma once

#include "engine/speculative/proposer.h"

namespace ember {

struct NgramConfig {
  int min_n = 1;  // shortest suffix to match
  int max_n = 4;  // longest suffix to match (tried first)
  // Look back at most this many tokens for a match (0: the whole context).
  int64_t max_lookback = 0;
  // Proposal length grows with the evidence: a match of n tokens proposes
  // at most 2^(n-1) tokens (1, 2, 4, 8 ...; never more than k). A one-token
  // match is a weak guess and each extra verified position costs a
  // fraction of a decode step (more on a busy CPU), so short matches
  // propose little and long ones (a passage being copied) a long burst.
  bool k_by_match = false;
  Status validate() const;
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const NgramConfig& cfg) : cfg_(cfg) {}
  SpecMethod method() const override { return SpecMethod::kNgram; }
  Status propose(const std::vector<ProposeItem>& items) override;

  // The proposal for one token list: up to max_k tokens following the most
  // recent earlier occurrence of the longest matching suffix of
  // tokens[0 .. n). Returns the matched suffix's length (0: no match).
  static int lookup(const NgramConfig& cfg, const int32_t* tokens, int64_t n, int max_k, std::vector<int32_t>* out);

 private:
  NgramConfig cfg_;
};

}  // namespace ember
