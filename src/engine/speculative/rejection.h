// The speculative-sampling rejection rule (Leviathan et al. 2023, Chen et
// al. 2023): a draft token x drawn from the draft distribution q is kept
// with probability min(1, p(x) / q(x)), p the target distribution (after
// every sampling parameter, exactly as the plain sampler builds it); on
// rejection the token is drawn from the normalized residual max(0, p - q).
// The kept-or-resampled token is then distributed exactly as p.
//
// With a point-mass draft (q(x) = 1: n-gram lookup) the rule keeps x with
// probability p(x) and otherwise draws from p restricted to tokens != x;
// drawing y ~ p and keeping x iff y == x (else emitting y) has that same
// law, which is how the engine verifies point-mass drafts (and why such
// verification repeats the plain sampler's draws, token for token).
#pragma once

#include <cstdint>

namespace ember {

// Keep draft token x? u in [0, 1).
inline bool spec_accept(double p_x, double q_x, double u) { return q_x <= 0 ? p_x > 0 : u * q_x < p_x; }

// Draws from max(0, p - q) normalized, u in [0, 1); p, q: [n] probabilities.
// When the residual is empty (p == q), draws from p. q == nullptr: the
// point mass at `draft`.
int32_t spec_residual_sample(const float* p, const float* q, int32_t draft, int n, double u);

}  // namespace ember
