// AdamW with warm-up / cosine learning rate and clipping; see optimizer.h.
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/train.h"

namespace ember {

double lr_factor(const OptimizerOptions& o, int64_t step) {
  if (step < o.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double p = std::min(1.0, static_cast<double>(step - o.warmup_steps) /
                                     static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps)));
  return o.min_lr_ratio + (1.0 - o.min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * p));
}

AdamW::AdamW(TrainModel& model, const OptimizerOptions& o) : model_(model), opt_(o) {
  const size_t n = static_cast<size_t>(model.n_trainable());
  grad_.assign(n, 0.f);
  m_.assign(n, 0.f);
  v_.assign(n, 0.f);
}

void AdamW::zero_grad() { std::fill(grad_.begin(), grad_.end(), 0.f); }

OptimizerStepInfo AdamW::step(ThreadPool& pool) {
  OptimizerStepInfo info;
  info.grad_norm = std::sqrt(train_sum_squares(grad_.data(), static_cast<int64_t>(grad_.size()), pool));
  info.lr = opt_.lr * lr_factor(opt_, step_);
  ++step_;
  AdamWParams a;
  a.lr = info.lr;
  a.beta1 = opt_.beta1;
  a.beta2 = opt_.beta2;
  a.eps = opt_.eps;
  a.step = step_;
  // torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)).
  a.grad_scale = opt_.clip > 0 ? static_cast<float>(std::min(1.0, opt_.clip / (info.grad_norm + 1e-6))) : 1.f;
  for (const TrainTensor& t : model_.tensors()) {
    if (!t.trainable) continue;
    a.weight_decay = t.n_dims >= 2 ? opt_.weight_decay : 0.0;
    train_adamw(model_.params() + t.offset, grad_.data() + t.grad_offset, m_.data() + t.grad_offset,
                v_.data() + t.grad_offset, t.size(), a, pool);
  }
  return info;
}

}  // namespace ember
