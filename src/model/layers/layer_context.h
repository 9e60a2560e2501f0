// What every sub-block of the transformer block (model/layers/) is called
// with: the backend, the model and layer config and weights, the observer
// and the token count of the step (LayerContext), and the token layout of
// a ragged batch (TokenLayout: positions and the sequence each token belongs
// to, for RoPE, K/V writes and attention).
//
// Ownership: everything is borrowed from the ForwardContext that runs the
// step and valid for that call only. Threading: one thread drives a step;
// parallelism lives inside the Backend.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/collective.h"
#include "model/config.h"
#include "model/forward_observer.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace ember {

// The tensor-parallel group of a sharded model (model/shard.h): the
// sub-blocks all-reduce their row-parallel outputs (attention's O, the
// FFN's down) through it. The first failed call is kept in `status` and the
// later ones are skipped: the step then fails (ForwardContext). Owned by
// the ForwardContext; one thread.
struct TpGroup {
  Collective* comm = nullptr;
  Status status;
  std::vector<float> scratch;  // small per-step vectors the sub-blocks all-reduce (QK-norm sums)
  void all_reduce(float* x, int64_t n) {
    if (status.is_ok()) status = comm->all_reduce_sum(x, static_cast<size_t>(n));
  }
};

struct LayerContext {
  Backend& backend;
  const ModelConfig& cfg;
  int il;                     // layer index
  const LayerConfig& lc;      // cfg.layers[il]: this layer's head counts and FFN width
  const LayerWeights& w;      // shapes as in lc
  ForwardObserver* observer;  // null: off
  int64_t n;                  // tokens in the step
  TpGroup* tp = nullptr;      // tensor parallelism (null: the whole layer is here)
};

// Token t of the step sits at position pos[t] of sequence seg[t], whose K/V
// live in caches[seg[t]].
struct TokenLayout {
  const int32_t* pos = nullptr;      // [n]
  const int32_t* seg = nullptr;      // [n], each in [0, n_segs)
  KvCache* const* caches = nullptr;  // [n_segs]
  int n_segs = 0;
};

}  // namespace ember
