// Model loading and the transformer forward pass; see model.h.
//
// One block implementation for every architecture; ModelConfig flags select
// the optional pieces (biases, QK-norm, post-norms, activation, windows).
#include "model/model.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "kernels/registry.h"

namespace ember {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto file = open_model_file(path);
  if (!file) return file.status();
  auto m = from_file(std::move(file.value()));
  if (!m) return m.status().with_context(path);
  return m;
}

Result<std::unique_ptr<Model>> Model::from_file(std::unique_ptr<ModelFile> file) {
  auto cfg = config_from_metadata(file->metadata);
  if (!cfg) return cfg.status();
  auto m = std::unique_ptr<Model>(new Model());
  m->cfg_ = std::move(cfg.value());
  auto w = bind_weights(*file, &m->cfg_);
  if (!w) return w.status();
  m->weights_ = std::move(w.value());
  m->file_ = std::move(file);

  const ModelConfig& c = m->cfg_;
  const int half = c.n_rot / 2;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerConfig& l = c.layers[il];
    std::vector<float> f(half);
    for (int i = 0; i < half; ++i) {
      double inv = std::pow(static_cast<double>(l.rope_base), -2.0 * i / c.n_rot) * l.rope_freq_scale;
      if (l.use_rope_freq_factors && m->weights_->rope_freqs) inv /= m->weights_->rope_freqs[i];
      f[i] = static_cast<float>(inv);
    }
    m->inv_freq_.push_back(std::move(f));
  }
  return m;
}

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& [name, t] : file_->tensors) n += t.nelements();
  return n;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : file_->tensors) n += t.nbytes;
  return n;
}

ForwardContext::ForwardContext(const Model& model, ThreadPool& pool, int max_batch)
    : model_(model), cfg_(model.config()), pool_(pool), max_batch_(std::max(1, max_batch)) {
  const size_t B = static_cast<size_t>(max_batch_);
  x_.resize(B * cfg_.n_embd);
  xn_.resize(B * cfg_.n_embd);
  tmp_.resize(B * cfg_.n_embd);
  q_.resize(B * cfg_.n_q_dim());
  k_.resize(B * cfg_.n_kv_dim());
  v_.resize(B * cfg_.n_v_dim());
  attn_.resize(B * cfg_.n_head * cfg_.head_dim_v);
  gate_.resize(B * cfg_.n_ff);
  up_.resize(B * cfg_.n_ff);
  pos_.resize(B);
  seg_.resize(B);
  rope_cos_.resize(B * (cfg_.n_rot / 2));
  rope_sin_.resize(B * (cfg_.n_rot / 2));
}

Status ForwardContext::forward(const int32_t* tokens, int64_t n, int64_t pos0, KvCache& cache, float* logits,
                               float* all_logits) {
  if (n <= 0) return Status::error("forward: empty batch");
  if (pos0 < 0 || pos0 + n > cache.capacity())
    return Status::errorf("forward: positions [{}, {}) exceed the KV cache capacity {}", pos0, pos0 + n,
                          cache.capacity());
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.n_vocab)
      return Status::errorf("forward: token id {} out of range [0, {})", tokens[i], cfg_.n_vocab);
  for (int64_t b = 0; b < n; b += max_batch_) {
    const int64_t nb = std::min<int64_t>(max_batch_, n - b);
    const bool last = b + nb == n;
    forward_batch(tokens + b, nb, pos0 + b, cache, last ? logits : nullptr,
                  all_logits ? all_logits + b * static_cast<int64_t>(cfg_.n_vocab) : nullptr);
  }
  return Status::ok();
}

void ForwardContext::rows_rms_norm(const float* in, float* out, int64_t n, const float* w) {
  const int64_t E = cfg_.n_embd;
  const float eps = cfg_.norm_eps;
  pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) rms_norm_row(in + t * E, w, out + t * E, E, eps);
  });
}

Status ForwardContext::forward_ragged(const SeqBatch* seqs, int n_seqs, float* logits) {
  if (n_seqs <= 0) return Status::error("forward_ragged: empty batch");
  int64_t total = 0;
  for (int i = 0; i < n_seqs; ++i) {
    const SeqBatch& sb = seqs[i];
    if (!sb.cache || !sb.tokens || sb.n <= 0) return Status::errorf("forward_ragged: sequence {} is empty", i);
    if (sb.pos0 < 0 || sb.pos0 + sb.n > sb.cache->capacity())
      return Status::errorf("forward_ragged: sequence {}: positions [{}, {}) exceed its KV capacity {}", i, sb.pos0,
                            sb.pos0 + sb.n, sb.cache->capacity());
    for (int64_t t = 0; t < sb.n; ++t)
      if (sb.tokens[t] < 0 || sb.tokens[t] >= cfg_.n_vocab)
        return Status::errorf("forward_ragged: token id {} out of range [0, {})", sb.tokens[t], cfg_.n_vocab);
    total += sb.n;
  }
  if (total > max_batch_)
    return Status::errorf("forward_ragged: {} tokens exceed the batch capacity {}", total, max_batch_);

  segs_.clear();
  logit_rows_.clear();
  tok_.resize(max_batch_);
  int64_t t = 0;
  for (int i = 0; i < n_seqs; ++i) {
    const SeqBatch& sb = seqs[i];
    segs_.push_back(sb.cache);
    for (int64_t j = 0; j < sb.n; ++j, ++t) {
      tok_[t] = sb.tokens[j];
      pos_[t] = static_cast<int32_t>(sb.pos0 + j);
      seg_[t] = i;
    }
    if (sb.all_logits)
      for (int64_t j = t - sb.n; j < t; ++j) logit_rows_.push_back(j);
    else if (sb.want_logits)
      logit_rows_.push_back(t - 1);
  }
  run_tokens(tok_.data(), total);

  if (!logits || logit_rows_.empty()) return Status::ok();
  const ModelWeights& w = model_.weights();
  const int64_t E = cfg_.n_embd, V = cfg_.n_vocab;
  const int64_t rows = static_cast<int64_t>(logit_rows_.size());
  pool_.parallel_for(rows, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r)
      rms_norm_row(x_.data() + logit_rows_[r] * E, w.output_norm, xn_.data() + r * E, E, cfg_.norm_eps);
  });
  matmul(*w.output.weight, xn_.data(), E, logits, V, rows, pool_, mm_scratch_);
  if (cfg_.final_logit_softcap > 0.f) {
    const float c = cfg_.final_logit_softcap;
    for (int64_t i = 0; i < rows * V; ++i) logits[i] = c * std::tanh(logits[i] / c);
  }
  return Status::ok();
}

void ForwardContext::forward_batch(const int32_t* tokens, int64_t n, int64_t pos0, KvCache& cache, float* logits,
                                   float* all_logits) {
  const ModelWeights& w = model_.weights();
  const int64_t E = cfg_.n_embd;
  segs_.assign(1, &cache);
  for (int64_t t = 0; t < n; ++t) {
    pos_[t] = static_cast<int32_t>(pos0 + t);
    seg_[t] = 0;
  }
  run_tokens(tokens, n);

  // Output head: all tokens, or only the last one.
  const int64_t V = cfg_.n_vocab;
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  if (!all_logits && !logits) return;
  rows_rms_norm(x_.data() + first * E, xn_.data(), rows, w.output_norm);
  float* out = all_logits ? all_logits : logits;
  matmul(*w.output.weight, xn_.data(), E, out, V, rows, pool_, mm_scratch_);
  if (cfg_.final_logit_softcap > 0.f) {
    const float c = cfg_.final_logit_softcap;
    for (int64_t i = 0; i < rows * V; ++i) out[i] = c * std::tanh(out[i] / c);
  }
  if (all_logits && logits) std::copy(out + (n - 1) * V, out + n * V, logits);
}

void ForwardContext::run_tokens(const int32_t* tokens, int64_t n) {
  const ModelWeights& w = model_.weights();
  const int64_t E = cfg_.n_embd;

  // Embeddings.
  pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      dequantize_row(*w.tok_embd, tokens[t], x_.data() + t * E);
      if (cfg_.embd_scale != 1.f) scale_row(x_.data() + t * E, cfg_.embd_scale, E);
    }
  });

  for (int il = 0; il < cfg_.n_layer; ++il) {
    const LayerWeights& l = w.layers[il];
    rows_rms_norm(x_.data(), xn_.data(), n, l.attn_norm);
    attention_block(il, n);
    if (l.post_attn_norm) rows_rms_norm(tmp_.data(), tmp_.data(), n, l.post_attn_norm);
    add_row(x_.data(), tmp_.data(), n * E);

    rows_rms_norm(x_.data(), xn_.data(), n, l.ffn_norm);
    ffn_block(il, n);
    if (l.post_ffn_norm) rows_rms_norm(tmp_.data(), tmp_.data(), n, l.post_ffn_norm);
    add_row(x_.data(), tmp_.data(), n * E);
  }
}

void ForwardContext::attention_block(int il, int64_t n) {
  const LayerWeights& l = model_.weights().layers[il];
  const LayerConfig& lc = cfg_.layers[il];
  const int64_t E = cfg_.n_embd, Q = cfg_.n_q_dim(), K = cfg_.n_kv_dim(), Vd = cfg_.n_v_dim();
  const int hd = cfg_.head_dim, half = cfg_.n_rot / 2;

  matmul(*l.q.weight, xn_.data(), E, q_.data(), Q, n, pool_, mm_scratch_);
  matmul(*l.k.weight, xn_.data(), E, k_.data(), K, n, pool_, mm_scratch_);
  matmul(*l.v.weight, xn_.data(), E, v_.data(), Vd, n, pool_, mm_scratch_);

  const float* inv_freq = model_.inv_freq(il);
  pool_.parallel_for(n, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* q = q_.data() + t * Q;
      float* k = k_.data() + t * K;
      float* v = v_.data() + t * Vd;
      if (l.q.bias) add_row(q, l.q.bias, Q);
      if (l.k.bias) add_row(k, l.k.bias, K);
      if (l.v.bias) add_row(v, l.v.bias, Vd);
      float* cs = rope_cos_.data() + t * half;
      float* sn = rope_sin_.data() + t * half;
      rope_angles(static_cast<float>(pos_[t]), inv_freq, cfg_.n_rot, cs, sn);
      for (int h = 0; h < cfg_.n_head; ++h) {
        float* qh = q + static_cast<int64_t>(h) * hd;
        if (l.q_norm) rms_norm_row(qh, l.q_norm, qh, hd, cfg_.norm_eps);
        rope_head(qh, cfg_.n_rot, cfg_.rope_style, cs, sn);
      }
      for (int h = 0; h < cfg_.n_head_kv; ++h) {
        float* kh = k + static_cast<int64_t>(h) * hd;
        if (l.k_norm) rms_norm_row(kh, l.k_norm, kh, hd, cfg_.norm_eps);
        rope_head(kh, cfg_.n_rot, cfg_.rope_style, cs, sn);
      }
      KvCache& cache = *segs_[seg_[t]];
      std::copy(k, k + K, cache.k_row(il, pos_[t]));
      std::copy(v, v + Vd, cache.v_row(il, pos_[t]));
    }
  });

  AttentionShape s;
  s.n_head = cfg_.n_head;
  s.n_head_kv = cfg_.n_head_kv;
  s.head_dim = hd;
  s.head_dim_v = cfg_.head_dim_v;
  s.scale = cfg_.attn_scale > 0.f ? cfg_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  s.softcap = cfg_.attn_logit_softcap;
  s.sliding_window = lc.sliding_window;
  int32_t max_pos = 0;
  for (int64_t t = 0; t < n; ++t) max_pos = std::max(max_pos, pos_[t]);
  const int64_t need = attention_scratch_floats(s, n, pool_.size(), max_pos);
  if (static_cast<int64_t>(attn_scratch_.size()) < need) attn_scratch_.resize(need);
  seg_views_.clear();
  for (KvCache* c : segs_) seg_views_.push_back(c->view(il));
  attention_ragged(s, q_.data(), pos_.data(), n, seg_views_.data(), seg_.data(), attn_.data(), attn_scratch_.data(),
                   pool_);

  const int64_t O = static_cast<int64_t>(cfg_.n_head) * cfg_.head_dim_v;
  matmul(*l.o.weight, attn_.data(), O, tmp_.data(), E, n, pool_, mm_scratch_);
  if (l.o.bias)
    for (int64_t t = 0; t < n; ++t) add_row(tmp_.data() + t * E, l.o.bias, E);
}

void ForwardContext::ffn_block(int il, int64_t n) {
  const LayerWeights& l = model_.weights().layers[il];
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff;
  matmul(*l.gate.weight, xn_.data(), E, gate_.data(), F, n, pool_, mm_scratch_);
  matmul(*l.up.weight, xn_.data(), E, up_.data(), F, n, pool_, mm_scratch_);
  const bool gelu = cfg_.activation == Activation::kGeluTanh;
  pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      if (gelu) geglu_tanh_row(gate_.data() + t * F, up_.data() + t * F, F);
      else swiglu_row(gate_.data() + t * F, up_.data() + t * F, F);
    }
  });
  matmul(*l.down.weight, gate_.data(), F, tmp_.data(), E, n, pool_, mm_scratch_);
}

}  // namespace ember
