// The Mixture-of-Experts feed-forward sub-block of one layer
// (LayerConfig::ffn_kind kMoe, dispatched by ffn_layer), over a step of n
// tokens with k = n_expert_used experts each:
//   logits = xn Wrouter (with the shared expert's gate / up and its one-logit
//            gate, one shared-input matmul);
//   ids, w = route(logits) (Backend::moe_route: LayerConfig::moe_gating,
//            moe_norm_topk, moe_weights_scale; k = n_expert_used, which
//            Model::set_moe_routing may lower or raise at run time);
//            with expert sharing on (ModelConfig::moe_sharing, opt-in) the
//            step's decode tokens (each the only token of its sequence in
//            the step; two or more of them) are routed again within the set
//            ref::moe_share_select chooses for them (kernels/moe.h);
//   g, u   = xn W_gate[e], xn W_up[e] for each of the n * k (token, expert)
//            slots (one grouped Backend::moe_matmul: each chosen expert read
//            once for all its tokens);
//   h      = act(g) * u;  d = h W_down[e] (grouped);
//   y      = sum_j w_j d_j in the router's rank order (Backend::moe_combine);
//   y     += sigmoid(xn . g_shexp) * down_s(act(gate_s xn) * up_s xn) when
//            the layer has a shared expert (no gate: added as it is).
// A token's bits depend only on its own row and its chosen experts, never on
// which other tokens share them (batch invariance). Expert sharing gives
// that up for the decode tokens, by design: their experts depend on the
// batch; with sharing off the code path is exact routing's, bit for bit. QuaRot rotations are
// not applied to MoE layers (rejected at load).
//
// Threading: the step's thread; the backend parallelises.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layers/layer_context.h"

namespace ember {

// Experts read by the MoE layers of a ForwardContext's steps (every step
// counted, whatever its tokens): layer_steps MoE layers run, experts_read
// distinct experts read by them in all (the bytes of a step's experts are
// experts_read x an expert's bytes), tokens their tokens.
struct MoeStats {
  int64_t layer_steps = 0;
  int64_t experts_read = 0;
  int64_t tokens = 0;
  double experts_per_layer_step() const { return layer_steps ? static_cast<double>(experts_read) / layer_steps : 0; }
};

// Scratch of expert sharing and of the counters (grown on first use).
struct MoeShareScratch {
  std::vector<int32_t> seg_count, group, ids;
  std::vector<float> weights;
  std::vector<uint8_t> allowed, seen;
};

// Scratch of the MoE sub-block, sized for max_batch tokens and the largest
// MoE layer (ModelConfig::max_moe_ff_per_token and friends).
struct MoeBuffers {
  float* logits = nullptr;        // [n, max_n_expert] router logits
  int32_t* ids = nullptr;         // [n * k] chosen experts, rank order per token
  float* weights = nullptr;       // [n * k] their weights
  int32_t* x_row = nullptr;       // [n * k] slot -> token
  float* gate = nullptr;          // [n * k, n_ff_exp]; act(gate) * up after the activation
  float* up = nullptr;            // [n * k, n_ff_exp]
  float* down = nullptr;          // [n * k, n_embd] expert outputs; then the shared expert's
  float* shared_gate = nullptr;   // [n, max_n_ff_shexp]
  float* shared_up = nullptr;     // [n, max_n_ff_shexp]
  float* shared_logit = nullptr;  // [n]
  float* shared_weight = nullptr; // [n]
  int32_t* shared_id = nullptr;   // [n]
  // Rows gathered per expert for the observer (grown when one is set).
  std::vector<float>* observed = nullptr;
  // The step's token layout (TokenLayout::seg, n_segs): which tokens are
  // decode tokens for expert sharing.
  const int32_t* seg = nullptr;
  int n_segs = 0;
  // Expert sharing's scratch (grown when sharing is on) and the counters
  // (null: not counted).
  MoeShareScratch* share = nullptr;
  MoeStats* stats = nullptr;
};

// xn: [n, n_embd] normed input; y: [n, n_embd] output (before any post-norm
// and the residual add).
void moe_layer(const LayerContext& c, const float* xn, const MoeBuffers& b, float* y);

}  // namespace ember
