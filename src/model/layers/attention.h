// The attention sub-block of one layer over a ragged batch:
//   Q, K, V = xn Wq, xn Wk, xn Wv (one shared-input matmul), + biases;
//   QK-norm per head (if the layer has q_norm / k_norm);
//   RoPE (angles once per token for this layer's frequencies, applied to Q
//   and K); K/V rows written to each token's own sequence cache;
//   ragged causal attention (each token over its own sequence's keys, the
//   layer's window); y = attn Wo (+ bias).
// Head counts are the layer's own (cfg.layers[il]); buffers are sized for
// the largest layer. The order of operations (bias, QK-norm, RoPE) is fixed:
// it is part of the arithmetic the golden outputs pin.
//
// Threading: called on the step's thread; the backend parallelises. The K/V
// writes go through KvCache (a few row copies per token).
#pragma once

#include <cstdint>

#include "model/layers/layer_context.h"

namespace ember {

// Scratch of the attention sub-block, max_batch rows each (rows are packed
// with the layer's own widths).
struct AttentionBuffers {
  float* q = nullptr;         // [n, max_n_head * head_dim]
  float* k = nullptr;         // [n, max_n_head_kv * head_dim]
  float* v = nullptr;         // [n, max_n_head_kv * head_dim_v]
  float* attn = nullptr;      // [n, max_n_head * head_dim_v] attention output (attn_output's input)
  float* rope_cos = nullptr;  // [n, n_rot / 2]
  float* rope_sin = nullptr;  // [n, n_rot / 2]
  KvView* views = nullptr;    // [n_segs] this layer's view of each sequence's cache
};

// xn: [n, n_embd] normed input; y: [n, n_embd] output (before any post-norm
// and the residual add). inv_freq: [n_rot / 2] this layer's RoPE frequencies.
void attention_layer(const LayerContext& c, const TokenLayout& tl, const float* inv_freq, const float* xn,
                     const AttentionBuffers& b, float* y);

}  // namespace ember
