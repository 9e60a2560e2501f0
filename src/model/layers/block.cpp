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
  // Without a pre-norm the sub-block reads x itself (it writes only b.y).
  const float* in = x;
  if (c.cfg.attn_pre_norm) {
    norm_rows(be, c.cfg, x, c.w.attn_norm, b.xn, c.n);
    // Online input rotations (ModelConfig::rotation, only with pre-norms):
    // the linears' columns hold W H^T, so their normed input is rotated by H.
    if (rot.attn_in) be.hadamard(b.xn, E, c.n, static_cast<int>(E / rot.attn_in), rot.attn_in, false);
    in = b.xn;
  }
  attention_layer(c, tl, rope, in, b.attn, b.y);
  if (c.w.post_attn_norm) norm_rows(be, c.cfg, b.y, c.w.post_attn_norm, b.y, c.n);
  be.add(x, b.y, nE);

  in = x;
  if (c.cfg.ffn_pre_norm) {
    norm_rows(be, c.cfg, x, c.w.ffn_norm, b.xn, c.n);
    if (rot.ffn_in) be.hadamard(b.xn, E, c.n, static_cast<int>(E / rot.ffn_in), rot.ffn_in, false);
    in = b.xn;
  }
  ffn_layer(c, in, b.ffn, b.y);
  if (c.w.post_ffn_norm) norm_rows(be, c.cfg, b.y, c.w.post_ffn_norm, b.y, c.n);
  be.add(x, b.y, nE);
}

}  // namespace ember
