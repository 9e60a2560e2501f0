// Draft-model proposer; see draft_proposer.h.
#include "engine/speculative/draft_proposer.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/hadamard.h"
#include "kernels/interleave.h"
#include "model/layers/norm.h"

namespace ember {

Status check_same_vocabulary(const Metadata& t, int t_vocab, const Metadata& d, int d_vocab) {
  if (t_vocab != d_vocab)
    return Status::errorf("draft model vocabulary has {} tokens, the target's {}: the tokenizers must match", d_vocab,
                          t_vocab);
  const GgufValue* tt = t.find("tokenizer.ggml.tokens");
  const GgufValue* dt = d.find("tokenizer.ggml.tokens");
  if ((tt == nullptr) != (dt == nullptr))
    return Status::error("only one of the target and draft models lists its vocabulary: cannot check that the "
                         "tokenizers match");
  if (tt) {
    if (tt->strings.size() != dt->strings.size())
      return Status::errorf("draft tokenizer has {} tokens, the target's {}", dt->strings.size(), tt->strings.size());
    for (size_t i = 0; i < tt->strings.size(); ++i)
      if (tt->strings[i] != dt->strings[i])
        return Status::errorf("draft tokenizer differs from the target's at token {}: '{}' vs '{}'", i,
                              dt->strings[i], tt->strings[i]);
  }
  const std::string* tm = t.get_string("tokenizer.ggml.model");
  const std::string* dm = d.get_string("tokenizer.ggml.model");
  if (tm && dm && *tm != *dm)
    return Status::errorf("draft tokenizer is a '{}' tokenizer, the target's '{}'", *dm, *tm);
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    const auto a = t.get_int(key), b = d.get_int(key);
    if (a && b && *a != *b) return Status::errorf("draft tokenizer's {} is {}, the target's {}", key, *b, *a);
  }
  return Status::ok();
}

KvTypes draft_kv_types(KvTypes t, const ModelConfig& draft) {
  auto fits = [](KvType ty, KvRotation r, int64_t hd) {
    return !kv_token_grouped(ty) && kv_type_check(ty, hd).is_ok() &&
           (r == KvRotation::kNone || hadamard_check(hd).is_ok());
  };
  if (!fits(t.k, t.rot_k, draft.head_dim)) {
    t.k = KvType::kF16;
    t.rot_k = KvRotation::kNone;
  }
  if (!fits(t.v, t.rot_v, draft.head_dim_v)) {
    t.v = KvType::kF16;
    t.rot_v = KvRotation::kNone;
  }
  return t;
}

namespace {
bool same_floats(const float* a, const float* b, int64_t n) {
  if (a == b) return true;
  return a && b && std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}
// draft reads the target's token embedding (make_draft_view shares it).
bool is_view_of(const Model& target, const Model& draft) {
  const TensorView* a = target.weights().tok_embd;
  const TensorView* b = draft.weights().tok_embd;
  return a && b && a->data == b->data;
}
bool same_linear(const Linear& a, const Linear& b) {
  const void* da = a.weight ? a.weight->data : nullptr;
  const void* db = b.weight ? b.weight->data : nullptr;
  return da == db && a.bias == b.bias && a.act_bits == b.act_bits;
}
// Mixture-of-Experts weights: the same router, experts and shared expert.
bool same_experts(const MoeWeights& a, const MoeWeights& b) {
  if (!same_linear(a.router, b.router) || !same_linear(a.shared_gate, b.shared_gate) ||
      !same_linear(a.shared_up, b.shared_up) || !same_linear(a.shared_down, b.shared_down) ||
      !same_linear(a.shared_gate_inp, b.shared_gate_inp) || a.gate.size() != b.gate.size() ||
      a.up.size() != b.up.size() || a.down.size() != b.down.size())
    return false;
  for (size_t e = 0; e < a.gate.size(); ++e)
    if (!same_linear(a.gate[e], b.gate[e]) || !same_linear(a.up[e], b.up[e]) || !same_linear(a.down[e], b.down[e]))
      return false;
  return true;
}
}  // namespace

int shared_kv_layers(const Model& target, const Model& draft) {
  const ModelConfig& tc = target.config();
  const ModelConfig& dc = draft.config();
  const ModelWeights& tw = target.weights();
  const ModelWeights& dw = draft.weights();
  if (!is_view_of(target, draft) || tc.n_embd != dc.n_embd || tc.head_dim != dc.head_dim ||
      tc.head_dim_v != dc.head_dim_v || tw.rope_freqs != dw.rope_freqs)
    return 0;
  int n = 0;
  for (; n < std::min(tc.n_layer, dc.n_layer); ++n) {
    const LayerConfig& a = tc.layers[static_cast<size_t>(n)];
    const LayerConfig& b = dc.layers[static_cast<size_t>(n)];
    if (a.n_head != b.n_head || a.n_head_kv != b.n_head_kv || a.n_ff != b.n_ff || a.ffn_kind != b.ffn_kind ||
        a.sliding_window != b.sliding_window || a.rope_base != b.rope_base ||
        a.rope_freq_scale != b.rope_freq_scale || a.use_rope_freq_factors != b.use_rope_freq_factors ||
        a.n_expert != b.n_expert || a.n_expert_used != b.n_expert_used || a.n_ff_exp != b.n_ff_exp ||
        a.n_ff_shexp != b.n_ff_shexp || a.moe_gating != b.moe_gating || a.moe_norm_topk != b.moe_norm_topk ||
        a.moe_weights_scale != b.moe_weights_scale)
      break;
    const LayerWeights& x = tw.layers[static_cast<size_t>(n)];
    const LayerWeights& y = dw.layers[static_cast<size_t>(n)];
    const int64_t e = tc.n_embd, hd = tc.head_dim;
    if (!same_linear(x.q, y.q) || !same_linear(x.k, y.k) || !same_linear(x.v, y.v) || !same_linear(x.o, y.o) ||
        !same_linear(x.gate, y.gate) || !same_linear(x.up, y.up) || !same_linear(x.down, y.down) ||
        !same_floats(x.attn_norm, y.attn_norm, e) || !same_floats(x.post_attn_norm, y.post_attn_norm, e) ||
        !same_floats(x.ffn_norm, y.ffn_norm, e) || !same_floats(x.post_ffn_norm, y.post_ffn_norm, e) ||
        !same_floats(x.q_norm, y.q_norm, hd) || !same_floats(x.k_norm, y.k_norm, hd) || !same_experts(x.moe, y.moe))
      break;
  }
  return n;
}

Result<std::unique_ptr<DraftProposer>> DraftProposer::create(const Model& target, const Model& draft,
                                                             ThreadPool& pool, const DraftConfig& cfg) {
  // The vocabulary lists where both files carry one (ember's command line
  // also reads the tokenizer files of Hugging Face folders before this).
  const Metadata& tm = target.file().metadata;
  const Metadata& dm = draft.file().metadata;
  const bool lists = tm.find("tokenizer.ggml.tokens") && dm.find("tokenizer.ggml.tokens");
  EMBER_RETURN_IF_ERROR(check_same_vocabulary(lists ? tm : Metadata(), target.config().n_vocab,
                                              lists ? dm : Metadata(), draft.config().n_vocab));
  if (cfg.block_size < 1) return Status::errorf("draft KV block size must be >= 1 (got {})", cfg.block_size);
  if (cfg.max_batch < 1 || cfg.max_batch > (1 << 16))
    return Status::errorf("draft batch of {} tokens out of range [1, 65536]", cfg.max_batch);
  if (!target.config().head_tokens.empty()) return Status::error("the target's output head is truncated");
  auto p = std::unique_ptr<DraftProposer>(new DraftProposer(cfg, target.config().n_vocab));
  p->draft_head_tokens_ = draft.config().head_tokens;
  auto backend = make_backend(cfg.backend, pool);
  if (!backend) return backend.status().with_context("draft model");
  EMBER_RETURN_IF_ERROR(draft.check_backend(*backend.value()).with_context("draft model"));
  p->runner_ = std::make_unique<CpuModelRunner>(draft, std::move(backend.value()), cfg.max_batch,
                                                draft_kv_types(cfg.kv_types, draft.config()));
  const KvLayout layout = KvLayout::from_spec(p->runner_->kv_spec(), true);
  auto n_blocks = p->runner_->allocate_kv(layout, cfg.block_size, cfg.kv_cache_bytes, cfg.num_kv_blocks, {});
  if (!n_blocks) return n_blocks.status().with_context("draft model KV cache");
  p->kv_ = std::make_unique<KvCacheManager>(layout, cfg.block_size, n_blocks.value(), false, 0);
  p->shared_layers_ = shared_kv_layers(target, draft);
  p->n_draft_layers_ = draft.config().n_layer;
  p->whole_stack_ = p->shared_layers_ == draft.config().n_layer && draft.config().n_layer == target.config().n_layer;
  p->n_embd_ = draft.config().n_embd;
  if (cfg.context_tokens < 0) return Status::errorf("draft context tokens must be >= 0 (got {})", cfg.context_tokens);
  if (!p->draft_head_tokens_.empty() && is_view_of(target, draft) && cfg.context_tokens > 0 && target.weights().output.weight &&
      target.weights().output_norm) {
    auto be = make_backend(cfg.backend, pool);
    if (!be) return be.status().with_context("draft context tokens");
    EMBER_RETURN_IF_ERROR(target.check_backend(*be.value()).with_context("draft context tokens"));
    p->context_ = true;
    p->target_ = &target;
    p->backend_ = std::move(be.value());
    p->in_head_.assign(static_cast<size_t>(target.config().n_vocab), 0);
    for (int32_t t : p->draft_head_tokens_) p->in_head_[static_cast<size_t>(t)] = 1;
  }
  return p;
}

bool DraftProposer::set_kv_donor(const KvDonor& donor) {
  const KvBlockPool* dst = runner_->kv_pool();
  const KvBlockPool* src = donor.pool;
  if (!src || !donor.kv || !dst || shared_layers_ < n_draft_layers_) return false;
  if (src->types() != dst->types() || kv_token_grouped(src->types().k) || src->block_size() != dst->block_size())
    return false;
  const KvLayout& ls = src->layout();
  const KvLayout& ld = dst->layout();
  if (static_cast<int>(ls.group_of_layer.size()) < n_draft_layers_) return false;
  for (int l = 0; l < n_draft_layers_; ++l) {
    const int ss = ls.slot_of_layer[static_cast<size_t>(l)], sd = ld.slot_of_layer[static_cast<size_t>(l)];
    if (src->k_row_bytes(ss) != dst->k_row_bytes(sd) || src->v_row_bytes(ss) != dst->v_row_bytes(sd) ||
        ls.group_window[static_cast<size_t>(ls.group_of_layer[static_cast<size_t>(l)])] !=
            ld.group_window[static_cast<size_t>(ld.group_of_layer[static_cast<size_t>(l)])])
      return false;
  }
  donor_ = donor;
  return true;
}

namespace {
// K/V rows of positions [from, upto) of layers 0 .. n_layers-1 from the
// pages of tables ts in src to those of td in dst (the same row formats);
// positions whose page either side released (sliding windows) are skipped.
void copy_kv_rows(const KvBlockPool& src, const BlockTables& ts, KvBlockPool& dst, const BlockTables& td,
                  int n_layers, int64_t from, int64_t upto) {
  const int bs = dst.block_size();
  const KvLayout& ls = src.layout();
  const KvLayout& ld = dst.layout();
  for (int l = 0; l < n_layers; ++l) {
    const size_t li = static_cast<size_t>(l);
    const int ss = ls.slot_of_layer[li], sd = ld.slot_of_layer[li];
    const std::vector<int32_t>& tsg = ts[static_cast<size_t>(ls.group_of_layer[li])];
    const std::vector<int32_t>& tdg = td[static_cast<size_t>(ld.group_of_layer[li])];
    const int64_t kb = dst.k_row_bytes(sd), vb = dst.v_row_bytes(sd);
    for (int64_t p = from; p < upto; ++p) {
      const int32_t bsrc = tsg[static_cast<size_t>(p / bs)], bdst = tdg[static_cast<size_t>(p / bs)];
      if (bsrc < 0 || bdst < 0) continue;  // out of a sliding window (released), never read again
      const int64_t row = p % bs;
      std::memcpy(dst.k_block(sd, bdst) + row * kb, src.k_block(ss, bsrc) + row * kb, static_cast<size_t>(kb));
      std::memcpy(dst.v_block(sd, bdst) + row * vb, src.v_block(ss, bsrc) + row * vb, static_cast<size_t>(vb));
    }
  }
}

bool covers(const BlockTables& t, int block_size, int64_t upto) {
  for (const std::vector<int32_t>& g : t)
    if (static_cast<int64_t>(g.size()) * block_size < upto) return false;
  return true;
}
}  // namespace

void DraftProposer::copy_from_donor(const Request& r, Request& sh) {
  const int64_t from = sh.num_computed_tokens;
  const int64_t upto = std::min(r.num_computed_tokens, r.num_tokens() - 1);
  if (upto <= from) return;
  KvBlockPool& dst = *runner_->kv_pool();
  const BlockTables& ts = donor_.kv->tables(r);
  if (!covers(ts, dst.block_size(), upto)) return;  // not covered: run the tokens instead
  std::vector<KvOp> ops;
  if (!kv_->allocate_slots(sh, upto - from, 0, &ops)) return;  // the draft pool is full: the rounds handle it
  if (!ops.empty()) {  // not expected (no forks, no prefix cache): apply them first, run the tokens
    pending_ops_.insert(pending_ops_.end(), ops.begin(), ops.end());
    return;
  }
  copy_kv_rows(*donor_.pool, ts, dst, kv_->tables(sh), n_draft_layers_, from, upto);
  sh.num_computed_tokens = upto;
  n_tokens_copied_ += upto - from;
  kv_->release_out_of_window(sh);
}

void DraftProposer::scan_context(Seq& s, const Request& r) {
  const TensorView& full = *target_->weights().output.weight;
  const size_t rb = static_cast<size_t>(dtype_row_size(dtype_layout_base(full.type), full.ne[0]));
  for (; s.scanned < r.num_tokens(); ++s.scanned) {
    if (static_cast<int>(s.extra.size()) >= cfg_.context_tokens) {
      s.scanned = r.num_tokens();
      break;
    }
    const int32_t t = r.tokens[static_cast<size_t>(s.scanned)];
    if (t < 0 || t >= static_cast<int32_t>(in_head_.size()) || t >= full.ne[1] || in_head_[static_cast<size_t>(t)] ||
        !s.extra_set.insert(t).second)
      continue;
    s.extra.push_back(t);
    s.extra_rows.resize(s.extra.size() * rb);
    copy_row_bytes(full, t, s.extra_rows.data() + (s.extra.size() - 1) * rb);
  }
}

void DraftProposer::score_context(Seq& s, const float* h, float* row) {
  if (s.extra.empty()) return;
  const ModelConfig& tc = target_->config();
  const TensorView& full = *target_->weights().output.weight;
  xn_.resize(static_cast<size_t>(n_embd_));
  norm_rows(*backend_, tc, h, target_->weights().output_norm, xn_.data(), 1);
  TensorView w = full;
  w.type = dtype_layout_base(full.type);
  w.ne[1] = static_cast<int64_t>(s.extra.size());
  w.data = s.extra_rows.data();
  w.nbytes = s.extra_rows.size();
  ctx_logits_.resize(s.extra.size());
  backend_->matmul(w, xn_.data(), n_embd_, ctx_logits_.data(), w.ne[1], 1);
  if (tc.final_logit_softcap > 0.f)
    backend_->softcap(ctx_logits_.data(), static_cast<int64_t>(ctx_logits_.size()), tc.final_logit_softcap);
  for (size_t j = 0; j < s.extra.size(); ++j) row[static_cast<size_t>(s.extra[j])] = ctx_logits_[j];
}

void DraftProposer::before_verify(std::vector<ScheduledRequest>& slices) {
  if (!hands_over_rows()) return;
  for (ScheduledRequest& sr : slices) {
    if (sr.n_spec <= 0) continue;
    auto it = seqs_.find(sr.req->seq_id);
    if (it == seqs_.end()) continue;
    Seq& s = *it->second;
    if (s.hidden_step != step_ || s.hidden_pos0 != sr.pos0 || s.hidden.empty()) continue;
    const Request& sh = s.shadow;
    const int64_t rows = static_cast<int64_t>(s.hidden.size()) / n_embd_;
    const int64_t m = std::min({rows, sr.n_tokens - 1, sh.num_computed_tokens - sr.pos0});
    if (m <= 0 || !covers(*sr.tables, donor_.pool->block_size(), sr.pos0 + m)) continue;
    bool same = true;  // the draft ran exactly the slice's tokens
    for (int64_t p = sr.pos0; p < sr.pos0 + m && same; ++p)
      same = sh.tokens[static_cast<size_t>(p)] == sr.req->token_at(p);
    if (!same) continue;
    copy_kv_rows(*runner_->kv_pool(), kv_->tables(sh), *donor_.pool, *sr.tables, n_draft_layers_, sr.pos0,
                 sr.pos0 + m);
    sr.n_pre = m;
    sr.pre_hidden = s.hidden.data();
    n_rows_handed_ += m;
  }
}

void DraftProposer::drop(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  kv_->remove(it->second->shadow);
  seqs_.erase(it);
}

void DraftProposer::release(const Request& r) { drop(r.seq_id); }

bool DraftProposer::evict_idle() {
  std::vector<uint64_t> idle;
  for (const auto& [id, s] : seqs_)
    if (s->last_used != step_) idle.push_back(id);
  for (uint64_t id : idle) drop(id);
  return !idle.empty();
}

// The request's state in the draft: its final tokens, the draft KV rolled
// back to the longest prefix it shares with them.
DraftProposer::Seq& DraftProposer::sync(const Request& r) {
  auto it = seqs_.find(r.seq_id);
  if (it == seqs_.end()) {
    auto s = std::make_unique<Seq>();
    s->req = &r;
    s->shadow.seq_id = r.seq_id;
    s->shadow.sampling = r.sampling;
    s->shadow.sampler = std::make_unique<Sampler>(r.sampling);
    s->shadow.sampler->use_scratch(&scratch_);
    s->rng.seed(r.sampling.seed ^ 0x9E3779B97F4A7C15ull);
    kv_->add(s->shadow);
    it = seqs_.emplace(r.seq_id, std::move(s)).first;
  }
  Seq& s = *it->second;
  s.last_used = step_;
  Request& sh = s.shadow;
  int64_t same = 0;
  const int64_t lim = std::min(sh.num_computed_tokens, r.num_tokens());
  while (same < lim && sh.tokens[static_cast<size_t>(same)] == r.tokens[static_cast<size_t>(same)]) ++same;
  // The last token is always run again: its logits give the first draft
  // (the draft may hold it already when the target decoded without
  // verifying, e.g. its drafts did not fit, and agreed with the draft).
  same = std::min(same, r.num_tokens() - 1);
  if (same < sh.num_computed_tokens) {
    kv_->rollback(sh, sh.num_computed_tokens - same);
    sh.num_computed_tokens = same;
  }
  sh.tokens = r.tokens;
  sh.n_prompt = r.n_prompt;
  kv_->release_out_of_window(sh);  // only final positions are computed now
  sh.sampler->reset();
  for (int32_t t : sh.tokens) sh.sampler->accept(t);
  return s;
}

// The draft token from the draft's logits row (modified in place): see the
// top of draft_proposer.h.
int32_t DraftProposer::draw(Seq& s, float* row, std::vector<float>* q) {
  Sampler& sm = *s.shadow.sampler;
  int32_t tok;
  if (s.shadow.sampling.temperature <= 0.f) {
    tok = sm.sample(row, n_vocab_);
  } else {
    q->resize(n_vocab_);
    sm.distribution(row, n_vocab_, q->data());
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    const double r = uni(s.rng);
    double cum = 0;
    tok = -1;
    for (int j = 0; j < n_vocab_; ++j) {
      if ((*q)[j] <= 0.f) continue;
      cum += (*q)[j];
      tok = j;
      if (r < cum) break;
    }
    EMBER_CHECK(tok >= 0);
  }
  sm.accept(tok);
  return tok;
}

Status DraftProposer::propose(const std::vector<ProposeItem>& items) {
  ++step_;
  // Preempted requests (no longer running) give their draft KV back.
  std::vector<uint64_t> gone;
  for (const auto& [id, s] : seqs_)
    if (!s->req->running()) gone.push_back(id);
  for (uint64_t id : gone) drop(id);

  struct Active {
    Seq* s;
    const ProposeItem* it;
    int64_t n_final;  // the request's tokens (drafts start after them)
    bool done;
  };
  std::vector<Active> act;
  for (const ProposeItem& it : items) {
    it.out->tokens.clear();
    it.out->q.clear();
    Seq& s = sync(*it.req);
    if (donor_.pool) copy_from_donor(*it.req, s.shadow);
    if (context_) scan_context(s, *it.req);
    s.hidden.clear();
    s.hidden_pos0 = -1;
    act.push_back({&s, &it, s.shadow.num_tokens(), false});
  }
  const int V = n_vocab_;
  // A truncated draft head (draft_head.h): rows of W < V scores, entry j
  // the score of head_tokens[j]; spread over a full row, -inf elsewhere.
  const std::vector<int32_t>& head = draft_head_tokens_;
  const int W = runner_->n_vocab();
  if (!head.empty()) full_row_.resize(static_cast<size_t>(V));
  // Rounds: one draft forward each over every active request's uncomputed
  // tokens (chunked to the batch), then a draft token for each request whose
  // slice reached its last token.
  for (;;) {
    SchedulerOutput so;
    std::vector<size_t> who;  // act index per scheduled slice
    int64_t budget = cfg_.max_batch;
    for (size_t i = 0; i < act.size() && budget > 0; ++i) {
      Active& a = act[i];
      if (a.done) continue;
      Request& sh = a.s->shadow;
      const int64_t n = std::min<int64_t>(sh.num_tokens() - sh.num_computed_tokens, budget);
      EMBER_CHECK(n > 0);
      bool ok = kv_->allocate_slots(sh, n, 0, &so.kv_ops);
      if (!ok && evict_idle()) ok = kv_->allocate_slots(sh, n, 0, &so.kv_ops);
      if (!ok) {  // the draft pool is full: this request drafts no further now
        a.done = true;
        continue;
      }
      ScheduledRequest sr;
      sr.req = &sh;
      sr.pos0 = sh.num_computed_tokens;
      sr.n_tokens = n;
      sr.want_logits = sr.pos0 + n == sh.num_tokens();
      so.scheduled.push_back(sr);
      so.n_tokens += n;
      so.n_logit_rows += sr.want_logits ? 1 : 0;
      who.push_back(i);
      budget -= n;
    }
    if (so.scheduled.empty()) break;
    so.kv_ops.insert(so.kv_ops.begin(), pending_ops_.begin(), pending_ops_.end());
    pending_ops_.clear();
    for (ScheduledRequest& sr : so.scheduled) sr.tables = &kv_->tables(*sr.req);
    for (const auto& [id, seq] : seqs_) {  // the draft pool's other sequences (SchedulerOutput::idle)
      const Request& sh = seq->shadow;
      const bool in = std::any_of(so.scheduled.begin(), so.scheduled.end(),
                                  [&](const ScheduledRequest& sr) { return sr.req == &sh; });
      if (!in && kv_->holds_blocks(sh)) so.idle.push_back({&kv_->tables(sh), sh.num_computed_tokens, sh.seq_id});
    }
    auto rows = runner_->execute(so);
    if (!rows) return rows.status().with_context("draft model");
    ++n_forwards_;
    n_tokens_run_ += so.n_tokens;
    int row = 0;
    for (size_t j = 0; j < so.scheduled.size(); ++j) {
      const ScheduledRequest& sr = so.scheduled[j];
      Active& a = act[who[j]];
      Request& sh = a.s->shadow;
      sh.num_computed_tokens += sr.n_tokens;
      if (!sr.want_logits) continue;
      if (hands_over_rows()) {  // the residual row behind this draft, for the verification
        Seq& s = *a.s;
        if (s.hidden.empty()) s.hidden_pos0 = sr.pos0 + sr.n_tokens - 1;
        const float* h = runner_->hidden_of_row(row);
        s.hidden.insert(s.hidden.end(), h, h + n_embd_);
        s.hidden_step = step_;
      }
      float* lg = rows.value() + static_cast<size_t>(row++) * W;
      if (!head.empty()) {
        std::fill(full_row_.begin(), full_row_.end(), -std::numeric_limits<float>::infinity());
        for (size_t t = 0; t < head.size(); ++t) full_row_[static_cast<size_t>(head[t])] = lg[t];
        if (context_) score_context(*a.s, runner_->hidden_of_row(row - 1), full_row_.data());
        lg = full_row_.data();
      }
      Proposal& p = *a.it->out;
      std::vector<float> q;
      const int32_t tok = draw(*a.s, lg, &q);
      p.tokens.push_back(tok);
      if (!q.empty()) p.q.push_back(std::move(q));
      sh.tokens.push_back(tok);
      if (static_cast<int>(p.tokens.size()) >= a.it->max_k) a.done = true;  // its last draft needs no KV
    }
  }
  return Status::ok();
}

}  // namespace ember
