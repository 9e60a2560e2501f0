// TrainStep: activation memory, the embedding, the block loop (block.cpp),
// the output head with the loss in row chunks, and the backward driver; see
// step.h.
#include "train/step.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/ops.h"
#include "train/step_impl.h"

namespace ember {
namespace {

// Carves consecutive arrays out of one buffer (first pass: counts only).
class Carver {
 public:
  explicit Carver(std::vector<float>* mem) : mem_(mem) {}
  float* take(int64_t n) {
    const size_t at = used_;
    used_ += static_cast<size_t>(n + 15) / 16 * 16;
    return mem_->empty() ? nullptr : mem_->data() + at;
  }
  size_t used() const { return used_; }

 private:
  std::vector<float>* mem_;
  size_t used_ = 0;
};

}  // namespace

TrainStep::Impl::Impl(TrainModel& m, const Options& o, ThreadPool& p)
    : model(m), cfg(m.config()), pool(p), opt(o), max_rows(std::max<int64_t>(1, o.max_rows)) {
  if (o.bf16 && train_bf16_available()) gemm = train_gemm_bf16;
  const int64_t N = max_rows, E = cfg.n_embd, F = cfg.max_n_ff(), hd = cfg.head_dim, hdv = cfg.head_dim_v;
  const int64_t H = cfg.max_n_head(), Hkv = cfg.max_n_head_kv();
  const int64_t Qm = H * hd, Km = Hkv * hd, Vm = Hkv * hdv, Om = H * hdv, R = std::max(1, m.lora_rank());
  resid.assign(static_cast<size_t>((cfg.n_layer + 1) * N * E), 0.f);
  const int sets = opt.checkpointing ? 1 : cfg.n_layer;
  act_mem.resize(static_cast<size_t>(sets));
  acts.resize(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s) {
    for (int pass = 0; pass < 2; ++pass) {
      Carver cv(&act_mem[s]);
      BlockActs a;
      a.xn1 = cv.take(N * E);
      a.rstd1 = cv.take(N);
      if (cfg.qk_norm) {
        a.q_pre = cv.take(N * Qm);
        a.q_rstd = cv.take(N * H);
        a.k_pre = cv.take(N * Km);
        a.k_rstd = cv.take(N * Hkv);
      }
      a.q = cv.take(N * Qm);
      a.k = cv.take(N * Km);
      a.v = cv.take(N * Vm);
      a.attn = cv.take(N * Om);
      a.lse = cv.take(N * H);
      if (cfg.post_attn_norm) {
        a.o = cv.take(N * E);
        a.o_rstd = cv.take(N);
      }
      a.x2 = cv.take(N * E);
      a.xn2 = cv.take(N * E);
      a.rstd2 = cv.take(N);
      a.g = cv.take(N * F);
      a.u = cv.take(N * F);
      if (cfg.post_ffn_norm) {
        a.f = cv.take(N * E);
        a.f_rstd = cv.take(N);
      }
      if (m.lora_rank() > 0)
        for (float*& x : a.xa) x = cv.take(N * R);
      if (pass == 0)
        act_mem[s].assign(cv.used(), 0.f);
      else
        acts[s] = a;
    }
  }
  for (auto* v : {&s_e0, &s_e1, &s_e2}) v->assign(static_cast<size_t>(N * E), 0.f);
  for (auto* v : {&s_f0, &s_f1}) v->assign(static_cast<size_t>(N * F), 0.f);
  s_q0.assign(static_cast<size_t>(N * std::max(Qm, Om)), 0.f);
  for (auto* v : {&s_q1, &s_q2}) v->assign(static_cast<size_t>(N * Qm), 0.f);
  for (auto* v : {&s_k0, &s_k1}) v->assign(static_cast<size_t>(N * Km), 0.f);
  s_v0.assign(static_cast<size_t>(N * Vm), 0.f);
  for (auto* v : {&s_r0, &s_r1}) v->assign(static_cast<size_t>(N * R), 0.f);
  hn.assign(static_cast<size_t>(N * E), 0.f);
  h_rstd.assign(static_cast<size_t>(N), 0.f);
  dres.assign(static_cast<size_t>(N * E), 0.f);
  // Layers with the same frequencies share a RoPE table.
  for (int l = 0; l < cfg.n_layer; ++l) {
    int t = 0;
    while (t < l && m.inv_freq(t) != m.inv_freq(l)) ++t;
    rope_of_layer.push_back(t < l ? rope_of_layer[t] : static_cast<int>(cos_t.size()));
    if (t == l) {
      cos_t.emplace_back();
      sin_t.emplace_back();
    }
  }
}

double train_step_flops(const TrainModel& m, int64_t n_seq, int64_t seq_len) {
  const ModelConfig& c = m.config();
  const double N = static_cast<double>(n_seq * seq_len);
  double f = 0;
  for (const TrainTensor& t : m.tensors()) {
    const bool matmul = t.kind == ParamKind::kLoraA || t.kind == ParamKind::kLoraB ||
                        (t.kind == ParamKind::kTensor && t.n_dims == 2 && t.role != TensorRole::kTokenEmbd);
    const double mn = static_cast<double>(t.rows) * static_cast<double>(t.cols);
    if (matmul) f += 2 * mn * N * (t.trainable ? 3 : 2);  // forward, dX, dW
    if (t.role == TensorRole::kTokenEmbd && t.kind == ParamKind::kTensor && m.tied_output())
      f += 2 * mn * N * (t.trainable ? 3 : 2);  // the tied output head
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerConfig& lc = c.layers[l];
    double pairs = 0;
    for (int64_t t = 0; t < seq_len; ++t) pairs += lc.sliding_window > 0 ? std::min<int64_t>(t + 1, lc.sliding_window) : t + 1;
    pairs *= static_cast<double>(n_seq) * lc.n_head;
    f += pairs * 2.0 * (c.head_dim + c.head_dim_v) * 3;  // forward, backward = 2 x forward
  }
  return f;
}

TrainStep::TrainStep(TrainModel& model, const Options& o, ThreadPool& pool)
    : impl_(std::make_unique<Impl>(model, o, pool)) {}
TrainStep::~TrainStep() = default;

size_t TrainStep::activation_bytes() const {
  const Impl& im = *impl_;
  size_t n = im.resid.size() + im.hn.size() + im.dres.size() + im.chunk.size() + im.chunk_teacher.size() +
             im.chunk_capped.size();
  for (const auto& a : im.act_mem) n += a.size();
  for (const auto* v : {&im.s_e0, &im.s_e1, &im.s_e2, &im.s_f0, &im.s_f1, &im.s_q0, &im.s_q1, &im.s_q2, &im.s_k0,
                        &im.s_k1, &im.s_v0, &im.s_r0, &im.s_r1})
    n += v->size();
  return n * sizeof(float);
}

bool TrainStep::bf16_active() const { return impl_->gemm == &train_gemm_bf16; }

const float* TrainStep::block_output(int l) const { return impl_->resid_of(l); }

Status TrainStep::forward(const TrainBatch& b) {
  Impl& im = *impl_;
  const ModelConfig& c = im.cfg;
  n_ = 0;
  im.have_dres = false;
  if (!b.tokens || b.n_seq <= 0 || b.seq_len <= 0) return Status::error("training batch: no tokens");
  if (b.n_rows() > im.max_rows)
    return Status::errorf("training batch: {} rows exceed the capacity {}", b.n_rows(), im.max_rows);
  for (int64_t r = 0; r < b.n_rows(); ++r)
    if (b.tokens[r] < 0 || b.tokens[r] >= c.n_vocab)
      return Status::errorf("training batch: token id {} out of range [0, {})", b.tokens[r], c.n_vocab);
  im.batch = b;
  im.n = b.n_rows();
  n_ = im.n;
  if (b.seq_len != im.rope_len) {
    const int half = c.n_rot / 2;
    for (int l = 0; l < c.n_layer; ++l) {
      const int t = im.rope_of_layer[l];
      if (l > 0 && std::find(im.rope_of_layer.begin(), im.rope_of_layer.begin() + l, t) != im.rope_of_layer.begin() + l)
        continue;
      im.cos_t[t].assign(static_cast<size_t>(b.seq_len * half), 0.f);
      im.sin_t[t].assign(im.cos_t[t].size(), 0.f);
      for (int64_t p = 0; p < b.seq_len; ++p)
        rope_angles(static_cast<float>(p), im.model.inv_freq(l).data(), c.n_rot, im.cos_t[t].data() + p * half,
                    im.sin_t[t].data() + p * half);
    }
    im.rope_len = b.seq_len;
  }
  // Embedding (times embd_scale, as the inference embed does).
  const TrainTensor* te = im.model.find(TensorRole::kTokenEmbd, -1);
  const float* table = im.model.param(te);
  const int64_t E = c.n_embd;
  float* x0 = im.resid_of(-1);
  im.pool.parallel_for(im.n, 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = table + static_cast<int64_t>(b.tokens[r]) * E;
      for (int64_t i = 0; i < E; ++i) x0[r * E + i] = c.embd_scale == 1.f ? src[i] : src[i] * c.embd_scale;
    }
  });
  for (int l = 0; l < c.n_layer; ++l) train_block_forward(im, l, im.resid_of(l - 1), im.resid_of(l), im.acts_of(l));
  return Status::ok();
}

void TrainStep::logits(int64_t r0, int64_t n, float* out) {
  Impl& im = *impl_;
  const ModelConfig& c = im.cfg;
  EMBER_CHECK(r0 >= 0 && n >= 0 && r0 + n <= im.n);
  const int64_t E = c.n_embd, V = c.n_vocab;
  const TrainTensor* on = im.model.find(TensorRole::kOutputNorm, -1);
  std::vector<float> xn(static_cast<size_t>(n * E)), rs(static_cast<size_t>(n));
  train_rms_norm_forward(im.resid_of(c.n_layer - 1) + r0 * E, n, E, im.model.param(on), on->norm_offset, c.norm_eps,
                         xn.data(), rs.data(), im.pool);
  const TrainTensor* w = im.model.tied_output() ? im.model.find(TensorRole::kTokenEmbd, -1)
                                                : im.model.find(TensorRole::kOutput, -1);
  im.gemm(n, V, E, xn.data(), E, false, im.model.param(w), E, true, out, V, false, im.pool);
  if (c.final_logit_softcap > 0.f) train_softcap_forward(out, n * V, c.final_logit_softcap, im.pool);
}

LossStats TrainStep::head_loss(KdTargets* teacher, const LossWeights& lw, float grad_scale, float* grad) {
  Impl& im = *impl_;
  const ModelConfig& c = im.cfg;
  EMBER_CHECK_MSG(im.n > 0, "TrainStep::head_loss before a successful forward()");
  const int64_t N = im.n, E = c.n_embd, V = c.n_vocab;
  TrainModel& m = im.model;
  const TrainTensor* on = m.find(TensorRole::kOutputNorm, -1);
  const float* last = im.resid_of(c.n_layer - 1);
  train_rms_norm_forward(last, N, E, m.param(on), on->norm_offset, c.norm_eps, im.hn.data(), im.h_rstd.data(), im.pool);
  const TrainTensor* wt = m.tied_output() ? m.find(TensorRole::kTokenEmbd, -1) : m.find(TensorRole::kOutput, -1);
  const float* W = m.param(wt);
  float* gW = grad && wt->trainable ? grad + wt->grad_offset : nullptr;
  int64_t R = im.opt.head_chunk_rows;
  if (R <= 0) R = std::clamp<int64_t>((int64_t{64} << 20) / V, 16, 512);
  R = std::min(R, N);
  const bool dense = teacher && teacher->dense(), capped = c.final_logit_softcap > 0.f;
  im.chunk.resize(static_cast<size_t>(R * V));
  if (dense) im.chunk_teacher.resize(static_cast<size_t>(R * V));
  if (capped && grad) im.chunk_capped.resize(static_cast<size_t>(R * V));
  float* dhn = im.s_e1.data();
  std::vector<KdRowResult> res(static_cast<size_t>(R));
  LossStats st;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rn = std::min(R, N - r0);
    float* z = im.chunk.data();
    im.gemm(rn, V, E, im.hn.data() + r0 * E, E, false, W, E, true, z, V, false, im.pool);
    if (capped) {
      train_softcap_forward(z, rn * V, c.final_logit_softcap, im.pool);
      if (grad) std::copy(z, z + rn * V, im.chunk_capped.data());
    }
    if (dense) teacher->logits(r0, rn, im.chunk_teacher.data());
    im.pool.parallel_for(rn, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        KdRowTeacher t;
        if (dense)
          t.logits = im.chunk_teacher.data() + i * V;
        else if (teacher)
          t = teacher->row(r0 + i);
        const int32_t target = im.batch.targets ? im.batch.targets[r0 + i] : -1;
        res[static_cast<size_t>(i)] = train_kd_row(z + i * V, V, t, lw.tau, lw.w_kl, target, lw.w_ce, grad_scale);
      }
    });
    for (int64_t i = 0; i < rn; ++i) {
      const KdRowResult& r = res[static_cast<size_t>(i)];
      const bool has_ce = im.batch.targets && im.batch.targets[r0 + i] >= 0;
      if (!teacher && !has_ce) continue;
      st.rows += 1;
      st.ce_rows += has_ce;
      st.loss += r.loss;
      st.kl += r.kl;
      st.ce += r.ce;
      st.top1 += r.teacher_top1;
    }
    if (!grad) continue;
    if (capped) train_softcap_backward(im.chunk_capped.data(), z, rn * V, c.final_logit_softcap, im.pool);
    im.gemm(rn, E, V, z, V, false, W, E, false, dhn + r0 * E, E, false, im.pool);
    if (gW) im.gemm(V, E, rn, z, V, true, im.hn.data() + r0 * E, E, false, gW, E, true, im.pool);
  }
  if (grad) {
    float* gn = on->trainable ? grad + on->grad_offset : nullptr;
    train_rms_norm_backward(last, im.h_rstd.data(), N, E, m.param(on), on->norm_offset, dhn, im.dres.data(), false, gn,
                            im.pool);
    im.have_dres = true;
  }
  return st;
}

void TrainStep::backward(float* grad, const BlockGradHook& hook) {
  Impl& im = *impl_;
  const ModelConfig& c = im.cfg;
  EMBER_CHECK_MSG(im.have_dres, "TrainStep::backward needs head_loss(..., grad) first");
  float* dres = im.dres.data();
  for (int l = c.n_layer - 1; l >= 0; --l) {
    if (hook) hook(l, im.resid_of(l), dres);
    const float* x_in = im.resid_of(l - 1);
    if (im.opt.checkpointing) train_block_forward(im, l, x_in, im.s_e2.data(), im.acts_of(l));
    train_block_backward(im, l, x_in, im.acts_of(l), dres, grad);
  }
  const TrainTensor* te = im.model.find(TensorRole::kTokenEmbd, -1);
  if (te->trainable)
    train_embedding_backward(im.batch.tokens, dres, im.n, c.n_embd, c.embd_scale, grad + te->grad_offset, im.pool);
  im.have_dres = false;
}

}  // namespace ember
