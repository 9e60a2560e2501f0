// One transformer block of the training pass, forward (saving what the
// backward needs) and backward; see train/step.h. The wiring follows the
// inference block (model/layers/block.cpp, attention.cpp, ffn.cpp) flag by
// flag: pre-norm attention with optional biases, QK-norm, RoPE, GQA with a
// sliding window and soft-capping, optional post-attention norm, residual;
// pre-norm gated FFN, optional post-FFN norm, residual.
#include <cmath>

#include "core/check.h"
#include "train/step_impl.h"

namespace ember {
namespace {

TrainActivation activation_of(const ModelConfig& cfg) {
  return cfg.activation == Activation::kGeluTanh ? TrainActivation::kGeluTanh : TrainActivation::kSilu;
}

// y = x W^T + b + s (x A^T) B^T over n rows; xa receives x A^T [n, rank]
// (adapters only); tmp: [n, rank] scratch.
void linear_forward(TrainStep::Impl& im, const LinearParams& L, const float* x, int64_t n, float* y, float* xa,
                    float* tmp) {
  im.gemm(n, L.out, L.in, x, L.in, false, L.w, L.in, true, y, L.out, false, im.pool);
  if (L.b)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < L.out; ++o) y[r * L.out + o] += L.b[o];
  if (L.la) {
    const int64_t R = im.model.lora_rank();
    const float s = im.model.lora_scale();
    im.gemm(n, R, L.in, x, L.in, false, L.la, L.in, true, xa, R, false, im.pool);
    for (int64_t i = 0; i < n * R; ++i) tmp[i] = s * xa[i];
    im.gemm(n, L.out, R, tmp, R, false, L.lb, R, true, y, L.out, true, im.pool);
  }
}

// dx (= or += with accumulate) dy W (+ the adapter's path); parameter
// gradients where wanted. tmp0, tmp1: [n, rank] scratch.
void linear_backward(TrainStep::Impl& im, const LinearParams& L, const float* x, const float* xa, const float* dy,
                     int64_t n, float* dx, bool accumulate, float* tmp0, float* tmp1) {
  if (dx) im.gemm(n, L.in, L.out, dy, L.out, false, L.w, L.in, false, dx, L.in, accumulate, im.pool);
  if (L.gw) im.gemm(L.out, L.in, n, dy, L.out, true, x, L.in, false, L.gw, L.in, true, im.pool);
  if (L.gb) train_bias_backward(dy, n, L.out, L.gb, im.pool);
  if (L.la) {
    const int64_t R = im.model.lora_rank();
    const float s = im.model.lora_scale();
    // dt = s dy B [n, R]
    im.gemm(n, R, L.out, dy, L.out, false, L.lb, R, false, tmp0, R, false, im.pool);
    for (int64_t i = 0; i < n * R; ++i) tmp0[i] *= s;
    if (L.glb) {  // dB += dy^T (s xa)
      for (int64_t i = 0; i < n * R; ++i) tmp1[i] = s * xa[i];
      im.gemm(L.out, R, n, dy, L.out, true, tmp1, R, false, L.glb, R, true, im.pool);
    }
    if (L.gla) im.gemm(R, L.in, n, tmp0, R, true, x, L.in, false, L.gla, L.in, true, im.pool);  // dA += dt^T x
    if (dx) im.gemm(n, L.in, R, tmp0, R, false, L.la, L.in, false, dx, L.in, true, im.pool);     // dx += dt A
  }
}

const float* vec(const TrainModel& m, TensorRole r, int l) { return m.param(m.find(r, l)); }
float* vec_grad(const TrainModel& m, TensorRole r, int l, float* grad) {
  const TrainTensor* t = m.find(r, l);
  return t && t->trainable && grad ? grad + t->grad_offset : nullptr;
}
float norm_offset(const TrainModel& m, TensorRole r, int l) {
  const TrainTensor* t = m.find(r, l);
  return t ? t->norm_offset : 0.f;
}

TrainAttentionShape attention_shape(const TrainStep::Impl& im, int l) {
  const ModelConfig& c = im.cfg;
  const LayerConfig& lc = c.layers[l];
  TrainAttentionShape s;
  s.n_seq = im.batch.n_seq;
  s.seq_len = im.batch.seq_len;
  s.n_head = lc.n_head;
  s.n_head_kv = lc.n_head_kv;
  s.head_dim = c.head_dim;
  s.head_dim_v = c.head_dim_v;
  s.scale = c.attn_scale > 0.f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  s.softcap = c.attn_logit_softcap;
  s.window = lc.sliding_window;
  return s;
}

}  // namespace

LinearParams TrainStep::Impl::linear(int l, LinearSlot s, float* grad) const {
  static constexpr TensorRole kW[] = {TensorRole::kAttnQ,      TensorRole::kAttnK,   TensorRole::kAttnV,
                                      TensorRole::kAttnOutput, TensorRole::kFfnGate, TensorRole::kFfnUp,
                                      TensorRole::kFfnDown};
  static constexpr TensorRole kB[] = {TensorRole::kAttnQBias, TensorRole::kAttnKBias, TensorRole::kAttnVBias,
                                      TensorRole::kAttnOutputBias, TensorRole::kUnknown, TensorRole::kUnknown,
                                      TensorRole::kUnknown};
  LinearParams L;
  auto g = [&](const TrainTensor* t) { return t && t->trainable && grad ? grad + t->grad_offset : nullptr; };
  const TrainTensor* w = model.find(kW[s], l);
  EMBER_CHECK(w != nullptr);
  L.w = model.param(w);
  L.gw = g(w);
  L.out = w->rows;
  L.in = w->cols;
  if (const TrainTensor* b = model.find(kB[s], l)) {
    L.b = model.param(b);
    L.gb = g(b);
  }
  const TrainTensor* la = model.find(kW[s], l, ParamKind::kLoraA);
  const TrainTensor* lb = model.find(kW[s], l, ParamKind::kLoraB);
  if (la && lb) {
    L.la = model.param(la);
    L.lb = model.param(lb);
    L.gla = g(la);
    L.glb = g(lb);
  }
  return L;
}

void train_block_forward(TrainStep::Impl& im, int l, const float* x_in, float* x_out, const BlockActs& a) {
  const ModelConfig& c = im.cfg;
  const LayerConfig& lc = c.layers[l];
  TrainModel& m = im.model;
  ThreadPool& pool = im.pool;
  const int64_t n = im.n, E = c.n_embd, F = lc.n_ff, hd = c.head_dim;
  float* y = im.s_e0.data();
  float* tmp = im.s_r0.data();

  train_rms_norm_forward(x_in, n, E, vec(m, TensorRole::kAttnNorm, l), norm_offset(m, TensorRole::kAttnNorm, l),
                         c.norm_eps, a.xn1, a.rstd1, pool);
  const LinearParams lq = im.linear(l, kSlotQ, nullptr), lk = im.linear(l, kSlotK, nullptr),
                     lv = im.linear(l, kSlotV, nullptr);
  linear_forward(im, lq, a.xn1, n, c.qk_norm ? a.q_pre : a.q, a.xa[kSlotQ], tmp);
  linear_forward(im, lk, a.xn1, n, c.qk_norm ? a.k_pre : a.k, a.xa[kSlotK], tmp);
  linear_forward(im, lv, a.xn1, n, a.v, a.xa[kSlotV], tmp);
  if (c.qk_norm) {
    train_rms_norm_forward(a.q_pre, n * lc.n_head, hd, vec(m, TensorRole::kAttnQNorm, l),
                           norm_offset(m, TensorRole::kAttnQNorm, l), c.norm_eps, a.q, a.q_rstd, pool);
    train_rms_norm_forward(a.k_pre, n * lc.n_head_kv, hd, vec(m, TensorRole::kAttnKNorm, l),
                           norm_offset(m, TensorRole::kAttnKNorm, l), c.norm_eps, a.k, a.k_rstd, pool);
  }
  const int rt = im.rope_of_layer[l];
  const int64_t T = im.batch.seq_len;
  train_rope_forward(a.q, n, T, lc.n_head, static_cast<int>(hd), c.n_rot, c.rope_style, im.cos_t[rt].data(),
                     im.sin_t[rt].data(), pool);
  train_rope_forward(a.k, n, T, lc.n_head_kv, static_cast<int>(hd), c.n_rot, c.rope_style, im.cos_t[rt].data(),
                     im.sin_t[rt].data(), pool);
  train_attention_forward(attention_shape(im, l), a.q, a.k, a.v, a.attn, a.lse, pool);
  const LinearParams lo = im.linear(l, kSlotO, nullptr);
  linear_forward(im, lo, a.attn, n, c.post_attn_norm ? a.o : y, a.xa[kSlotO], tmp);
  if (c.post_attn_norm)
    train_rms_norm_forward(a.o, n, E, vec(m, TensorRole::kPostAttnNorm, l),
                           norm_offset(m, TensorRole::kPostAttnNorm, l), c.norm_eps, y, a.o_rstd, pool);
  for (int64_t i = 0; i < n * E; ++i) a.x2[i] = x_in[i] + y[i];

  train_rms_norm_forward(a.x2, n, E, vec(m, TensorRole::kFfnNorm, l), norm_offset(m, TensorRole::kFfnNorm, l),
                         c.norm_eps, a.xn2, a.rstd2, pool);
  linear_forward(im, im.linear(l, kSlotGate, nullptr), a.xn2, n, a.g, a.xa[kSlotGate], tmp);
  linear_forward(im, im.linear(l, kSlotUp, nullptr), a.xn2, n, a.u, a.xa[kSlotUp], tmp);
  float* act = im.s_f0.data();
  train_gated_forward(activation_of(c), a.g, a.u, act, n * F, pool);
  linear_forward(im, im.linear(l, kSlotDown, nullptr), act, n, c.post_ffn_norm ? a.f : y, a.xa[kSlotDown], tmp);
  if (c.post_ffn_norm)
    train_rms_norm_forward(a.f, n, E, vec(m, TensorRole::kPostFfnNorm, l), norm_offset(m, TensorRole::kPostFfnNorm, l),
                           c.norm_eps, y, a.f_rstd, pool);
  for (int64_t i = 0; i < n * E; ++i) x_out[i] = a.x2[i] + y[i];
}

void train_block_backward(TrainStep::Impl& im, int l, const float* x_in, const BlockActs& a, float* dres,
                          float* grad) {
  const ModelConfig& c = im.cfg;
  const LayerConfig& lc = c.layers[l];
  TrainModel& m = im.model;
  ThreadPool& pool = im.pool;
  const int64_t n = im.n, E = c.n_embd, F = lc.n_ff, hd = c.head_dim;
  float* t0 = im.s_r0.data();
  float* t1 = im.s_r1.data();
  float* dsub = im.s_e1.data();  // gradient of a sub-block's output before its post-norm
  float* dxn = im.s_e2.data();

  // FFN: dres = d(x_out) = d(x2) (residual) + the sub-block's path.
  const float* dy = dres;
  if (c.post_ffn_norm) {
    train_rms_norm_backward(a.f, a.f_rstd, n, E, vec(m, TensorRole::kPostFfnNorm, l),
                            norm_offset(m, TensorRole::kPostFfnNorm, l), dres, dsub, false,
                            vec_grad(m, TensorRole::kPostFfnNorm, l, grad), pool);
    dy = dsub;
  }
  float* act = im.s_f0.data();
  float* dact = im.s_f1.data();
  train_gated_forward(activation_of(c), a.g, a.u, act, n * F, pool);
  linear_backward(im, im.linear(l, kSlotDown, grad), act, a.xa[kSlotDown], dy, n, dact, false, t0, t1);
  float* dg = dact;
  float* du = act;  // the activation is no longer needed
  train_gated_backward(activation_of(c), a.g, a.u, dact, dg, du, n * F, pool);
  linear_backward(im, im.linear(l, kSlotGate, grad), a.xn2, a.xa[kSlotGate], dg, n, dxn, false, t0, t1);
  linear_backward(im, im.linear(l, kSlotUp, grad), a.xn2, a.xa[kSlotUp], du, n, dxn, true, t0, t1);
  train_rms_norm_backward(a.x2, a.rstd2, n, E, vec(m, TensorRole::kFfnNorm, l), norm_offset(m, TensorRole::kFfnNorm, l),
                          dxn, dres, true, vec_grad(m, TensorRole::kFfnNorm, l, grad), pool);

  // Attention: dres = d(x2).
  dy = dres;
  if (c.post_attn_norm) {
    train_rms_norm_backward(a.o, a.o_rstd, n, E, vec(m, TensorRole::kPostAttnNorm, l),
                            norm_offset(m, TensorRole::kPostAttnNorm, l), dres, dsub, false,
                            vec_grad(m, TensorRole::kPostAttnNorm, l, grad), pool);
    dy = dsub;
  }
  float* dattn = im.s_q0.data();
  linear_backward(im, im.linear(l, kSlotO, grad), a.attn, a.xa[kSlotO], dy, n, dattn, false, t0, t1);
  float* dq = im.s_q1.data();
  float* dk = im.s_k0.data();
  float* dv = im.s_v0.data();
  train_attention_backward(attention_shape(im, l), a.q, a.k, a.v, a.attn, a.lse, dattn, dq, dk, dv, pool);
  const int rt = im.rope_of_layer[l];
  const int64_t T = im.batch.seq_len;
  train_rope_backward(dq, n, T, lc.n_head, static_cast<int>(hd), c.n_rot, c.rope_style, im.cos_t[rt].data(),
                      im.sin_t[rt].data(), pool);
  train_rope_backward(dk, n, T, lc.n_head_kv, static_cast<int>(hd), c.n_rot, c.rope_style, im.cos_t[rt].data(),
                      im.sin_t[rt].data(), pool);
  if (c.qk_norm) {
    // Pre-norm gradients go to buffers of their own (the norm's dw reads dq).
    float* dq_pre = im.s_q2.data();
    float* dk_pre = im.s_k1.data();
    train_rms_norm_backward(a.q_pre, a.q_rstd, n * lc.n_head, hd, vec(m, TensorRole::kAttnQNorm, l),
                            norm_offset(m, TensorRole::kAttnQNorm, l), dq, dq_pre, false,
                            vec_grad(m, TensorRole::kAttnQNorm, l, grad), pool);
    train_rms_norm_backward(a.k_pre, a.k_rstd, n * lc.n_head_kv, hd, vec(m, TensorRole::kAttnKNorm, l),
                            norm_offset(m, TensorRole::kAttnKNorm, l), dk, dk_pre, false,
                            vec_grad(m, TensorRole::kAttnKNorm, l, grad), pool);
    dq = dq_pre;
    dk = dk_pre;
  }
  linear_backward(im, im.linear(l, kSlotQ, grad), a.xn1, a.xa[kSlotQ], dq, n, dxn, false, t0, t1);
  linear_backward(im, im.linear(l, kSlotK, grad), a.xn1, a.xa[kSlotK], dk, n, dxn, true, t0, t1);
  linear_backward(im, im.linear(l, kSlotV, grad), a.xn1, a.xa[kSlotV], dv, n, dxn, true, t0, t1);
  train_rms_norm_backward(x_in, a.rstd1, n, E, vec(m, TensorRole::kAttnNorm, l),
                          norm_offset(m, TensorRole::kAttnNorm, l), dxn, dres, true,
                          vec_grad(m, TensorRole::kAttnNorm, l, grad), pool);
}

}  // namespace ember
