// Scalar reference twins of the Mixture-of-Experts ops (kernels/moe.h): the
// router and the combine are the CPU backend's implementation at every
// level; the grouped matmul reference is one reference dot per (slot, row)
// on activations quantized by the reference quantizers, the oracle of
// tests/kernels/moe_matmul_test.cpp. No allocation but the matmul's
// activation row; no threads.
#pragma once

#include <cstdint>

#include "kernels/moe.h"

namespace ember::ref {

// One row of logits [r.n_expert] -> ids [r.k] (rank order) and weights [r.k].
void moe_route_row(const float* logits, const MoeRouting& r, int32_t* ids, float* weights);

// Expert sharing over a group of n tokens routed exactly (ids, weights
// [n, k]): allowed[0 .. n_expert) (1: in the group's set) chosen as
// kernels/moe.h says for `budget` experts and the warm-up of `keep` per
// token. Returns the set's size (>= budget only through the warm-up).
int moe_share_select(const int32_t* ids, const float* weights, int64_t n, int k, int n_expert, int budget, int keep,
                     uint8_t* allowed);

// out[0 .. dim) (+)= sum_{j < k} w[j] * y row j (rows ldy apart).
void moe_combine_row(const float* y, int64_t ldy, const float* w, int k, int64_t dim, float* out, bool accumulate);

// targets[i].y[s * ldy + o] for every slot, with the scalar kernels of the
// registry's scalar level (x_row null: slot s reads row s).
void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                const ExpertTarget* targets, int n_targets);

}  // namespace ember::ref
