// The attention sub-block; see attention.h.
#include "model/layers/attention.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "model/layers/linear_ops.h"
#include "model/layers/norm.h"

namespace ember {
namespace {

// Calls f(t0, t1) for each maximal run [t0, t1) of tokens whose caches
// agree on `rotated` (the same rotation for every token of a run).
template <typename Pred, typename F>
void for_rotated_runs(const TokenLayout& tl, int64_t n, Pred rotated, F f) {
  int64_t t0 = 0;
  while (t0 < n) {
    const bool r = rotated(tl.caches[tl.seg[t0]]->types());
    int64_t t1 = t0 + 1;
    while (t1 < n && rotated(tl.caches[tl.seg[t1]]->types()) == r) ++t1;
    if (r) f(t0, t1);
    t0 = t1;
  }
}

// QK-norm over whole Q / K rows (OLMoE, OLMo 2) under tensor parallelism:
// each rank holds its heads' columns of a row, so the sums of squares are
// added over the ranks (one all-reduce of two values per token; a KV head
// that several ranks hold, LayerConfig::kv_replicas, counted once, by the
// first of them), then each rank scales its own columns:
//   x_i * w_i / sqrt(sum over the whole row of x^2 / width + eps).
// Sums in double on each rank, added in f32 across ranks (rank order).
void norm_full_rows_tp(const LayerContext& c, float* q, int64_t Q, const float* wq, float* k, int64_t K,
                       const float* wk) {
  TpGroup& tp = *c.tp;
  const int64_t n = c.n;
  const int ranks = tp.comm->size();
  const int replicas = std::max(1, c.lc.kv_replicas);
  const bool k_counts = tp.comm->rank() % replicas == 0;
  std::vector<float>& ss = tp.scratch;
  ss.assign(static_cast<size_t>(2 * n), 0.f);
  for (int64_t t = 0; t < n; ++t) {
    double a = 0, b = 0;
    for (int64_t i = 0; i < Q; ++i) a += static_cast<double>(q[t * Q + i]) * q[t * Q + i];
    if (k_counts)
      for (int64_t i = 0; i < K; ++i) b += static_cast<double>(k[t * K + i]) * k[t * K + i];
    ss[2 * t] = static_cast<float>(a);
    ss[2 * t + 1] = static_cast<float>(b);
  }
  tp.all_reduce(ss.data(), 2 * n);
  if (!tp.status) return;
  const double q_total = static_cast<double>(Q) * ranks, k_total = static_cast<double>(K) * ranks / replicas;
  const double eps = c.cfg.norm_eps;
  auto scale_rows = [&](float* x, int64_t width, const float* w, double total, int which) {
    if (!w) return;
    for (int64_t t = 0; t < n; ++t) {
      const double s = 1.0 / std::sqrt(static_cast<double>(ss[2 * t + which]) / total + eps);
      for (int64_t i = 0; i < width; ++i) x[t * width + i] = static_cast<float>(x[t * width + i] * s * w[i]);
    }
  };
  scale_rows(q, Q, wq, q_total, 0);
  scale_rows(k, K, wk, k_total, 1);
}

bool rotates_k(KvTypes t) { return t.rot_k == KvRotation::kHadamard; }
bool rotates_v(KvTypes t) { return t.rot_v == KvRotation::kHadamard; }

}  // namespace

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

  if (cfg.qk_norm_full && c.tp) {
    norm_full_rows_tp(c, b.q, Q, w.q_norm, b.k, K, w.k_norm);
  } else if (cfg.qk_norm_full) {  // over the whole projection (OLMoE, OLMo 2)
    if (w.q_norm) norm_rows_width(be, cfg, b.q, Q, w.q_norm, b.q, n);
    if (w.k_norm) norm_rows_width(be, cfg, b.k, K, w.k_norm, b.k, n);
  } else {
    if (w.q_norm) norm_heads(be, cfg, b.q, n, c.lc.n_head, w.q_norm);
    if (w.k_norm) norm_heads(be, cfg, b.k, n, c.lc.n_head_kv, w.k_norm);
  }
  if (c.lc.use_rope) {
    be.rope(b.q, Q, n, c.lc.n_head, hd, cfg.n_rot, cfg.rope_style, rope.cos, rope.sin);
    be.rope(b.k, K, n, c.lc.n_head_kv, hd, cfg.n_rot, cfg.rope_style, rope.cos, rope.sin);
  }
  if (rope.q_scale) be.rope(b.q, Q, n, c.lc.n_head, hd, hd, RopeStyle::kNormal, rope.q_scale, rope.zeros);
  // Rotated caches (kernels/kv_types.h KvRotation): Q and K after RoPE by
  // the same per-head Hadamard H (q.k unchanged), V by H before it is
  // stored; the attention output is rotated back below.
  for_rotated_runs(tl, n, rotates_k, [&](int64_t t0, int64_t t1) {
    be.hadamard(b.q + t0 * Q, Q, t1 - t0, c.lc.n_head, hd, false);
    be.hadamard(b.k + t0 * K, K, t1 - t0, c.lc.n_head_kv, hd, false);
  });
  for_rotated_runs(tl, n, rotates_v, [&](int64_t t0, int64_t t1) {
    be.hadamard(b.v + t0 * Vd, Vd, t1 - t0, c.lc.n_head_kv, cfg.head_dim_v, false);
  });

  // K/V rows of this layer (the layer's width within the cache's row),
  // encoded in the caches' formats into their pages by one backend op for
  // every token. Token-group keys (q4c) go through their cache's tails
  // instead (its store view has no K pages): such a cache first learns
  // where this pass's rows start (the f16 tails of groups full before it
  // are freed), then stores its K rows itself.
  bool tail_keys = false;
  for (int i = 0; i < tl.n_segs; ++i) {
    b.stores[i] = tl.caches[i]->store_view(c.il);
    if (b.stores[i].k_blocks) continue;
    tail_keys = true;
    int64_t first = INT64_MAX;
    for (int64_t t = 0; t < n; ++t)
      if (tl.seg[t] == i) first = std::min<int64_t>(first, tl.pos[t]);
    if (first != INT64_MAX) tl.caches[i]->begin_k_writes(c.il, first);
  }
  be.kv_store(b.k, K, K, b.v, Vd, Vd, tl.pos, n, b.stores, tl.seg);
  if (tail_keys)
    for (int64_t t = 0; t < n; ++t)
      if (!b.stores[tl.seg[t]].k_blocks) tl.caches[tl.seg[t]]->store_k(c.il, tl.pos[t], b.k + t * K, K);

  AttentionShape s;
  s.n_head = c.lc.n_head;
  s.n_head_kv = c.lc.n_head_kv;
  s.head_dim = hd;
  s.head_dim_v = cfg.head_dim_v;
  s.scale = cfg.attn_scale > 0.f ? cfg.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  s.softcap = cfg.attn_logit_softcap;
  s.sliding_window = c.lc.sliding_window;
  s.sinks = w.attn_sinks;
  for (int i = 0; i < tl.n_segs; ++i) b.views[i] = tl.caches[i]->view(c.il);
  be.attention(s, b.q, tl.pos, n, b.views, tl.seg, b.attn);
  // attn = sum_j p_j (H v_j) = H (sum_j p_j v_j) per head: H^T undoes it.
  for_rotated_runs(tl, n, rotates_v, [&](int64_t t0, int64_t t1) {
    be.hadamard(b.attn + t0 * O, O, t1 - t0, c.lc.n_head, cfg.head_dim_v, true);
  });

  // QuaRot's online rotation of O's input (ModelConfig::rotation.attn_out).
  if (const int g = cfg.rotation.attn_out) be.hadamard(b.attn, O, n, static_cast<int>(O / g), g, false);
  const LinearOut o{&w.o, LinearRole::kO, y, E};
  run_linears(be, c.observer, c.il, b.attn, O, n, &o, 1);
  // Tensor parallelism: O is row-parallel (this rank's heads' columns), the
  // ranks' partial outputs add up to the whole.
  if (c.tp) c.tp->all_reduce(y, n * E);
}

}  // namespace ember
