// The feed-forward sub-block; see ffn.h.
#include "model/layers/ffn.h"

#include "model/layers/linear_ops.h"

namespace ember {

namespace {

void dense_gated_ffn(const LayerContext& c, const float* xn, const FfnBuffers& b, float* y) {
  const int64_t n = c.n, E = c.cfg.n_embd, F = c.lc.n_ff;
  const LinearOut gate_up[] = {{&c.w.gate, LinearRole::kGate, b.gate, F}, {&c.w.up, LinearRole::kUp, b.up, F}};
  run_linears(c.backend, c.observer, c.il, xn, E, n, gate_up, 2);
  c.backend.gated_activation(gated_activation_of(c.cfg.activation), b.gate, F, b.up, F, n, F);
  // QuaRot's R4: down's columns hold W_down H^T (ModelConfig::rotation).
  if (const int g = c.cfg.rotation.ffn_down) c.backend.hadamard(b.gate, F, n, static_cast<int>(F / g), g, false);
  const LinearOut down{&c.w.down, LinearRole::kDown, y, E};
  run_linears(c.backend, c.observer, c.il, b.gate, F, n, &down, 1);
  if (c.tp) c.tp->all_reduce(y, n * E);  // down is row-parallel under tensor parallelism
}

}  // namespace

void ffn_layer(const LayerContext& c, const float* xn, const FfnBuffers& b, float* y) {
  switch (c.lc.ffn_kind) {
    case FfnKind::kDenseGated: dense_gated_ffn(c, xn, b, y); return;
    case FfnKind::kMoe: moe_layer(c, xn, b.moe, y); return;
  }
}

}  // namespace ember
