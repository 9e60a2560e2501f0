// Adaptive k: per request, how many draft tokens to ask for, from the
// measured acceptance and the relative cost of drafting and verifying.
//
// Model: each draft is accepted with probability a independently of the
// others (a per request, estimated from its verifications), so k drafts
// give E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens per
// target step, at a cost of 1 + k * (c_draft + c_verify) target decode
// steps (c_draft: one draft step, c_verify: one extra verified position,
// both relative to a target decode step). k maximizes E(k) / cost(k) over
// 0 .. k_max; k = 0 (plain decoding, ratio 1) when no k > 0 beats it.
//
// Estimate of a: decayed counts of accepted drafts (s) and rejections (f)
// over the request's verifications (a burst with j of k accepted adds j to
// s and, if j < k, 1 to f: the geometric model's likelihood), with a
// uniform prior: a = (s + 1) / (s + f + 2). A step without drafts decays
// the counts too, so a request at k = 0 drifts back towards the prior and
// tries again (k recovers); a workload that keeps rejecting drops back.
//
// The verification cost can be measured instead of given (SpecStepCost):
// a decayed least-squares fit of the forward time of decode-only steps,
// t = a + b * n over the n positions of the step, gives c_verify = b / (a +
// b), one more verified position relative to a one-token step. On an idle
// CPU small batches are weight-bandwidth-bound (b small); on a busy one
// (or with a large vocabulary head computed per position) b grows, and k
// shrinks with it.
#pragma once

#include <cstdint>

namespace ember {

struct SpecAcceptance {
  double s = 0;  // decayed accepted drafts
  double f = 0;  // decayed rejections
};

constexpr double kSpecDecay = 0.85;  // weight of the past per observation

inline double spec_alpha(const SpecAcceptance& a) { return (a.s + 1.0) / (a.s + a.f + 2.0); }
// A verification of k drafts with `accepted` of them accepted.
void spec_observe(SpecAcceptance* a, int k, int accepted);
// A step in which the request did not draft.
void spec_idle(SpecAcceptance* a);
// The best k in [0, k_max] for acceptance a and the relative costs.
int spec_choose_k(double a, int k_max, double c_draft, double c_verify);

// Online fit of a decode step's forward seconds against its positions.
struct SpecStepCost {
  static constexpr double kDecay = 0.97;  // weight of the past per observed step
  double w = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  void observe(int64_t n_positions, double seconds);
  // Seconds of a one-token step (a + b), or 0 before the fit exists.
  double one_token_seconds() const;
  // b / (a + b) in [0, 4], or `fallback` until steps of at least two sizes
  // were seen.
  double verify_cost(double fallback) const;
};

}  // namespace ember
