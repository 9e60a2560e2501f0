// The Mixture-of-Experts sub-block; see moe.h.
#include "model/layers/moe.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/ref/moe.h"
#include "model/layers/linear_ops.h"

namespace ember {

namespace {

// The observer's view of the experts: for each expert with any slots, the
// rows its `role`s read (`rows_of_slot(s)`: the row slot s reads, width
// n_in), gathered in slot order.
template <typename RowOf>
void observe_experts(const LayerContext& c, const MoeBuffers& b, const int32_t* ids, int64_t n_slots, int n_expert,
                     const LinearRole* roles, int n_roles, int64_t n_in, RowOf row_of) {
  std::vector<float>& g = *b.observed;
  for (int e = 0; e < n_expert; ++e) {
    int64_t rows = 0;
    for (int64_t s = 0; s < n_slots; ++s)
      if (ids[s] == e) ++rows;
    if (!rows) continue;
    if (static_cast<int64_t>(g.size()) < rows * n_in) g.resize(static_cast<size_t>(rows * n_in));
    int64_t r = 0;
    for (int64_t s = 0; s < n_slots; ++s)
      if (ids[s] == e) std::copy_n(row_of(s), n_in, g.data() + (r++) * n_in);
    for (int i = 0; i < n_roles; ++i) c.observer->on_expert_input(c.il, roles[i], e, n_expert, g.data(), n_in, rows, n_in);
  }
}

// Expert sharing (kernels/moe.h): the step's decode tokens, each the only
// token of its sequence here, routed again within the set chosen for them
// when exact routing reads more experts than the budget.
void share_experts(const LayerContext& c, const MoeBuffers& b, const MoeRouting& r) {
  const MoeSharing& sh = c.cfg.moe_sharing;
  MoeShareScratch& sc = *b.share;
  const int k = r.k, E = r.n_expert;
  sc.seg_count.assign(static_cast<size_t>(b.n_segs), 0);
  for (int64_t t = 0; t < c.n; ++t) ++sc.seg_count[b.seg[t]];
  sc.group.clear();
  for (int64_t t = 0; t < c.n; ++t)
    if (sc.seg_count[b.seg[t]] == 1) sc.group.push_back(static_cast<int32_t>(t));
  const int64_t G = static_cast<int64_t>(sc.group.size());
  if (G < 2) return;
  sc.ids.resize(static_cast<size_t>(G * k));
  sc.weights.resize(static_cast<size_t>(G * k));
  sc.seen.assign(static_cast<size_t>(E), 0);
  int distinct = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int j = 0; j < k; ++j) {
      const int64_t s = static_cast<int64_t>(sc.group[g]) * k + j;
      sc.ids[g * k + j] = b.ids[s];
      sc.weights[g * k + j] = b.weights[s];
      if (!sc.seen[b.ids[s]]) {
        sc.seen[b.ids[s]] = 1;
        ++distinct;
      }
    }
  const int budget = std::max(k, static_cast<int>(std::ceil(static_cast<double>(sh.fraction) * distinct)));
  if (budget >= distinct) return;
  sc.allowed.resize(static_cast<size_t>(E));
  ref::moe_share_select(sc.ids.data(), sc.weights.data(), G, k, E, budget, std::min(sh.keep, k), sc.allowed.data());
  MoeRouting within = r;
  within.allowed = sc.allowed.data();
  for (const int32_t t : sc.group)
    c.backend.moe_route(b.logits + static_cast<int64_t>(t) * E, E, 1, within, b.ids + static_cast<int64_t>(t) * k,
                        b.weights + static_cast<int64_t>(t) * k);
}

// The distinct experts the step's slots read, into the counters.
void count_experts(const MoeBuffers& b, const int32_t* ids, int64_t n_slots, int n_expert, int64_t n) {
  std::vector<uint8_t>& seen = b.share->seen;
  seen.assign(static_cast<size_t>(n_expert), 0);
  int64_t distinct = 0;
  for (int64_t s = 0; s < n_slots; ++s)
    if (!seen[ids[s]]) {
      seen[ids[s]] = 1;
      ++distinct;
    }
  b.stats->layer_steps += 1;
  b.stats->experts_read += distinct;
  b.stats->tokens += n;
}

// y[s] += bias row ids[s] (width floats; y rows `width` apart), the
// experts' biases of gpt-oss, after the grouped matmul (its own rounding
// step, as a Linear's bias). bias null: nothing.
void add_expert_bias(Backend& be, float* y, int64_t width, const int32_t* ids, int64_t n_slots, const float* bias) {
  if (!bias) return;
  for (int64_t s = 0; s < n_slots; ++s) be.add(y + s * width, bias + static_cast<int64_t>(ids[s]) * width, width);
}

}  // namespace

void moe_layer(const LayerContext& c, const float* xn, const MoeBuffers& b, float* y) {
  Backend& be = c.backend;
  const LayerConfig& lc = c.lc;
  const MoeWeights& m = c.w.moe;
  const int64_t n = c.n, H = c.cfg.n_embd, F = lc.n_ff_exp, S = lc.n_ff_shexp;
  const int E = lc.n_expert, k = lc.n_expert_used;
  const int64_t n_slots = n * k;

  // Router logits and the shared expert's inputs: one shared-input matmul.
  LinearOut outs[kMaxSharedLinears];
  int n_outs = 0;
  outs[n_outs++] = {&m.router, LinearRole::kRouter, b.logits, E};
  if (S > 0) {
    outs[n_outs++] = {&m.shared_gate, LinearRole::kGateShexp, b.shared_gate, S};
    outs[n_outs++] = {&m.shared_up, LinearRole::kUpShexp, b.shared_up, S};
    if (m.shared_gate_inp) outs[n_outs++] = {&m.shared_gate_inp, LinearRole::kShexpGate, b.shared_logit, 1};
  }
  run_linears(be, c.observer, c.il, xn, H, n, outs, n_outs);

  MoeRouting r;
  r.gating = lc.moe_gating;
  r.n_expert = E;
  r.k = k;
  r.norm = lc.moe_norm_topk;
  r.scale = lc.moe_weights_scale;
  be.moe_route(b.logits, E, n, r, b.ids, b.weights);
  if (c.cfg.moe_sharing.on() && b.seg && b.share) share_experts(c, b, r);
  if (b.stats && b.share) count_experts(b, b.ids, n_slots, E, n);
  for (int64_t s = 0; s < n_slots; ++s) b.x_row[s] = static_cast<int32_t>(s / k);

  const GatedActivation act = gated_activation_of(c.cfg.activation);
  const int act_bits = m.gate.empty() ? 0 : m.gate[0].act_bits;
  if (c.observer) {
    const LinearRole roles[] = {LinearRole::kGateExps, LinearRole::kUpExps};
    observe_experts(c, b, b.ids, n_slots, E, roles, 2, H, [&](int64_t s) { return xn + (s / k) * H; });
  }
  const ExpertTarget gate_up[] = {{m.gate_w.data(), b.gate, F, act_bits}, {m.up_w.data(), b.up, F, act_bits}};
  be.moe_matmul(xn, H, n_slots, b.ids, b.x_row, E, gate_up, 2);
  add_expert_bias(be, b.gate, F, b.ids, n_slots, m.gate_b);
  add_expert_bias(be, b.up, F, b.ids, n_slots, m.up_b);
  be.gated_activation(act, b.gate, F, b.up, F, n_slots, F);
  if (c.observer) {
    const LinearRole roles[] = {LinearRole::kDownExps};
    observe_experts(c, b, b.ids, n_slots, E, roles, 1, F, [&](int64_t s) { return b.gate + s * F; });
  }
  const ExpertTarget down{m.down_w.data(), b.down, H, act_bits};
  be.moe_matmul(b.gate, F, n_slots, b.ids, nullptr, E, &down, 1);
  add_expert_bias(be, b.down, H, b.ids, n_slots, m.down_b);
  be.moe_combine(b.down, H, b.weights, k, n, H, y, H, /*accumulate=*/false);

  if (S > 0) {
    be.gated_activation(act, b.shared_gate, S, b.shared_up, S, n, S);
    const LinearOut sd{&m.shared_down, LinearRole::kDownShexp, b.down, H};
    run_linears(be, c.observer, c.il, b.shared_gate, S, n, &sd, 1);
    if (m.shared_gate_inp) {
      MoeRouting g;
      g.gating = MoeGating::kSigmoid;
      g.n_expert = 1;
      g.k = 1;
      be.moe_route(b.shared_logit, 1, n, g, b.shared_id, b.shared_weight);
      be.moe_combine(b.down, H, b.shared_weight, 1, n, H, y, H, /*accumulate=*/true);
    } else {
      be.add(y, b.down, n * H);
    }
  }
  // Tensor parallelism: every expert (and the shared one) holds this rank's
  // part of its FFN width, down row-parallel: the partial outputs add up
  // (the experts' down bias is added by rank 0 only).
  if (c.tp) c.tp->all_reduce(y, n * H);
}

}  // namespace ember
