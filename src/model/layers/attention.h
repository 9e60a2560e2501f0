// The attention sub-block of one layer over a ragged batch:
//   Q, K, V = xn Wq, xn Wk, xn Wv (one shared-input matmul), + biases;
//   QK-norm per head, or over the whole row (ModelConfig::qk_norm_full),
//   if the layer has q_norm / k_norm;
//   RoPE of Q and K with the angle tables of this layer's frequencies
//   (computed by the driver once per step for every set of frequencies, see
//   ForwardContext::run_layers), unless the layer has none (use_rope);
//   with an attention temperature (ModelConfig::attn_temp_scale), each Q row
//   times its token's factor (a RoPE op with the table cos = factor, sin = 0:
//   one rounding, the product itself); for a token whose cache rotates K
//   (KvTypes::rot_k, kernels/kv_types.h), Q and K per head times the
//   Hadamard matrix H (kernels/hadamard.h), and for one that rotates V, V
//   times H; K/V rows written to each token's own sequence cache;
//   ragged causal attention (each token over its own sequence's keys, the
//   layer's window); with rot_v the output per head times H^T;
//   y = attn Wo (+ bias). Without rotation (the default) no op is added.
// The q.k scale is ModelConfig::attn_scale (0: 1/sqrt(head_dim)); a RoPE
// magnitude (LayerConfig::rope_attn_factor) is in the angle tables.
// Head counts are the layer's own (cfg.layers[il]); buffers are sized for
// the largest layer. The order of operations (bias, QK-norm, RoPE) is fixed:
// it is part of the arithmetic the golden outputs pin.
//
// Threading: called on the step's thread; the backend parallelises. The K/V
// writes are one Backend::kv_store per layer over the caches' store views
// (a q4c cache's K rows through KvCache::store_k, on this thread).
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
  KvView* views = nullptr;    // [n_segs] this layer's view of each sequence's cache
  KvStoreView* stores = nullptr;  // [n_segs] and where its K/V rows are written
};

// RoPE tables of the step's tokens for this layer's frequencies: cos / sin
// [n, n_rot / 2] (Backend::rope_angles), times the layer's rope_attn_factor
// when it is not 1 (YaRN / LongRoPE: only the rotated dimensions grow, as
// in transformers and llama.cpp).
struct RopeTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  // The attention temperature of the step's tokens, as a RoPE table over
  // the whole head: [n, head_dim / 2] factors and as many zeros. Null: none.
  const float* q_scale = nullptr;
  const float* zeros = nullptr;
};

// xn: [n, n_embd] normed input; y: [n, n_embd] output (before any post-norm
// and the residual add).
void attention_layer(const LayerContext& c, const TokenLayout& tl, const RopeTables& rope, const float* xn,
                     const AttentionBuffers& b, float* y);

}  // namespace ember
