// The attention sub-block; see attention.h.
#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>

#include "model/layers/linear_ops.h"
#include "model/layers/norm.h"

namespace ember {

void attention_layer(const LayerContext& c, const TokenLayout& tl, const RopeTables& rope, const float* xn,
                     const AttentionBuffers& b, float* y) {
  Backend& be = c.backend;
  const ModelConfig& cfg = c.cfg;
  const LayerWeights& w = c.w;
  const int64_t n = c.n, E = cfg.n_embd;
  const int hd = cfg.head_dim;
  const int64_t Q = c.lc.n_q_dim(hd), K = c.lc.n_kv_dim(hd), Vd = c.lc.n_v_dim(cfg.head_dim_v);
  const int64_t O = static_cast<int64_t>(c.lc.n_head) * cfg.head_dim_v;

  const LinearOut qkv[] = {{&w.q, LinearRole::kQ, b.q, Q}, {&w.k, LinearRole::kK, b.k, K},
                           {&w.v, LinearRole::kV, b.v, Vd}};
  run_linears(be, c.observer, c.il, xn, E, n, qkv, 3);

  if (w.q_norm) norm_heads(be, cfg, b.q, n, c.lc.n_head, w.q_norm);
  if (w.k_norm) norm_heads(be, cfg, b.k, n, c.lc.n_head_kv, w.k_norm);
  be.rope(b.q, Q, n, c.lc.n_head, hd, cfg.n_rot, cfg.rope_style, rope.cos, rope.sin);
  be.rope(b.k, K, n, c.lc.n_head_kv, hd, cfg.n_rot, cfg.rope_style, rope.cos, rope.sin);

  // K/V rows of this layer (the layer's width within the cache's row),
  // encoded in the cache's formats.
  for (int64_t t = 0; t < n; ++t) {
    KvCache& cache = *tl.caches[tl.seg[t]];
    const KvTypes ty = cache.types();
    kv_store_row(ty.k, b.k + t * K, K, cache.k_row(c.il, tl.pos[t]));
    kv_store_row(ty.v, b.v + t * Vd, Vd, cache.v_row(c.il, tl.pos[t]));
  }

  AttentionShape s;
  s.n_head = c.lc.n_head;
  s.n_head_kv = c.lc.n_head_kv;
  s.head_dim = hd;
  s.head_dim_v = cfg.head_dim_v;
  s.scale = cfg.attn_scale > 0.f ? cfg.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  s.softcap = cfg.attn_logit_softcap;
  s.sliding_window = c.lc.sliding_window;
  for (int i = 0; i < tl.n_segs; ++i) b.views[i] = tl.caches[i]->view(c.il);
  be.attention(s, b.q, tl.pos, n, b.views, tl.seg, b.attn);

  const LinearOut o{&w.o, LinearRole::kO, y, E};
  run_linears(be, c.observer, c.il, b.attn, O, n, &o, 1);
}

}  // namespace ember
