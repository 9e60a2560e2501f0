// The distillation loop; see distill.h.
#include "train/distill.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/train.h"
#include "train/checkpoint.h"

namespace ember {

std::vector<int> hidden_layer_map(int n_student, int n_teacher, const std::vector<int>& kept) {
  if (static_cast<int>(kept.size()) == n_student) return kept;
  std::vector<int> m;
  for (int l = 0; l < n_student; ++l)
    m.push_back(std::clamp(static_cast<int>(std::lround(static_cast<double>(l + 1) * n_teacher / n_student)) - 1, 0,
                           n_teacher - 1));
  return m;
}

Status select_trainable(TrainModel& student, const std::string& mode, uint64_t seed) {
  if (mode == "all") {
    student.set_trainable([](const TrainTensor& t) { return t.kind == ParamKind::kTensor; });
  } else if (mode == "layers") {
    student.set_trainable([](const TrainTensor& t) { return t.kind == ParamKind::kTensor && t.layer >= 0; });
  } else if (mode == "ffn") {
    student.set_trainable([](const TrainTensor& t) {
      return t.kind == ParamKind::kTensor &&
             (t.role == TensorRole::kFfnGate || t.role == TensorRole::kFfnUp || t.role == TensorRole::kFfnDown ||
              t.role == TensorRole::kFfnNorm || t.role == TensorRole::kPostFfnNorm);
    });
  } else if (mode.rfind("lora:", 0) == 0) {
    char* end = nullptr;
    const long r = std::strtol(mode.c_str() + 5, &end, 10);
    if (*end != '\0' || r < 1 || r > 4096) return Status::errorf("--train lora:R needs a rank R in [1, 4096], not '{}'", mode.substr(5));
    EMBER_RETURN_IF_ERROR(student.add_lora(static_cast<int>(r), 2.0f * static_cast<float>(r), seed));
    student.set_trainable([](const TrainTensor& t) { return t.kind == ParamKind::kLoraA || t.kind == ParamKind::kLoraB; });
  } else {
    return Status::errorf("--train must be layers, ffn, all or lora:R, not '{}'", mode);
  }
  if (student.n_trainable() == 0) return Status::errorf("--train {}: the student has nothing to train", mode);
  return Status::ok();
}

struct Distiller::State {
  TrainModel& student;
  LiveTeacher* live;
  TeacherCache* cache;
  const TokenWindows& data;
  DistillOptions o;
  ThreadPool& pool;
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<AdamW> opt;
  std::vector<int32_t> tokens, targets;
  std::vector<int64_t> windows;
  CheckpointInfo ck;
  std::vector<int> mapped;  // student layers with a hidden-state loss
  double hidden_sum = 0;    // hidden loss of the current step (weighted)
  double ppl_teacher = 0;   // evaluation text, computed once
  bool have_ppl_teacher = false;
  DistillTimes times;

  State(TrainModel& s, LiveTeacher* l, TeacherCache* c, const TokenWindows& d, const DistillOptions& opts,
        ThreadPool& p)
      : student(s), live(l), cache(c), data(d), o(opts), pool(p) {}

  int64_t rows() const { return o.batch * data.seq_len(); }

  // Fills the batch with windows (training windows at run positions, or
  // evaluation windows) and runs the teacher over it.
  Status load_batch(const std::vector<int64_t>& ws, bool eval, TrainBatch* b) {
    const int64_t L = data.seq_len();
    for (size_t i = 0; i < ws.size(); ++i) {
      if (eval)
        data.eval_tokens(ws[i], tokens.data() + i * L, targets.data() + i * L);
      else
        data.train_tokens(ws[i], tokens.data() + i * L, targets.data() + i * L);
    }
    b->tokens = tokens.data();
    b->targets = targets.data();
    b->n_seq = static_cast<int64_t>(ws.size());
    b->seq_len = L;
    if (!eval && cache) cache->set_windows(ws);
    if (live && (eval || !cache || !mapped.empty())) EMBER_RETURN_IF_ERROR(live->run(*b));
    return Status::ok();
  }

  // Adds the hidden-state loss gradient of student layer l (rows of the
  // batch) to dh; accumulates its value into hidden_sum.
  void hidden_grad(int l, const float* h, float* dh) {
    if (std::find(mapped.begin(), mapped.end(), l) == mapped.end()) return;
    const int64_t n = step->rows(), Es = student.config().n_embd;
    const float* ht = live->hidden(o.hidden_map[static_cast<size_t>(l)]);
    const int64_t Et = live->model().config().n_embd;
    const TrainTensor* P = student.find_aux(fmt::format("distill.proj.{}", l));
    std::vector<float> y(static_cast<size_t>(n * Et)), loss(static_cast<size_t>(n));
    if (P)
      train_gemm(n, Et, Es, h, Es, false, student.param(P), Es, true, y.data(), Et, false, pool);
    else
      std::copy(h, h + n * Es, y.data());
    const double denom = static_cast<double>(n) * static_cast<double>(o.accum) * static_cast<double>(mapped.size());
    pool.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        double ss = 0, nt = 1e-6 * static_cast<double>(Et);
        for (int64_t i = 0; i < Et; ++i) {
          const double d = static_cast<double>(y[r * Et + i]) - ht[r * Et + i];
          ss += d * d;
          nt += static_cast<double>(ht[r * Et + i]) * ht[r * Et + i];
        }
        loss[r] = static_cast<float>(ss / nt);
        const float coef = static_cast<float>(o.hidden_weight * 2.0 / (nt * denom));
        for (int64_t i = 0; i < Et; ++i) y[r * Et + i] = coef * (y[r * Et + i] - ht[r * Et + i]);
      }
    });
    for (int64_t r = 0; r < n; ++r) hidden_sum += o.hidden_weight * loss[r] / (static_cast<double>(mapped.size()) * n);
    if (P) {
      train_gemm(n, Es, Et, y.data(), Et, false, student.param(P), Es, false, dh, Es, true, pool);
      if (P->trainable)
        train_gemm(Et, Es, n, y.data(), Et, true, h, Es, false, opt->grad() + P->grad_offset, Es, true, pool);
    } else {
      for (int64_t i = 0; i < n * Es; ++i) dh[i] += y[i];
    }
  }
};

Distiller::Distiller(TrainModel& student, LiveTeacher* live, TeacherCache* cache, const TokenWindows& data,
                     const DistillOptions& o, ThreadPool& pool)
    : student_(student), st_(std::make_unique<State>(student, live, cache, data, o, pool)) {
  State& s = *st_;
  EMBER_CHECK_MSG(live || cache || o.loss.w_ce > 0, "training needs a teacher or a cross-entropy weight");
  s.o.opt.total_steps = s.o.steps;
  if (s.o.hidden_weight > 0 && live) {
    const int64_t Es = student.config().n_embd, Et = live->model().config().n_embd;
    for (int l = 0; l < student.config().n_layer; ++l) {
      if (l >= static_cast<int>(s.o.hidden_map.size()) || s.o.hidden_map[l] < 0) continue;
      s.mapped.push_back(l);
      if (Es != Et && !student.find_aux(fmt::format("distill.proj.{}", l))) {
        std::vector<float> eye(static_cast<size_t>(Et * Es), 0.f);
        for (int64_t i = 0; i < std::min(Es, Et); ++i) eye[i * Es + i] = 1.f;
        student.add_aux(fmt::format("distill.proj.{}", l), Et, Es, eye);
      }
    }
    student.set_trainable([](const TrainTensor& t) { return t.trainable || t.kind == ParamKind::kAux; });
  }
  TrainStep::Options so;
  so.max_rows = s.rows();
  so.checkpointing = s.o.grad_checkpointing;
  so.bf16 = s.o.bf16;
  s.step = std::make_unique<TrainStep>(student, so, pool);
  s.opt = std::make_unique<AdamW>(student, s.o.opt);
  s.tokens.resize(static_cast<size_t>(s.rows()));
  s.targets.resize(static_cast<size_t>(s.rows()));
  // What a checkpoint must match.
  s.ck.seed = s.o.seed;
  s.ck.layout_digest = student.layout_digest();
  s.ck.frozen_digest = student.frozen_digest();
  s.ck.data_digest = data.digest();
  uint64_t h = s.o.extra_digest;
  auto mix = [&](const auto& v) { h = fnv1a64(&v, sizeof(v), h); };
  for (int64_t v : {s.o.batch, s.o.accum, s.o.steps, s.o.opt.warmup_steps}) mix(v);
  for (float v : {s.o.loss.tau, s.o.loss.w_kl, s.o.loss.w_ce, s.o.hidden_weight}) mix(v);
  for (double v : {s.o.opt.lr, s.o.opt.min_lr_ratio, s.o.opt.beta1, s.o.opt.beta2, s.o.opt.eps, s.o.opt.weight_decay,
                   s.o.opt.clip})
    mix(v);
  for (int v : s.o.hidden_map) mix(v);
  mix(s.o.seed);
  mix(s.step->bf16_active());
  s.ck.options_digest = h;
}

Distiller::~Distiller() = default;

int64_t Distiller::step() const { return st_->opt->steps_done(); }
const DistillTimes& Distiller::times() const { return st_->times; }

Status Distiller::save_checkpoint() {
  State& s = *st_;
  if (s.o.checkpoint_path.empty()) return Status::ok();
  CheckpointInfo info = s.ck;
  info.step = s.opt->steps_done();
  info.data_position = info.step * s.o.accum * s.o.batch;
  return ember::save_checkpoint(s.o.checkpoint_path, student_, *s.opt, info);
}

Status Distiller::resume() {
  State& s = *st_;
  auto info = load_checkpoint(s.o.checkpoint_path, student_, *s.opt, s.ck);
  if (!info) return info.status();
  if (info->data_position != info->step * s.o.accum * s.o.batch)
    return Status::errorf("checkpoint '{}' is damaged (data position {} at step {})", s.o.checkpoint_path,
                          info->data_position, info->step);
  return Status::ok();
}

Result<DistillEval> Distiller::evaluate() {
  State& s = *st_;
  DistillEval ev;
  ev.step = s.opt->steps_done();
  const int64_t nw = s.o.eval_windows > 0 ? std::min(s.o.eval_windows, s.data.n_eval()) : s.data.n_eval();
  if (nw == 0) return Status::error("no held-out windows to evaluate on");
  LossStats tot;
  double teacher_ce = 0;
  int64_t teacher_rows = 0;
  const int64_t V = student_.config().n_vocab;
  std::vector<float> zt;
  for (int64_t w0 = 0; w0 < nw; w0 += s.o.batch) {
    std::vector<int64_t> ws;
    for (int64_t w = w0; w < std::min(nw, w0 + s.o.batch); ++w) ws.push_back(w);
    TrainBatch b;
    EMBER_RETURN_IF_ERROR(s.load_batch(ws, true, &b));
    EMBER_RETURN_IF_ERROR(s.step->forward(b));
    LossWeights lw;
    lw.tau = 1.f;
    lw.w_kl = 1.f;
    lw.w_ce = 1.f;
    tot += s.step->head_loss(s.live, lw, 1.f, nullptr);
    if (s.live && !s.have_ppl_teacher) {  // the teacher's own perplexity, once
      const int64_t n = b.n_rows(), R = std::clamp<int64_t>((int64_t{16} << 20) / V, 1, n);
      zt.resize(static_cast<size_t>(R * V));
      for (int64_t r0 = 0; r0 < n; r0 += R) {
        const int64_t rn = std::min(R, n - r0);
        s.live->logits(r0, rn, zt.data());
        for (int64_t i = 0; i < rn; ++i) {
          if (b.targets[r0 + i] < 0) continue;
          teacher_ce += train_kd_row(zt.data() + i * V, V, {}, 1.f, 0.f, b.targets[r0 + i], 1.f, 1.f).ce;
          ++teacher_rows;
        }
      }
    }
  }
  if (s.live && !s.have_ppl_teacher && teacher_rows > 0) {
    s.ppl_teacher = std::exp(teacher_ce / static_cast<double>(teacher_rows));
    s.have_ppl_teacher = true;
  }
  ev.rows = tot.rows;
  if (s.live) {
    ev.kl = tot.kl / static_cast<double>(tot.rows);
    ev.top1 = static_cast<double>(tot.top1) / static_cast<double>(tot.rows);
  }
  ev.ppl = tot.ce_rows ? std::exp(tot.ce / static_cast<double>(tot.ce_rows)) : 0.0;
  ev.ppl_teacher = s.ppl_teacher;
  return ev;
}

Result<bool> Distiller::run(const std::function<void(const DistillProgress&)>& progress,
                            const std::function<void(const DistillEval&)>& on_eval, const std::atomic<bool>* stop) {
  State& s = *st_;
  using Clock = std::chrono::steady_clock;
  double train_seconds = 0;
  int64_t timed_steps = 0;
  const int64_t L = s.data.seq_len();
  TrainStep::BlockGradHook hook;
  if (!s.mapped.empty()) hook = [&](int l, const float* h, float* dh) { s.hidden_grad(l, h, dh); };
  while (s.opt->steps_done() < s.o.steps) {
    if (stop && stop->load()) {
      EMBER_RETURN_IF_ERROR(save_checkpoint());
      return true;
    }
    const auto t0 = Clock::now();
    const int64_t st = s.opt->steps_done();
    s.opt->zero_grad();
    LossStats stats;
    s.hidden_sum = 0;
    auto lap = [t = Clock::now()](double* acc) mutable {
      const auto now = Clock::now();
      *acc += std::chrono::duration<double>(now - t).count();
      t = now;
    };
    for (int64_t m = 0; m < s.o.accum; ++m) {
      std::vector<int64_t> ws;
      for (int64_t i = 0; i < s.o.batch; ++i) ws.push_back(s.data.train_window((st * s.o.accum + m) * s.o.batch + i));
      TrainBatch b;
      EMBER_RETURN_IF_ERROR(s.load_batch(ws, false, &b));
      lap(&s.times.teacher);
      EMBER_RETURN_IF_ERROR(s.step->forward(b));
      lap(&s.times.forward);
      KdTargets* teacher = s.cache ? static_cast<KdTargets*>(s.cache) : s.live;
      const float scale = 1.0f / static_cast<float>(b.n_rows() * s.o.accum);
      stats += s.step->head_loss(teacher, s.o.loss, scale, s.opt->grad());
      lap(&s.times.head);
      s.step->backward(s.opt->grad(), hook);
      lap(&s.times.backward);
    }
    const OptimizerStepInfo info = s.opt->step(s.pool);
    lap(&s.times.optimizer);
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++timed_steps;
    if (progress) {
      DistillProgress p;
      p.step = s.opt->steps_done();
      p.steps = s.o.steps;
      p.tokens = p.step * s.o.accum * s.o.batch * L;
      const double rows = static_cast<double>(std::max<int64_t>(1, stats.rows));
      p.loss = stats.loss / rows + s.hidden_sum;
      p.kl = stats.kl / rows;
      p.ce = stats.ce_rows ? stats.ce / static_cast<double>(stats.ce_rows) : 0.0;
      p.hidden = s.hidden_sum;
      p.lr = info.lr;
      p.grad_norm = info.grad_norm;
      p.tokens_per_s = static_cast<double>(timed_steps * s.o.accum * s.o.batch * L) / train_seconds;
      p.eta_s = train_seconds / static_cast<double>(timed_steps) * static_cast<double>(s.o.steps - p.step);
      progress(p);
    }
    const int64_t done = s.opt->steps_done();
    if (s.o.checkpoint_every > 0 && done % s.o.checkpoint_every == 0 && done < s.o.steps)
      EMBER_RETURN_IF_ERROR(save_checkpoint());
    if (on_eval && s.o.eval_every > 0 && done % s.o.eval_every == 0 && done < s.o.steps && s.data.n_eval() > 0) {
      auto ev = evaluate();
      if (!ev) return ev.status();
      on_eval(*ev);
    }
  }
  EMBER_RETURN_IF_ERROR(save_checkpoint());
  return false;
}

}  // namespace ember
