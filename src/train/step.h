// TrainStep: the forward and backward pass of one batch through a
// TrainModel, llm.c-style: its own f32 forward over the model's config
// (ModelConfig / LayerConfig: the same wiring flags the inference forward
// reads) that saves what the backward needs, then the output head and the
// loss in chunks of rows, then the backward of the head, every block and the
// embedding, accumulating parameter gradients.
//
// Batch: n_seq sequences of seq_len tokens, each at positions 0.. and
// attending only to itself; row r = b * seq_len + t.
//
// Saved per block (kernels/train.h for the ops): the block input, the normed
// inputs of both sub-blocks with their rstd, Q / K before and after QK-norm
// and RoPE, V, the attention output and its per-row log-sum-exp (the
// backward recomputes the probabilities from it), the pre-norm outputs of
// Gemma's post-norms, the residual after attention, gate and up. With
// checkpointing only each block's input is kept and a block is run again
// just before its backward (one block's activations in memory).
//
// Loss (per scored row, kernels/train.h train_kd_row): w_kl tau^2
// KL(teacher_tau || student_tau) + w_ce CE(next token), in chunks of rows so
// that only chunk x vocabulary logits exist at once; the teacher's rows come
// from a KdTargets (dense logits or sparse samples). Gradients are scaled by
// grad_scale (1 / rows of the optimizer step for a mean).
//
// Determinism: every kernel reduces in a fixed order (kernels/train.h), so a
// step gives the same bits for a given ISA level whatever the thread count.
//
// Ownership and threading: borrows the model (must outlive this) and the
// pool; owns its activation memory (sized for max_tokens rows at
// construction); one thread drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/train.h"
#include "train/train_model.h"

namespace ember {

struct TrainBatch {
  const int32_t* tokens = nullptr;   // [n_seq * seq_len]
  const int32_t* targets = nullptr;  // [n_seq * seq_len] next-token ids (< 0: none); null: no cross-entropy
  int64_t n_seq = 0, seq_len = 0;
  int64_t n_rows() const { return n_seq * seq_len; }
};

// The teacher's side of the loss for the rows of the current batch.
class KdTargets {
 public:
  virtual ~KdTargets() = default;
  // Dense: logits(r0, n, out) gives the teacher's logits [n, n_vocab] of
  // rows r0 .. r0 + n - 1. Sparse: row(r) gives row r's samples.
  virtual bool dense() const = 0;
  virtual void logits(int64_t r0, int64_t n, float* out) {}
  virtual KdRowTeacher row(int64_t r) { return {}; }
};

struct LossWeights {
  float tau = 1.f;   // temperature of the KL term
  float w_kl = 1.f;  // weight of tau^2 KL (ignored without a teacher)
  float w_ce = 0.f;  // weight of the cross-entropy on the batch's targets
};

// Sums over the scored rows of a batch (add batches with +=).
struct LossStats {
  double loss = 0, kl = 0, ce = 0;
  int64_t rows = 0, ce_rows = 0, top1 = 0;
  LossStats& operator+=(const LossStats& o) {
    loss += o.loss, kl += o.kl, ce += o.ce, rows += o.rows, ce_rows += o.ce_rows, top1 += o.top1;
    return *this;
  }
};

// Model FLOPs of one training pass over n_seq x seq_len rows (the MFU
// convention: no recomputation counted): every matrix product forward,
// its dX, its dW when trainable (adapters included), attention's QK^T and
// PV forward and twice that backward over the visible (causal, windowed)
// pairs; the output head over every row.
double train_step_flops(const TrainModel& m, int64_t n_seq, int64_t seq_len);

class TrainStep {
 public:
  struct Options {
    int64_t max_rows = 512;       // most rows (n_seq * seq_len) of a batch
    bool checkpointing = false;   // keep block inputs only, recompute each block before its backward
    int64_t head_chunk_rows = 0;  // rows per head / loss chunk; 0: so that a chunk's logits are about 64M floats
    // Matrix products of the linears and the head in bf16 with f32
    // accumulation (kernels/train.h train_gemm_bf16; ignored where the CPU
    // lacks it: bf16_active() says). Parameters, gradients, attention and
    // the loss stay f32.
    bool bf16 = false;
  };
  TrainStep(TrainModel& model, const Options& o, ThreadPool& pool);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Embedding and every block over the batch (tokens checked against the
  // vocabulary, rows against max_rows). The batch's arrays must stay valid
  // until backward() returns.
  Status forward(const TrainBatch& batch);
  // The output head and the loss over every row; with `grad` (the model's
  // gradient buffer, TrainTensor::grad_offset) the head's gradients are
  // accumulated and the gradient of the last block's output kept for
  // backward(). teacher may be null (cross-entropy only).
  LossStats head_loss(KdTargets* teacher, const LossWeights& w, float grad_scale, float* grad);
  // The logits [n, n_vocab] of rows r0 .. r0 + n - 1 after forward() (final
  // soft-cap applied): what the inference forward gives (tests, eval).
  void logits(int64_t r0, int64_t n, float* out);
  // Called in backward() with block l's output h [rows, n_embd] and the
  // running gradient dh of it, before block l's backward: a hidden-state loss
  // adds its gradient to dh.
  using BlockGradHook = std::function<void(int layer, const float* h, float* dh)>;
  // Backward through the blocks and the embedding after head_loss(..., grad).
  void backward(float* grad, const BlockGradHook& hook = nullptr);

  // Block l's output [rows, n_embd] of the last forward() (l = -1: the embeddings).
  const float* block_output(int l) const;
  int64_t rows() const { return n_; }
  // Whether the products run in bf16 (Options::bf16 and the CPU has it).
  bool bf16_active() const;
  // Bytes of activation memory held.
  size_t activation_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int64_t n_ = 0;
};

}  // namespace ember
