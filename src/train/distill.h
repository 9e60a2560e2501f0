// Distiller: knowledge distillation of a student TrainModel from a teacher
// (train/teacher.h: the live inference forward, or a cache of sampled
// tokens with importance weights) over TokenWindows, the loop of `ember
// distill`:
//   loss = tau^2 KL(teacher_tau || student_tau)   (forward KL, every position)
//        + alpha_ce * CE(next token)
//        + hidden_weight * mean over mapped layers and rows of
//          ||P h_student - h_teacher||^2 / ||h_teacher||^2
// (the hidden-state term compares each student block's output with its
// mapped teacher block's, through a learned projection P [E_t, E_s] where
// the widths differ, identity otherwise; it needs the live teacher);
// AdamW (train/optimizer.h) over the trainable tensors, gradient
// accumulation over micro-batches; a held-out evaluation (KL to the
// teacher at tau = 1, top-1 agreement, perplexity of student and teacher);
// checkpoints every K steps and when asked to stop (train/checkpoint.h),
// resumable to the same bits.
//
// Ownership and threading: borrows everything it is given; one thread
// drives it (kernels use the pool). Stop: *stop set by another thread (a
// signal handler) ends the run after the current step, with a checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/step.h"
#include "train/teacher.h"
#include "train/train_model.h"

namespace ember {

struct DistillOptions {
  int64_t batch = 4;  // windows per micro-batch
  int64_t accum = 1;  // micro-batches per optimizer step
  int64_t steps = 1;  // optimizer steps of the run
  LossWeights loss;   // tau, w_kl (KL), w_ce (alpha_ce)
  float hidden_weight = 0.f;
  std::vector<int> hidden_map;  // teacher layer of each student layer (hidden_weight > 0)
  OptimizerOptions opt;         // total_steps is set to steps
  bool grad_checkpointing = false;
  bool bf16 = false;         // bf16 matrix products (TrainStep::Options::bf16)
  int64_t eval_every = 0;    // steps between evaluations (0: only at the end)
  int64_t eval_windows = 0;  // held-out windows per evaluation (0: all)
  int64_t checkpoint_every = 0;
  std::string checkpoint_path;  // empty: no checkpoints
  uint64_t seed = 0;
  uint64_t extra_digest = 0;  // other settings a resume must match (teacher source, --train)
};

struct DistillProgress {
  int64_t step = 0, steps = 0;  // steps done, of
  int64_t tokens = 0;           // training tokens seen
  double loss = 0, kl = 0, ce = 0, hidden = 0;  // means of the last step
  double lr = 0, grad_norm = 0;
  double tokens_per_s = 0, eta_s = 0;
};

// Wall seconds spent per phase of the training steps so far.
struct DistillTimes {
  double teacher = 0, forward = 0, head = 0, backward = 0, optimizer = 0;
  double total() const { return teacher + forward + head + backward + optimizer; }
};

struct DistillEval {
  int64_t step = 0, rows = 0;
  double kl = 0;         // mean KL(teacher || student) at tau = 1 (live teacher)
  double top1 = 0;       // argmax agreement
  double ppl = 0;        // student perplexity
  double ppl_teacher = 0;
};

class Distiller {
 public:
  // The student's trainable tensors must be set (set_trainable) before;
  // live may be null when cache is set (then no KL evaluation and no
  // hidden-state loss); with neither, the run trains on cross-entropy alone
  // (o.loss.w_ce > 0 needed: plain fine-tuning).
  Distiller(TrainModel& student, LiveTeacher* live, TeacherCache* cache, const TokenWindows& data,
            const DistillOptions& o, ThreadPool& pool);
  ~Distiller();

  // Loads the checkpoint at o.checkpoint_path (refusing one of another run).
  Status resume();
  int64_t step() const;

  // Trains to o.steps (or until *stop), with progress after every step and
  // evaluations as asked. Returns whether it stopped early (a checkpoint was
  // written then).
  Result<bool> run(const std::function<void(const DistillProgress&)>& progress,
                   const std::function<void(const DistillEval&)>& on_eval, const std::atomic<bool>* stop);
  // Held-out evaluation now.
  Result<DistillEval> evaluate();
  Status save_checkpoint();
  const TrainModel& student() const { return student_; }
  const DistillTimes& times() const;

  struct State;

 private:
  TrainModel& student_;
  std::unique_ptr<State> st_;
};

// The teacher layer of each of a student's n_student layers: `kept` (the
// source layers of a layer subset of the teacher) when it has n_student
// entries, else layer l maps to round((l + 1) * n_teacher / n_student) - 1.
std::vector<int> hidden_layer_map(int n_student, int n_teacher, const std::vector<int>& kept);

// Marks the student's trainable tensors for `mode`: "all", "layers" (every
// block tensor), "ffn" (the FFN matrices and norms), "lora:R" (adapters of
// rank R on every block linear, alpha = 2R; base frozen). Error: an unknown
// mode or a bad rank.
Status select_trainable(TrainModel& student, const std::string& mode, uint64_t seed);

}  // namespace ember
