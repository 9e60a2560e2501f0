// The feed-forward sub-block of one layer, by LayerConfig::ffn_kind (one
// switch): a Mixture-of-Experts layer (model/layers/moe.h), or the dense
// gated FFN:
//   gate, up = xn Wgate, xn Wup (one shared-input matmul);
//   h = act(gate) * up (SwiGLU or GeGLU-tanh, ModelConfig::activation);
//   y = h Wdown.
// Widths are the layer's own (cfg.layers[il].n_ff); buffers are sized for
// the largest layer. Threading: the step's thread; the backend parallelises.
#pragma once

#include <cstdint>

#include "model/layers/layer_context.h"
#include "model/layers/moe.h"

namespace ember {

struct FfnBuffers {
  float* gate = nullptr;  // [n, max_n_ff]; holds act(gate) * up after the activation
  float* up = nullptr;    // [n, max_n_ff]
  MoeBuffers moe;         // MoE layers
};

// xn: [n, n_embd] normed input; y: [n, n_embd] output (before any post-norm
// and the residual add).
void ffn_layer(const LayerContext& c, const float* xn, const FfnBuffers& b, float* y);

}  // namespace ember
