// ForwardObserver: a hook into the forward pass for calibration (GPTQ
// Hessians, AWQ / importance statistics), pruning statistics and
// hidden-state distillation. When set on a ForwardContext it is called, on
// the thread that runs the forward pass, with the input rows of every linear
// just before its product and with the residual stream after every block.
// Off by default and free when off (one null check per call site). The rows
// are only valid during the call.
#pragma once

#include <cstdint>

namespace ember {

// Which matrix of a layer reads the rows (kOutput: the output head, layer
// -1). Q/K/V share their input (the same pointer is passed three times), as
// do gate and up. A Mixture-of-Experts layer's router (kRouter), shared
// expert (k*Shexp) and the shared expert's gate (kShexpGate) read the FFN's
// normed input together; its experts (k*Exps) are reported per expert by
// on_expert_input.
enum class LinearRole {
  kQ, kK, kV, kO, kGate, kUp, kDown, kOutput,
  kRouter, kGateExps, kUpExps, kDownExps, kGateShexp, kUpShexp, kDownShexp, kShexpGate,
};
const char* linear_role_name(LinearRole r);

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // x: [n_rows, n_in] with row stride ld (f32, the values the product reads).
  virtual void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                               int64_t n_in) {}
  // The rows routed to expert `expert` (of n_expert) of a MoE layer that
  // its matrix `role` (kGateExps, kUpExps: the FFN's normed input rows of
  // the tokens that chose it, in token order; kDownExps: its activation
  // rows) reads, once per expert with any rows. x: [n_rows, n_in], stride ld.
  virtual void on_expert_input(int layer, LinearRole role, int expert, int n_expert, const float* x, int64_t ld,
                               int64_t n_rows, int64_t n_in) {}
  // x: [n_rows, n_embd], the residual stream leaving block `layer`.
  virtual void on_block_output(int layer, const float* x, int64_t n_rows, int64_t n_embd) {}
};

}  // namespace ember
