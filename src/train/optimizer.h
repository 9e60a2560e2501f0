// Optimizer: AdamW (decoupled weight decay on 2-D tensors: matrices and
// adapters; norms and biases are not decayed), a learning rate with linear
// warm-up and cosine decay, global-norm gradient clipping and the gradient
// buffer that micro-batches accumulate into (train/step.h writes it at each
// trainable tensor's grad_offset). The arithmetic is PyTorch's
// (torch.optim.AdamW with torch.nn.utils.clip_grad_norm_ and a LambdaLR of
// lr_factor below); tests/train/train_pytorch_test.cpp checks it against
// tools/gen_train_reference.py.
//
// Ownership and threading: borrows the model; owns gradients and moments
// (3 floats per trainable value); one thread drives it, kernels use the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "train/train_model.h"

namespace ember {

struct OptimizerOptions {
  double lr = 1e-4;
  double min_lr_ratio = 0.1;  // the cosine ends at lr * min_lr_ratio
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;    // steps of the whole run (the cosine's length)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // on 2-D tensors
  double clip = 1.0;          // global gradient-norm limit; 0: none
};

// Multiplier of lr at 0-based step s: (s + 1) / warmup during the warm-up,
// then min_lr_ratio + (1 - min_lr_ratio) (1 + cos(pi p)) / 2 with p = (s -
// warmup) / max(1, total - warmup) (clamped to 1).
double lr_factor(const OptimizerOptions& o, int64_t step);

struct OptimizerStepInfo {
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

class AdamW {
 public:
  AdamW(TrainModel& model, const OptimizerOptions& o);
  const OptimizerOptions& options() const { return opt_; }
  // The gradient buffer (n_trainable floats) the passes accumulate into.
  float* grad() { return grad_.data(); }
  void zero_grad();
  // Clips, updates every trainable tensor, counts the step (gradients are
  // left as they were, unscaled).
  OptimizerStepInfo step(ThreadPool& pool);
  int64_t steps_done() const { return step_; }

  // State for checkpoints: moments and the step count.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  void set_steps_done(int64_t s) { step_ = s; }

 private:
  TrainModel& model_;
  OptimizerOptions opt_;
  std::vector<float> grad_, m_, v_;
  int64_t step_ = 0;
};

}  // namespace ember
