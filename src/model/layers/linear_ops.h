// The one entry point of the forward pass for linears: every Linear that
// reads the same activation rows (Q/K/V; gate/up; or a single one) goes to
// the backend in one Backend::matmul call, so the activations are converted
// to the weights' activation type once for all of them; each product then
// gets its bias. The observer, if set, sees the input rows once per role,
// before the product (the same pointer for every role of one call).
//
// Arithmetic: y = x W^T (+ b), each output element as Backend::matmul
// computes it, the bias added afterwards as its own rounding step (the
// order the forward pass has always used). Threading: the caller's thread
// drives the backend.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "model/forward_observer.h"
#include "model/config.h"
#include "model/linear.h"

namespace ember {

// One product of a shared-input call: y [n, ldy], the first lin->n_out()
// columns of each row written.
struct LinearOut {
  const Linear* lin = nullptr;
  LinearRole role = LinearRole::kQ;
  float* y = nullptr;
  int64_t ldy = 0;
};

// The backend's gated activation for a model's FFN activation.
inline GatedActivation gated_activation_of(Activation a) {
  switch (a) {
    case Activation::kGeluTanh: return GatedActivation::kGeGluTanh;
    case Activation::kSwiGluOai: return GatedActivation::kSwiGluOai;
    default: return GatedActivation::kSwiGlu;
  }
}

// Most products that share one input (Q, K, V; a MoE layer's router,
// shared expert gate / up and the shared expert's gate).
constexpr int kMaxSharedLinears = 4;

// x: [n, n_in] with row stride ldx, n_in = every lin->n_in(). `layer` is
// what the observer is told (-1 for the output head). A tensor-parallel
// shard is multiplied as the matrix of its own shape (the caller reduces or
// gathers the ranks' outputs).
void run_linears(Backend& backend, ForwardObserver* observer, int layer, const float* x, int64_t ldx, int64_t n,
                 const LinearOut* outs, int n_outs);

}  // namespace ember
