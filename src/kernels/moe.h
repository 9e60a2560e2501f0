// Mixture-of-Experts ops of the Backend (kernels/backend.h): the router
// (logits -> chosen experts and their weights), the grouped expert matmul
// and the weighted sum of the chosen experts' outputs. The CPU backend runs
// moe_route and moe_combine as the scalar functions of kernels/ref/moe.h
// at every ISA level (a few dozen floats per token) and the grouped matmul
// through the matmul driver's kernels (kernels/cpu/moe_matmul.cpp).
//
// Arithmetic contract (batch invariance, as for the dense ops): every
// output row depends only on its own inputs.
//   Router, per row of logits l[0 .. n_expert):
//     kSoftmax:     p_i = exp(l_i - max l) / sum_j exp(l_j - max l) (exp and
//                   the sum in double, index order); the chosen experts are
//                   the k largest p in rank order (largest first, equal
//                   values: lower index first); weight_j = p of the j-th
//                   chosen, divided by the sum of the k (double, rank order)
//                   when `norm`, then times `scale`; rounded to float once.
//     kSoftmaxTopK: the k largest logits in rank order; weights the softmax
//                   of those k (double), times `scale`.
//     kSigmoid:     the k largest logits; weight 1 / (1 + exp(-l)) (double),
//                   times `scale` (with `norm`: divided by their sum first).
//     A NaN logit counts as -infinity (it is never chosen while a number is
//     there). With an `allowed` mask the k are chosen among the allowed
//     experts only (fewer allowed than k: the rest are the disallowed ones
//     ranked after them, weight 0); the softmax of kSoftmax still runs
//     over all experts (a token's probabilities do not change, only which
//     of them it keeps). A null mask is exact routing, the same code path.
//   Expert sharing (moe_share_select, opt-in; after XShare, arXiv
//     2602.07265): over a group of B tokens already routed exactly (ids,
//     weights [B, k]), the allowed set starts as every token's first `keep`
//     experts (the warm-up: each token keeps its strongest choices), then
//     takes the other experts in order of their gating mass over the group
//     (sum of the routed weights w[t, j] with ids[t, j] = e, double, tokens
//     and ranks in order; equal mass: lower index first, zero mass never)
//     until it holds `budget` experts; each token is then routed again
//     within the set. A group whose exact routing reads <= budget experts is
//     left exactly as routed.
//   Grouped matmul: y[s, o] = dot(x row x_row[s], W_expert[s] row o) is the
//     very value Backend::matmul gives for that row and matrix (the same
//     activation conversion, the same kernel contract), whatever the other
//     slots, their experts or the thread count.
//   Combine: out[t] (+)= sum_{j < k} w[t, j] * y[t * k + j] with the products
//     and the sum in double (products of two floats are exact there), j in
//     order (the router's rank order), rounded to float once, then added to
//     out[t] in float when accumulating.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember {

// Most experts a token uses (the router keeps its weights on the stack).
constexpr int kMaxExpertsUsed = 64;

enum class MoeGating : uint8_t { kSoftmax, kSoftmaxTopK, kSigmoid };
const char* moe_gating_name(MoeGating g);

struct MoeRouting {
  MoeGating gating = MoeGating::kSoftmax;
  int n_expert = 0;  // logits per row
  int k = 0;         // experts chosen per row, 1 <= k <= n_expert
  bool norm = false;
  float scale = 1.f;
  const uint8_t* allowed = nullptr;  // [n_expert] nonzero: may be chosen (null: all)
};

// Batch-aware expert sharing of a step's decode tokens (opt-in; see the
// contract above). fraction in (0, 1]: the expert budget of a layer and
// step is max(k, ceil(fraction * U)), U the distinct experts exact routing
// of the group reads; 0 turns sharing off (exact routing, bit for bit).
// keep: experts per token always kept (the warm-up), 1 <= keep <= k.
struct MoeSharing {
  float fraction = 0.f;
  int keep = 1;
  bool on() const { return fraction > 0.f; }
};

// One matrix of every expert for the grouped matmul: experts[e] is
// [n_out, n_in] (every expert the same shape and type), outputs y
// [n_slots, ldy]. act_bits as MatmulTarget::act_bits.
struct ExpertTarget {
  const TensorView* const* experts = nullptr;  // [n_expert]
  float* y = nullptr;
  int64_t ldy = 0;
  int act_bits = 0;
};

}  // namespace ember
