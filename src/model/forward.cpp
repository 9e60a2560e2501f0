// The forward pass driver: batch layout, embedding, the layer loop and the
// output head, every op through the Backend; see forward.h. The block
// itself is model/layers/block.cpp.
#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/layers/block.h"
#include "model/layers/linear_ops.h"
#include "model/layers/norm.h"
#include "model/model.h"

namespace ember {

ForwardContext::ForwardContext(const Model& model, ThreadPool& pool, int max_batch)
    : ForwardContext(model, make_cpu_backend(pool), max_batch) {}

ForwardContext::ForwardContext(const Model& model, std::unique_ptr<Backend> backend, int max_batch)
    : model_(model), cfg_(model.config()), backend_(std::move(backend)), max_batch_(std::max(1, max_batch)) {
  EMBER_CHECK(backend_ != nullptr);
  const size_t B = static_cast<size_t>(max_batch_);
  const size_t hd = static_cast<size_t>(cfg_.head_dim), hdv = static_cast<size_t>(cfg_.head_dim_v);
  const size_t H = static_cast<size_t>(cfg_.max_n_head()), Hkv = static_cast<size_t>(cfg_.max_n_head_kv());
  tok_.resize(B);
  pos_.resize(B);
  seg_.resize(B);
  segs_.reserve(B);
  seg_views_.resize(B);
  seg_stores_.resize(B);
  logit_rows_.reserve(B);
  x_buf_ = floats(B * cfg_.n_embd);
  xn_buf_ = floats(B * cfg_.n_embd);
  y_buf_ = floats(B * cfg_.n_embd);
  x_ = x_buf_->as<float>();
  xn_ = xn_buf_->as<float>();
  y_ = y_buf_->as<float>();
  q_ = floats(B * H * hd);
  k_ = floats(B * Hkv * hd);
  v_ = floats(B * Hkv * hdv);
  attn_ = floats(B * H * hdv);
  gate_ = floats(B * cfg_.max_n_ff());
  up_ = floats(B * cfg_.max_n_ff());
  if (cfg_.has_moe()) {
    const size_t k = static_cast<size_t>(cfg_.max_n_expert_used());
    moe_logits_ = floats(B * cfg_.max_n_expert());
    moe_ids_.resize(B * k);
    moe_weights_ = floats(B * k);
    moe_x_row_.resize(B * k);
    moe_gate_ = floats(B * static_cast<size_t>(cfg_.max_moe_ff_per_token()));
    moe_up_ = floats(B * static_cast<size_t>(cfg_.max_moe_ff_per_token()));
    moe_down_ = floats(B * k * cfg_.n_embd);
    moe_shared_gate_ = floats(B * cfg_.max_n_ff_shexp());
    moe_shared_up_ = floats(B * cfg_.max_n_ff_shexp());
    moe_shared_logit_ = floats(B);
    moe_shared_weight_ = floats(B);
    moe_shared_id_.resize(B);
  }
  const size_t rope_floats = model.n_rope_tables() * B * (cfg_.n_rot / 2);
  bool rope_scaled = false;
  for (const auto& l : cfg_.layers) rope_scaled = rope_scaled || l.rope_attn_factor != 1.f;
  if (!backend_->host_memory() && !rope_scaled && rope_floats > 0) {
    rope_cos_buf_ = floats(rope_floats);
    rope_sin_buf_ = floats(rope_floats);
    rope_cos_p_ = rope_cos_buf_->as<float>();
    rope_sin_p_ = rope_sin_buf_->as<float>();
  } else {
    rope_cos_.resize(rope_floats);
    rope_sin_.resize(rope_floats);
    rope_cos_p_ = rope_cos_.data();
    rope_sin_p_ = rope_sin_.data();
  }
  rope_ready_.assign(model.n_rope_tables(), 0);
  if (cfg_.attn_temp_scale > 0.f) {
    temp_scale_.resize(B * hd / 2);
    temp_zeros_.assign(B * hd / 2, 0.f);
  }
}

ForwardContext::~ForwardContext() = default;

std::unique_ptr<BackendBuffer> ForwardContext::floats(size_t n) {
  if (n == 0) return nullptr;
  auto b = backend_->alloc(n * sizeof(float));
  EMBER_CHECK_MSG(b, "out of backend memory for the forward pass's buffers");
  return b;
}

namespace {
float* f32(const std::unique_ptr<BackendBuffer>& b) { return b ? b->as<float>() : nullptr; }
}  // namespace

Status ForwardContext::forward(const int32_t* tokens, int64_t n, int64_t pos0, KvCache& cache, float* logits,
                               float* all_logits) {
  if (n <= 0) return Status::error("forward: empty batch");
  if (pos0 < 0 || pos0 + n > cache.capacity())
    return Status::errorf("forward: positions [{}, {}) exceed the KV cache capacity {}", pos0, pos0 + n,
                          cache.capacity());
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.n_vocab)
      return Status::errorf("forward: token id {} out of range [0, {})", tokens[i], cfg_.n_vocab);
  const int64_t V = cfg_.n_logits();
  for (int64_t b = 0; b < n; b += max_batch_) {
    const int64_t nb = std::min<int64_t>(max_batch_, n - b);
    const bool last = b + nb == n;
    SeqBatch sb;
    sb.tokens = tokens + b;
    sb.n = nb;
    sb.pos0 = pos0 + b;
    sb.cache = &cache;
    sb.want_logits = last && logits;
    sb.all_logits = all_logits != nullptr;
    EMBER_RETURN_IF_ERROR(forward_ragged(&sb, 1, all_logits ? all_logits + b * V : logits));
  }
  if (all_logits && logits) std::copy(all_logits + (n - 1) * V, all_logits + n * V, logits);
  return Status::ok();
}

Status ForwardContext::forward_ragged(const SeqBatch* seqs, int n_seqs, float* logits) {
  EMBER_RETURN_IF_ERROR(prepare(seqs, n_seqs));
  if (!model_.shard().embeds() || !model_.shard().has_head())
    return Status::error("forward_ragged: this model is one pipeline stage (run its stages by hand)");
  embed();
  run_layers(0, cfg_.n_layer);
  if (!logits || out_rows_.empty()) return finish();
  if (given_rows_.empty()) {
    head(logit_rows_.data(), static_cast<int64_t>(logit_rows_.size()), logits);
    return finish();
  }
  const int64_t E = cfg_.n_embd;
  head_src_.resize(out_rows_.size());
  for (size_t r = 0; r < out_rows_.size(); ++r)
    head_src_[r] =
        out_rows_[r] >= 0 ? x_ + out_rows_[r] * E : given_rows_[static_cast<size_t>(-1 - out_rows_[r])];
  head_of(head_src_.data(), static_cast<int64_t>(head_src_.size()), logits);
  return finish();
}

Status ForwardContext::finish() {
  Status st = backend_->sync();
  if (!st) return st.with_context(std::string("the ") + backend_->name() + " backend");
  return tp_.status;
}

Status ForwardContext::prepare(const SeqBatch* seqs, int n_seqs) {
  n_ = 0;
  if (n_seqs <= 0) return Status::error("forward_ragged: empty batch");
  if (model_.shard().tensor_parallel() && !tp_.comm)
    return Status::error("forward: a tensor-parallel shard runs only with its collective (set_collective)");
  if (!tp_.status) return tp_.status;  // the group failed before: every later step fails
  int64_t total = 0, positions = 0;
  for (int i = 0; i < n_seqs; ++i) {
    const SeqBatch& sb = seqs[i];
    if (!sb.cache || !sb.tokens || sb.n <= 0) return Status::errorf("forward_ragged: sequence {} is empty", i);
    if (sb.n_pre < 0 || sb.n_pre >= sb.n || (sb.n_pre > 0 && (!sb.pre_hidden || !sb.all_logits)))
      return Status::errorf("forward_ragged: sequence {}: {} given rows of {} tokens (at most n - 1, with all logits)",
                            i, sb.n_pre, sb.n);
    if (sb.pos0 < 0 || sb.pos0 + sb.n > sb.cache->capacity())
      return Status::errorf("forward_ragged: sequence {}: positions [{}, {}) exceed its KV capacity {}", i, sb.pos0,
                            sb.pos0 + sb.n, sb.cache->capacity());
    for (int64_t t = 0; t < sb.n; ++t)
      if (sb.tokens[t] < 0 || sb.tokens[t] >= cfg_.n_vocab)
        return Status::errorf("forward_ragged: token id {} out of range [0, {})", sb.tokens[t], cfg_.n_vocab);
    total += sb.n - sb.n_pre;
    positions += sb.n;
  }
  // Given rows are not computed but take head rows: positions bound both.
  if (positions > max_batch_)
    return Status::errorf("forward_ragged: {} tokens exceed the batch capacity {}", positions, max_batch_);

  segs_.clear();
  logit_rows_.clear();
  given_rows_.clear();
  out_rows_.clear();
  std::fill(rope_ready_.begin(), rope_ready_.end(), 0);
  int64_t t = 0;
  for (int i = 0; i < n_seqs; ++i) {
    const SeqBatch& sb = seqs[i];
    segs_.push_back(sb.cache);
    for (int64_t j = sb.n_pre; j < sb.n; ++j, ++t) {
      tok_[t] = sb.tokens[j];
      pos_[t] = static_cast<int32_t>(sb.pos0 + j);
      seg_[t] = i;
    }
    for (int64_t j = 0; j < sb.n_pre; ++j) {
      out_rows_.push_back(-1 - static_cast<int64_t>(given_rows_.size()));
      given_rows_.push_back(sb.pre_hidden + j * cfg_.n_embd);
    }
    const int64_t computed = sb.n - sb.n_pre;
    if (sb.all_logits)
      for (int64_t j = t - computed; j < t; ++j) logit_rows_.push_back(j);
    else if (sb.want_logits)
      logit_rows_.push_back(t - 1);
    if (sb.all_logits || sb.want_logits)
      out_rows_.insert(out_rows_.end(), logit_rows_.end() - (sb.all_logits ? computed : 1), logit_rows_.end());
  }
  n_ = total;
  return Status::ok();
}

void ForwardContext::embed() {
  EMBER_CHECK_MSG(n_ > 0, "ForwardContext::embed before a successful prepare()");
  if (!tp()) {
    backend_->embed(*model_.weights().tok_embd, tok_.data(), n_, cfg_.embd_scale, x_);
    return;
  }
  // Vocabulary-parallel: this rank's rows, zeros for the others' tokens, summed.
  const ModelShard& sh = model_.shard();
  const int64_t E = cfg_.n_embd;
  tp_ids_.resize(static_cast<size_t>(n_));
  for (int64_t t = 0; t < n_; ++t) {
    const bool mine = tok_[t] >= sh.vocab_begin && tok_[t] < sh.vocab_end;
    tp_ids_[t] = mine ? static_cast<int32_t>(tok_[t] - sh.vocab_begin) : 0;
  }
  backend_->embed(*model_.weights().tok_embd, tp_ids_.data(), n_, cfg_.embd_scale, x_);
  for (int64_t t = 0; t < n_; ++t)
    if (tok_[t] < sh.vocab_begin || tok_[t] >= sh.vocab_end) std::fill(x_ + t * E, x_ + (t + 1) * E, 0.f);
  tp_.all_reduce(x_, n_ * E);
}

void ForwardContext::run_layers(int l0, int l1) {
  EMBER_CHECK_MSG(n_ > 0, "ForwardContext::run_layers before a successful prepare()");
  EMBER_CHECK(0 <= l0 && l0 <= l1 && l1 <= cfg_.n_layer);
  const ModelWeights& w = model_.weights();
  TokenLayout tl;
  tl.pos = pos_.data();
  tl.seg = seg_.data();
  tl.caches = segs_.data();
  tl.n_segs = static_cast<int>(segs_.size());
  BlockBuffers bb;
  bb.xn = xn_;
  bb.y = y_;
  bb.attn.q = f32(q_);
  bb.attn.k = f32(k_);
  bb.attn.v = f32(v_);
  bb.attn.attn = f32(attn_);
  bb.attn.views = seg_views_.data();
  bb.attn.stores = seg_stores_.data();
  bb.ffn.gate = f32(gate_);
  bb.ffn.up = f32(up_);
  MoeBuffers& mb = bb.ffn.moe;
  mb.logits = f32(moe_logits_);
  mb.ids = moe_ids_.data();
  mb.weights = f32(moe_weights_);
  mb.x_row = moe_x_row_.data();
  mb.gate = f32(moe_gate_);
  mb.up = f32(moe_up_);
  mb.down = f32(moe_down_);
  mb.shared_gate = f32(moe_shared_gate_);
  mb.shared_up = f32(moe_shared_up_);
  mb.shared_logit = f32(moe_shared_logit_);
  mb.shared_weight = f32(moe_shared_weight_);
  mb.shared_id = moe_shared_id_.data();
  mb.observed = &moe_observed_;
  mb.seg = seg_.data();
  mb.n_segs = static_cast<int>(segs_.size());
  mb.share = &moe_share_;
  mb.stats = &moe_stats_;
  RopeTables rope;
  if (cfg_.attn_temp_scale > 0.f) {
    // The attention temperature of each token: 1 + s ln(1 + floor(p / P)),
    // as a table over the whole head (RopeTables::q_scale).
    const int half = cfg_.head_dim / 2;
    for (int64_t t = 0; t < n_; ++t) {
      const float f = static_cast<float>(
          1.0 + cfg_.attn_temp_scale * std::log(1.0 + std::floor(static_cast<double>(pos_[t]) / cfg_.rope_orig_ctx)));
      std::fill(temp_scale_.begin() + t * half, temp_scale_.begin() + (t + 1) * half, f);
    }
    rope.q_scale = temp_scale_.data();
    rope.zeros = temp_zeros_.data();
  }
  for (int il = l0; il < l1; ++il) {
    const int g = model_.rope_table(il);
    const int64_t table = static_cast<int64_t>(g) * max_batch_ * (cfg_.n_rot / 2);
    rope.cos = rope_cos_p_ + table;
    rope.sin = rope_sin_p_ + table;
    if (!rope_ready_[g] && cfg_.layers[il].use_rope) {
      float* cos_t = rope_cos_p_ + table;
      float* sin_t = rope_sin_p_ + table;
      backend_->rope_angles(pos_.data(), n_, model_.inv_freq(il), cfg_.n_rot, cos_t, sin_t);
      // A RoPE magnitude (YaRN, LongRoPE) scales the tables: one rounding
      // per entry, as transformers applies it to cos and sin.
      if (const float m = cfg_.layers[il].rope_attn_factor; m != 1.f)
        for (int64_t i = 0; i < n_ * (cfg_.n_rot / 2); ++i) cos_t[i] *= m, sin_t[i] *= m;
      rope_ready_[g] = 1;
    }
    const LayerContext c{*backend_, cfg_, il, cfg_.layers[il], w.layers[il], observer_, n_, tp()};
    transformer_block(c, tl, rope, x_, bb);
    if (observer_) observer_->on_block_output(il, x_, n_, cfg_.n_embd);
  }
}

void ForwardContext::head(const int64_t* rows, int64_t n_rows, float* logits) {
  EMBER_CHECK(n_rows >= 0 && n_rows <= max_batch_);
  head_src_.resize(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    EMBER_CHECK(rows[r] >= 0 && rows[r] < n_);
    head_src_[static_cast<size_t>(r)] = x_ + rows[r] * cfg_.n_embd;
  }
  head_of(head_src_.data(), n_rows, logits);
}

void ForwardContext::head_of(const float* const* src, int64_t n_rows, float* logits) {
  EMBER_CHECK(n_rows >= 0 && n_rows <= max_batch_);
  if (n_rows == 0) return;
  const ModelWeights& w = model_.weights();
  const int64_t E = cfg_.n_embd, V = cfg_.n_logits();
  for (int64_t r = 0; r < n_rows; ++r) backend_->copy(xn_ + r * E, src[r], static_cast<size_t>(E) * sizeof(float));
  norm_rows(*backend_, cfg_, xn_, w.output_norm, xn_, n_rows);
  if (!tp()) {
    const LinearOut out{&w.output, LinearRole::kOutput, logits, V};
    run_linears(*backend_, observer_, -1, xn_, E, n_rows, &out, 1);
    const std::vector<int32_t>& kept = cfg_.output_tokens;
    if (!kept.empty()) {
      // A trimmed output vocabulary: row r holds the kept tokens' scores in
      // its first kept.size() entries; spread them to their ids (descending:
      // an entry moves to an id >= its index, whose own entry moved already)
      // and set every other token to -inf.
      const int64_t n_kept = static_cast<int64_t>(kept.size());
      for (int64_t r = 0; r < n_rows; ++r) {
        float* row = logits + r * V;
        if (cfg_.final_logit_softcap > 0.f) backend_->softcap(row, n_kept, cfg_.final_logit_softcap);
        int64_t next = V;  // the id after the gap being filled
        for (int64_t j = n_kept - 1; j >= 0; --j) {
          const int64_t t = kept[j];
          row[t] = row[j];
          std::fill(row + t + 1, row + next, -INFINITY);
          next = t;
        }
        std::fill(row, row + next, -INFINITY);
      }
      return;
    }
    if (cfg_.final_logit_softcap > 0.f) backend_->softcap(logits, n_rows * V, cfg_.final_logit_softcap);
    return;
  }
  // Vocabulary-parallel head: each rank scores its rows (a slice of
  // vocab_stride columns per logits row, zero-padded), then every rank
  // gathers the slices into whole rows.
  const ModelShard& sh = model_.shard();
  const int64_t S = sh.vocab_stride, P = sh.tp_size;
  tp_logits_.assign(static_cast<size_t>(n_rows * S), 0.f);
  tp_gathered_.resize(static_cast<size_t>(P * n_rows * S));
  const LinearOut out{&w.output, LinearRole::kOutput, tp_logits_.data(), S};
  run_linears(*backend_, observer_, -1, xn_, E, n_rows, &out, 1);
  if (cfg_.final_logit_softcap > 0.f) backend_->softcap(tp_logits_.data(), n_rows * S, cfg_.final_logit_softcap);
  if (!tp_.status) return;
  tp_.status = tp_.comm->all_gather(tp_logits_.data(), static_cast<size_t>(n_rows * S), tp_gathered_.data());
  if (!tp_.status) return;
  for (int64_t r = 0; r < P; ++r) {
    const int64_t v0 = r * S, cnt = std::max<int64_t>(0, std::min<int64_t>(V, v0 + S) - v0);
    for (int64_t i = 0; i < n_rows; ++i) {
      const float* src = tp_gathered_.data() + (r * n_rows + i) * S;
      std::copy(src, src + cnt, logits + i * V + v0);
    }
  }
}

}  // namespace ember
