// The transformer block; see block.h.
#include "model/layers/block.h"

#include "model/layers/norm.h"

namespace ember {

void transformer_block(const LayerContext& c, const TokenLayout& tl, const RopeTables& rope, float* x,
                       const BlockBuffers& b) {
  Backend& be = c.backend;
  const int64_t nE = c.n * c.cfg.n_embd;

  const int64_t E = c.cfg.n_embd;
  const ModelRotation& rot = c.cfg.rotation;
  norm_rows(be, c.cfg, x, c.w.attn_norm, b.xn, c.n);
  // Online input rotations (ModelConfig::rotation): the linears' columns
  // hold W H^T, so their normed input is rotated by H first.
  if (rot.attn_in) be.hadamard(b.xn, E, c.n, static_cast<int>(E / rot.attn_in), rot.attn_in, false);
  attention_layer(c, tl, rope, b.xn, b.attn, b.y);
  if (c.w.post_attn_norm) norm_rows(be, c.cfg, b.y, c.w.post_attn_norm, b.y, c.n);
  be.add(x, b.y, nE);

  norm_rows(be, c.cfg, x, c.w.ffn_norm, b.xn, c.n);
  if (rot.ffn_in) be.hadamard(b.xn, E, c.n, static_cast<int>(E / rot.ffn_in), rot.ffn_in, false);
  ffn_layer(c, b.xn, b.ffn, b.y);
  if (c.w.post_ffn_norm) norm_rows(be, c.cfg, b.y, c.w.post_ffn_norm, b.y, c.n);
  be.add(x, b.y, nE);
}

}  // namespace ember
