// The one transformer block every architecture runs, wired by ModelConfig /
// LayerWeights (never by architecture name):
//   x += post_attn_norm?(attention(attn_norm?(x)))
//   x += post_ffn_norm?(ffn(ffn_norm?(x)))
// The pre-norms are applied unless the architecture has none
// (ModelConfig::attn_pre_norm / ffn_pre_norm: OLMo 2 feeds x itself), the
// post-norms when the layer has their weights.
//
// Threading and ownership as in layer_context.h.
#pragma once

#include "model/layers/attention.h"
#include "model/layers/ffn.h"
#include "model/layers/layer_context.h"

namespace ember {

struct BlockBuffers {
  float* xn = nullptr;  // [n, n_embd] normed input of a sub-block
  float* y = nullptr;   // [n, n_embd] sub-block output
  AttentionBuffers attn;
  FfnBuffers ffn;
};

// x: [n, n_embd] the residual stream, updated in place.
void transformer_block(const LayerContext& c, const TokenLayout& tl, const RopeTables& rope, float* x,
                       const BlockBuffers& b);

}  // namespace ember
