// Internals of TrainStep (train/step.h), shared by step.cpp (driver, head,
// loss) and block.cpp (one block's forward and backward): the saved
// activations of a block, the scratch buffers, a linear's parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "train/step.h"

namespace ember {

// The block linears in adapter order.
enum LinearSlot { kSlotQ, kSlotK, kSlotV, kSlotO, kSlotGate, kSlotUp, kSlotDown, kNumSlots };

// A block linear: y = x W^T + b + s (x A^T) B^T; gradient pointers null when
// frozen (or absent).
struct LinearParams {
  const float* w = nullptr;   // [out, in]
  const float* b = nullptr;   // [out]
  const float* la = nullptr;  // [rank, in]
  const float* lb = nullptr;  // [out, rank]
  float* gw = nullptr;
  float* gb = nullptr;
  float* gla = nullptr;
  float* glb = nullptr;
  int64_t out = 0, in = 0;
};

// What one block saves (null: not used by this model's wiring). Shapes for
// N rows; widths are the layer's own.
struct BlockActs {
  float* xn1 = nullptr;    // [N, E] attention input (normed)
  float* rstd1 = nullptr;  // [N]
  float* q_pre = nullptr;  // [N, Q] before QK-norm (qk_norm)
  float* q_rstd = nullptr; // [N * n_head]
  float* k_pre = nullptr;  // [N, K]
  float* k_rstd = nullptr; // [N * n_head_kv]
  float* q = nullptr;      // [N, Q] after QK-norm and RoPE
  float* k = nullptr;      // [N, K]
  float* v = nullptr;      // [N, Vd]
  float* attn = nullptr;   // [N, n_head * head_dim_v]
  float* lse = nullptr;    // [N, n_head]
  float* o = nullptr;      // [N, E] before the post-attention norm (post_attn_norm)
  float* o_rstd = nullptr; // [N]
  float* x2 = nullptr;     // [N, E] residual after attention
  float* xn2 = nullptr;    // [N, E] FFN input (normed)
  float* rstd2 = nullptr;  // [N]
  float* g = nullptr;      // [N, F] gate
  float* u = nullptr;      // [N, F] up
  float* f = nullptr;      // [N, E] before the post-FFN norm (post_ffn_norm)
  float* f_rstd = nullptr; // [N]
  float* xa[kNumSlots] = {};  // [N, rank] x A^T of each adapter (LoRA)
};

struct TrainStep::Impl {
  TrainModel& model;
  const ModelConfig& cfg;
  ThreadPool& pool;
  Options opt;
  int64_t max_rows = 0;

  std::vector<float> resid;             // [n_layer + 1][max_rows, E]: block inputs / outputs
  std::vector<std::vector<float>> act_mem;  // one per saved block set
  std::vector<BlockActs> acts;          // [n_layer], or [1] with checkpointing

  // Scratch (max_rows rows): [N, E] x3, [N, F] x2, [N, max(Q, O)] x3, [N, K] x2, [N, Vd], adapters [N, rank] x2.
  std::vector<float> s_e0, s_e1, s_e2, s_f0, s_f1, s_q0, s_q1, s_q2, s_k0, s_k1, s_v0, s_r0, s_r1;

  // RoPE tables of the batch: per layer an index into cos_t / sin_t [seq_len, n_rot / 2].
  std::vector<int> rope_of_layer;
  std::vector<std::vector<float>> cos_t, sin_t;
  int64_t rope_len = 0;

  // The batch and the head.
  TrainBatch batch;
  int64_t n = 0;
  std::vector<float> hn, h_rstd, dres, chunk, chunk_teacher, chunk_capped;
  bool have_dres = false;

  // The matrix products of the linears and the head: train_gemm, or
  // train_gemm_bf16 with Options::bf16 (where the CPU has it).
  void (*gemm)(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*, int64_t, bool, float*, int64_t,
               bool, ThreadPool&) = train_gemm;

  Impl(TrainModel& m, const Options& o, ThreadPool& p);
  BlockActs& acts_of(int l) { return acts[opt.checkpointing ? 0 : l]; }
  float* resid_of(int l) { return resid.data() + static_cast<size_t>(l + 1) * max_rows * cfg.n_embd; }
  LinearParams linear(int l, LinearSlot s, float* grad) const;
};

// One block's forward from x_in into x_out (acts filled) and its backward:
// dres holds d(x_out) on entry and d(x_in) on return; parameter gradients
// accumulate into grad (block.cpp).
void train_block_forward(TrainStep::Impl& im, int l, const float* x_in, float* x_out, const BlockActs& a);
void train_block_backward(TrainStep::Impl& im, int l, const float* x_in, const BlockActs& a, float* dres,
                          float* grad);

}  // namespace ember
