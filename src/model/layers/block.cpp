// The transformer block; see block.h.
#include "model/layers/block.h"

#include "model/layers/norm.h"

namespace ember {

void transformer_block(const LayerContext& c, const TokenLayout& tl, const RopeTables& rope, float* x,
                       const BlockBuffers& b) {
  Backend& be = c.backend;
  const int64_t nE = c.n * c.cfg.n_embd;

  norm_rows(be, c.cfg, x, c.w.attn_norm, b.xn, c.n);
  attention_layer(c, tl, rope, b.xn, b.attn, b.y);
  if (c.w.post_attn_norm) norm_rows(be, c.cfg, b.y, c.w.post_attn_norm, b.y, c.n);
  be.add(x, b.y, nE);

  norm_rows(be, c.cfg, x, c.w.ffn_norm, b.xn, c.n);
  ffn_layer(c, b.xn, b.ffn, b.y);
  if (c.w.post_ffn_norm) norm_rows(be, c.cfg, b.y, c.w.post_ffn_norm, b.y, c.n);
  be.add(x, b.y, nE);
}

}  // namespace ember
