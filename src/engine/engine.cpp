// Serving engine: scheduling, ragged forward, sampling; see engine.h.
#include "engine/engine.h"

#include "kernels/ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace ember {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {
std::string seq_key(const std::string& id, int index) { return fmt::format("{}\x1f{}", id, index); }
// The k largest raw logits as (token, logit - lse), largest first (lowest
// id first on ties): one pass with a small sorted buffer.
TopLogprobs top_k_logprobs(const float* lg, int n, int k, double lse) {
  TopLogprobs top;  // ascending by (logit, -id) while scanning
  top.reserve(k + 1);
  auto less = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second < b.second || (a.second == b.second && a.first > b.first);
  };
  for (int j = 0; j < n; ++j) {
    if (static_cast<int>(top.size()) == k && !(lg[j] > top.front().second)) continue;
    std::pair<int32_t, float> e{j, lg[j]};
    top.insert(std::upper_bound(top.begin(), top.end(), e, less), e);
    if (static_cast<int>(top.size()) > k) top.erase(top.begin());
  }
  std::reverse(top.begin(), top.end());
  for (auto& e : top) e.second = static_cast<float>(e.second - lse);
  return top;
}


}  // namespace

struct Engine::Sequence {
  std::string id;
  int index = 0;                // sample index within the request
  int n_fork = 0;               // samples to fork off at the first sampled token
  SamplingParams sampling;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // tokens whose K/V are in the cache
  // One block table per KV layer group, equal lengths (one entry per block
  // of positions); -1 where a sliding-window group released the page.
  std::vector<std::vector<int32_t>> tables;
  std::vector<uint64_t> hashes; // chain hashes of the leading full blocks (registered or matched)
  std::vector<size_t> released;  // per group: entries below this are released (-1)
  bool holds_blocks() const { return !tables.empty() && !tables[0].empty(); }
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<Sampler> sampler;
  int max_tokens = 0;
  std::vector<int32_t> stop;
  bool want_logprobs = false;
  int top_logprobs = 0;
  int prompt_logprobs = -1;      // see RequestParams
  int64_t n_prompt_lp_done = 1;  // prompt positions whose log p was reported (position 0 has none)
  bool needs_prompt_rows() const { return prompt_logprobs >= 0 && n_prompt_lp_done < n_prompt; }
  std::vector<float> logprobs;
  int priority = 0;
  uint64_t arrival = 0;
  int n_preemptions = 0;
  int64_t n_cached_prompt = -1;  // set at first admission
  // Swapped out (preempt_swap): the KV pages present at preemption, in table
  // order per group, each [layers_per_group x (K block, V block)].
  bool swapped = false;
  std::vector<float> swap;
  std::vector<std::vector<char>> swap_present;  // per group, per table entry
  std::vector<size_t> swap_released;
  double t_arrival = 0;          // add_request time (steady clock, seconds)
  double queue_seconds = -1;     // arrival to first admission
  bool running = false;
  int64_t n_output() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
};

Engine::Engine(const Model& model, const EngineConfig& cfg) : model_(model), cfg_(cfg) {}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, ThreadPool& pool, const EngineConfig& cfg) {
  if (cfg.max_num_batched_tokens < 1 || cfg.max_num_batched_tokens > (1 << 16))
    return Status::errorf("max_num_batched_tokens {} out of range [1, 65536]", cfg.max_num_batched_tokens);
  if (cfg.max_num_seqs < 1 || cfg.max_num_seqs > 4096)
    return Status::errorf("max_num_seqs {} out of range [1, 4096]", cfg.max_num_seqs);
  if (cfg.max_model_len < 0) return Status::errorf("max_model_len {} is negative", cfg.max_model_len);
  auto e = std::unique_ptr<Engine>(new Engine(model, cfg));
  const KvLayout layout = KvLayout::from_config(model.config(), cfg.sliding_window_release);
  auto kv = KvBlockPool::create(model.config(), layout, cfg.block_size, cfg.kv_cache_bytes, cfg.num_kv_blocks);
  if (!kv) return kv.status();
  e->kv_ = std::move(kv.value());
  e->blocks_ = std::make_unique<BlockManager>(e->kv_->n_blocks(), cfg.block_size, cfg.enable_prefix_caching);
  e->fwd_ = std::make_unique<ForwardContext>(model, pool, cfg.max_num_batched_tokens);
  int64_t len = cfg.max_model_len > 0 ? cfg.max_model_len : model.config().n_ctx_train;
  if (len <= 0) len = int64_t{1} << 30;
  // A lone sequence must always fit: every group may hold all its positions.
  const int64_t pages_per_block = layout.n_groups;
  e->n_groups_ = layout.n_groups;
  e->max_seq_len_ =
      std::min<int64_t>(len, static_cast<int64_t>(e->kv_->n_blocks()) / pages_per_block * cfg.block_size);
  if (e->max_seq_len_ < 2)
    return Status::errorf("KV cache of {} pages is too small for {} layer groups", e->kv_->n_blocks(),
                          layout.n_groups);
  e->stats_.blocks_total = e->kv_->n_blocks();
  return e;
}

bool Engine::before(const Sequence* a, const Sequence* b) const {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->arrival != b->arrival) return a->arrival < b->arrival;
  return a->index < b->index;
}

void Engine::insert_sorted(std::vector<Sequence*>& q, Sequence* s) {
  auto it = std::upper_bound(q.begin(), q.end(), s, [this](const Sequence* a, const Sequence* b) { return before(a, b); });
  q.insert(it, s);
}

Status Engine::add_request(const std::string& id, RequestParams p) {
  if (groups_.count(id)) return Status::errorf("request id '{}' is already in use", id);
  if (p.n < 1 || p.n > 256) return Status::errorf("request '{}': n must be in [1, 256] (got {})", id, p.n);
  if (p.prompt.empty()) return Status::errorf("request '{}': empty prompt", id);
  const int V = model_.config().n_vocab;
  for (int32_t t : p.prompt)
    if (t < 0 || t >= V) return Status::errorf("request '{}': token id {} out of range [0, {})", id, t, V);
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= V) return Status::errorf("request '{}': stop token id {} out of range [0, {})", id, t, V);
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs)
    return Status::errorf("request '{}': top_logprobs must be in [0, {}] (got {})", id, kMaxTopLogprobs,
                          p.top_logprobs);
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxTopLogprobs)
    return Status::errorf("request '{}': prompt_logprobs must be in [-1, {}] (got {})", id, kMaxTopLogprobs,
                          p.prompt_logprobs);
  if (p.max_tokens < 1) return Status::errorf("request '{}': max_tokens must be >= 1 (got {})", id, p.max_tokens);
  EMBER_RETURN_IF_ERROR(p.sampling.validate().with_context(fmt::format("request '{}'", id)));
  const int64_t n = static_cast<int64_t>(p.prompt.size());
  if (n >= max_seq_len_)
    return Status::errorf(
        "request '{}': prompt of {} tokens can never fit: at most {} tokens per sequence (KV cache of {} pages of {} "
        "tokens in {} layer groups, max_model_len {})",
        id, n, max_seq_len_ - 1, kv_->n_blocks(), cfg_.block_size, n_groups_, cfg_.max_model_len);
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->n_fork = p.n - 1;
  s->sampling = p.sampling;
  s->tokens = std::move(p.prompt);
  s->n_prompt = n;
  s->tables.resize(n_groups_);
  s->released.assign(n_groups_, 0);
  s->cache = std::make_unique<PagedKvCache>(*kv_, s->tables);
  s->sampler = std::make_unique<Sampler>(p.sampling);
  s->sampler->use_scratch(&sampler_scratch_);
  for (int32_t t : s->tokens) s->sampler->accept(t);
  s->max_tokens = p.max_tokens;
  s->stop = std::move(p.stop_token_ids);
  s->priority = p.priority;
  s->want_logprobs = p.logprobs || p.top_logprobs > 0;
  s->top_logprobs = p.top_logprobs;
  s->prompt_logprobs = p.prompt_logprobs;
  s->arrival = next_arrival_++;
  s->t_arrival = now_seconds();
  insert_sorted(waiting_, s.get());
  seqs_.emplace(seq_key(id, 0), std::move(s));
  groups_[id] = Group{p.n, 1};
  return Status::ok();
}

void Engine::finish(Sequence* s, FinishReason r, StepOutput* out) {
  FinishedRequest f;
  f.id = s->id;
  f.index = s->index;
  f.reason = r;
  f.output.assign(s->tokens.begin() + s->n_prompt, s->tokens.end());
  f.logprobs = std::move(s->logprobs);
  f.n_prompt = s->n_prompt;
  f.n_cached_prompt = std::max<int64_t>(0, s->n_cached_prompt);
  f.queue_seconds = s->queue_seconds;
  f.n_preemptions = s->n_preemptions;
  free_tables(s);
  auto& q = s->running ? running_ : waiting_;
  q.erase(std::find(q.begin(), q.end(), s));
  if (out) out->finished.push_back(std::move(f));
  else pending_finished_.push_back(std::move(f));
  auto g = groups_.find(s->id);
  if (--g->second.live == 0 && s->n_fork == 0) groups_.erase(g);
  seqs_.erase(seq_key(s->id, s->index));  // destroys s
}

bool Engine::abort(const std::string& id) {
  auto g = groups_.find(id);
  if (g == groups_.end()) return false;
  const int n = g->second.n;
  // Samples not forked yet (the prompt is still being computed) end too:
  // every sample of a request is reported exactly once.
  if (auto p = seqs_.find(seq_key(id, 0)); p != seqs_.end()) {
    for (int k = 1; k <= p->second->n_fork; ++k) {
      FinishedRequest f;
      f.id = id;
      f.index = k;
      f.reason = FinishReason::kAbort;
      f.n_prompt = p->second->n_prompt;
      pending_finished_.push_back(std::move(f));
    }
  }
  for (int k = 0; k < n; ++k) {
    auto it = seqs_.find(seq_key(id, k));
    if (it == seqs_.end()) continue;
    it->second->n_fork = 0;  // unforked samples are dropped with their parent
    finish(it->second.get(), FinishReason::kAbort, nullptr);
  }
  groups_.erase(id);
  return true;
}

bool Engine::stop_sample(const std::string& id, int index) {
  auto it = seqs_.find(seq_key(id, index));
  if (it == seqs_.end()) return false;
  Sequence* s = it->second.get();
  if (s->n_fork > 0) return false;  // its samples are not forked yet: nothing was generated
  finish(s, FinishReason::kStop, nullptr);
  return true;
}

void Engine::free_tables(Sequence* s) {
  for (auto& t : s->tables) blocks_->free(t);
  std::fill(s->released.begin(), s->released.end(), 0);
}

void Engine::release_out_of_window(Sequence* s) {
  const int bs = cfg_.block_size;
  for (int g = 0; g < n_groups_; ++g) {
    const int w = kv_->layout().group_window[g];
    if (w <= 0) continue;
    // Future queries are at positions >= n_computed and see keys > q - w.
    const int64_t lo = s->n_computed - w + 1;
    if (lo <= 0) continue;
    const size_t dead = std::min(static_cast<size_t>(lo / bs), s->tables[g].size());
    for (size_t i = s->released[g]; i < dead; ++i) blocks_->release_entry(s->tables[g], i);
    s->released[g] = std::max(s->released[g], dead);
  }
}

size_t Engine::page_floats() const {
  return static_cast<size_t>(kv_->layout().layers_per_group) * cfg_.block_size * (kv_->k_dim() + kv_->v_dim());
}

void Engine::swap_out(Sequence* s) {
  const int bs = cfg_.block_size;
  const int L = kv_->layout().layers_per_group;
  size_t n_pages = 0;
  for (const auto& t : s->tables)
    for (int32_t b : t) n_pages += b >= 0;
  s->swap.resize(n_pages * page_floats());
  s->swap_present.assign(n_groups_, {});
  float* dst = s->swap.data();
  const size_t kn = static_cast<size_t>(bs) * kv_->k_dim(), vn = static_cast<size_t>(bs) * kv_->v_dim();
  for (int g = 0; g < n_groups_; ++g)
    for (int32_t b : s->tables[g]) {
      s->swap_present[g].push_back(b >= 0);
      if (b < 0) continue;
      for (int slot = 0; slot < L; ++slot) {
        std::copy(kv_->k_block(slot, b), kv_->k_block(slot, b) + kn, dst);
        dst += kn;
        std::copy(kv_->v_block(slot, b), kv_->v_block(slot, b) + vn, dst);
        dst += vn;
      }
    }
  s->swap_released = s->released;
  swap_used_ += s->swap.size() * sizeof(float);
  s->swapped = true;
  ++stats_.n_swap_outs;
}

// Restores a swapped-out sequence's pages (and room for n_new more tokens);
// false (nothing changed) if the free pages do not suffice.
bool Engine::swap_in(Sequence* s, int64_t n_new) {
  const int bs = cfg_.block_size;
  const int L = kv_->layout().layers_per_group;
  int64_t need = 0;
  for (const auto& pr : s->swap_present)
    for (char p : pr) need += p;
  const int64_t entries = static_cast<int64_t>(s->swap_present[0].size());
  need += std::max<int64_t>(0, (s->n_computed + n_new + bs - 1) / bs - entries) * n_groups_;
  if (need > blocks_->n_free()) return false;
  const float* src = s->swap.data();
  const size_t kn = static_cast<size_t>(bs) * kv_->k_dim(), vn = static_cast<size_t>(bs) * kv_->v_dim();
  for (int g = 0; g < n_groups_; ++g) {
    auto& t = s->tables[g];
    t.clear();
    for (char present : s->swap_present[g]) {
      if (!present) {
        t.push_back(-1);
        continue;
      }
      blocks_->allocate(t, 1);
      const int32_t b = t.back();
      for (int slot = 0; slot < L; ++slot) {
        std::copy(src, src + kn, kv_->k_block(slot, b));
        src += kn;
        std::copy(src, src + vn, kv_->v_block(slot, b));
        src += vn;
      }
    }
  }
  s->released = s->swap_released;
  swap_used_ -= s->swap.size() * sizeof(float);
  std::vector<float>().swap(s->swap);
  s->swap_present.clear();
  s->swapped = false;
  ++stats_.n_swap_ins;
  return true;
}

void Engine::preempt(Sequence* s) {
  if (cfg_.preempt_swap && s->holds_blocks() && s->n_computed > 0) {
    size_t n_pages = 0;
    for (const auto& t : s->tables)
      for (int32_t b : t) n_pages += b >= 0;
    if (swap_used_ + n_pages * page_floats() * sizeof(float) <= cfg_.swap_space_bytes) swap_out(s);
  }
  free_tables(s);
  s->hashes.clear();
  if (!s->swapped) s->n_computed = 0;
  s->running = false;
  running_.erase(std::find(running_.begin(), running_.end(), s));
  insert_sorted(waiting_, s);
  ++s->n_preemptions;
  ++stats_.n_preemptions;
}

bool Engine::grow_blocks(Sequence* s, int64_t n_tokens) {
  const int bs = cfg_.block_size;
  const int64_t need =
      std::max<int64_t>(0, (n_tokens + bs - 1) / bs - static_cast<int64_t>(s->tables[0].size()));
  // Copy-on-write: the partial block receiving the first new token may be
  // shared with forked samples; full blocks are never written again.
  const size_t wb = static_cast<size_t>(s->n_computed / bs);
  const int filled = static_cast<int>(s->n_computed % bs);
  int n_cow = 0;
  for (const auto& t : s->tables) n_cow += filled != 0 && wb < t.size() && t[wb] >= 0 && blocks_->ref_count(t[wb]) > 1;
  if (need * n_groups_ + n_cow > blocks_->n_free()) return false;
  for (auto& t : s->tables) {
    if (filled != 0 && wb < t.size() && t[wb] >= 0 && blocks_->ref_count(t[wb]) > 1) {
      const int32_t old = blocks_->make_private(t, wb);
      kv_->copy_block(old, t[wb], filled);
      ++stats_.n_cow_copies;
    }
    if (!blocks_->allocate(t, static_cast<int>(need))) return false;  // cannot happen: checked above
  }
  return true;
}

// Longest reusable prefix: k leading full blocks whose pages are cached in
// every group that still needs them (sliding groups only need the blocks
// within the window of position k * block_size).
int Engine::match_cached_prefix(Sequence* s) {
  const int bs = cfg_.block_size;
  const int64_t n_tokens = static_cast<int64_t>(s->tokens.size());
  const int max_blocks = static_cast<int>((n_tokens - 1) / bs);  // leave >= 1 token to compute
  std::vector<uint64_t> hashes;
  std::vector<std::vector<int32_t>> found(n_groups_);
  uint64_t parent = 0;
  for (int i = 0; i < max_blocks; ++i) {
    const int32_t* tk = s->tokens.data() + static_cast<int64_t>(i) * bs;
    const uint64_t h = BlockManager::chain_hash(parent, tk, bs);
    bool any = false;
    for (int g = 0; g < n_groups_; ++g) {
      found[g].push_back(blocks_->lookup(BlockManager::group_key(h, g), parent, tk));
      any |= found[g].back() >= 0;
    }
    if (!any) break;
    hashes.push_back(h);
    parent = h;
  }
  auto first_needed = [&](int g, int k) -> int {
    const int w = kv_->layout().group_window[g];
    if (w <= 0) return 0;
    const int64_t lo = static_cast<int64_t>(k) * bs - w + 1;
    return lo <= 0 ? 0 : static_cast<int>(lo / bs);
  };
  int k = static_cast<int>(hashes.size());
  for (; k > 0; --k) {
    bool ok = true;
    for (int g = 0; g < n_groups_ && ok; ++g)
      for (int i = first_needed(g, k); i < k && ok; ++i) ok = found[g][i] >= 0;
    if (ok) break;
  }
  for (int g = 0; g < n_groups_; ++g) {
    const int from = first_needed(g, k);
    for (int i = 0; i < k; ++i) {
      if (i < from) {
        s->tables[g].push_back(-1);
      } else {
        blocks_->acquire(found[g][i]);
        s->tables[g].push_back(found[g][i]);
      }
    }
    s->released[g] = static_cast<size_t>(from);
  }
  s->hashes.assign(hashes.begin(), hashes.begin() + k);
  return k;
}

int64_t Engine::chunk_cap(const Sequence* s, int64_t budget) const {
  return s->needs_prompt_rows() ? std::min<int64_t>(budget, kPromptLogprobChunk) : budget;
}

void Engine::sample_into(Sequence* s, float* lg, StepOutput* out) {
  const int V = model_.config().n_vocab;
  double lse = 0;
  if (s->want_logprobs) {
    // log-sum-exp of the raw logits, before sampling modifies them in place.
    lse = log_sum_exp_row(lg, V);
    raw_.assign(lg, lg + V);
  }
  const int32_t tok = s->sampler->sample(lg, V);
  s->sampler->accept(tok);
  s->tokens.push_back(tok);
  ++stats_.n_generated_tokens;
  float lp = std::numeric_limits<float>::quiet_NaN();
  if (s->want_logprobs) {
    lp = static_cast<float>(raw_[tok] - lse);
    s->logprobs.push_back(lp);
  }
  TopLogprobs top;
  if (s->top_logprobs > 0) top = top_k_logprobs(raw_.data(), V, s->top_logprobs, lse);
  out->tokens.push_back({s->id, s->index, tok, lp, std::move(top), s->n_output() == 1 ? s->queue_seconds : -1.0});
  if (std::find(s->stop.begin(), s->stop.end(), tok) != s->stop.end())
    finish(s, FinishReason::kStop, out);
  else if (s->n_output() >= s->max_tokens || static_cast<int64_t>(s->tokens.size()) >= max_seq_len_)
    finish(s, FinishReason::kLength, out);
}

// The parent just computed the whole prompt: samples 1..n-1 start from its
// KV blocks (shared, reference-counted) and its last-token logits.
void Engine::fork_samples(Sequence* p, const float* logits, StepOutput* out) {
  const int V = model_.config().n_vocab;
  std::vector<float> row(V);
  Group& g = groups_[p->id];
  for (int k = 1; k <= p->n_fork; ++k) {
    auto c = std::make_unique<Sequence>();
    c->id = p->id;
    c->index = k;
    c->sampling = p->sampling;
    c->sampling.seed = p->sampling.seed + static_cast<uint64_t>(k);
    c->tokens = p->tokens;
    c->n_prompt = p->n_prompt;
    c->n_computed = p->n_computed;
    c->tables = p->tables;
    for (const auto& t : c->tables) blocks_->share(t);
    c->released = p->released;
    c->hashes = p->hashes;
    c->cache = std::make_unique<PagedKvCache>(*kv_, c->tables);
    c->sampler = std::make_unique<Sampler>(c->sampling);
    c->sampler->use_scratch(&sampler_scratch_);
    for (int32_t t : c->tokens) c->sampler->accept(t);
    c->max_tokens = p->max_tokens;
    c->stop = p->stop;
    c->want_logprobs = p->want_logprobs;
    c->top_logprobs = p->top_logprobs;
    c->priority = p->priority;
    c->arrival = p->arrival;
    c->n_cached_prompt = p->n_cached_prompt;
    c->t_arrival = p->t_arrival;
    c->queue_seconds = p->queue_seconds;
    c->running = true;
    Sequence* cs = c.get();
    seqs_.emplace(seq_key(c->id, k), std::move(c));
    ++g.live;
    insert_sorted(running_, cs);
    std::copy(logits, logits + V, row.begin());
    sample_into(cs, row.data(), out);
  }
  p->n_fork = 0;
}

void Engine::register_full_blocks(Sequence* s) {
  if (!blocks_->prefix_caching()) return;
  const int bs = cfg_.block_size;
  const size_t n_full = static_cast<size_t>(s->n_computed / bs);
  while (s->hashes.size() < n_full) {
    const size_t i = s->hashes.size();
    const uint64_t parent = i == 0 ? 0 : s->hashes[i - 1];
    const int32_t* tk = s->tokens.data() + i * bs;
    const uint64_t h = BlockManager::chain_hash(parent, tk, bs);
    for (int g = 0; g < n_groups_; ++g)
      if (s->tables[g][i] >= 0) blocks_->register_block(s->tables[g][i], BlockManager::group_key(h, g), parent, tk);
    s->hashes.push_back(h);
  }
}

Result<StepOutput> Engine::step() {
  const double t0 = now_seconds();
  StepOutput out;
  out.finished = std::move(pending_finished_);
  pending_finished_.clear();
  if (!has_work()) return out;

  struct Sched {
    Sequence* s;
    int64_t n;
  };
  std::vector<Sched> sched;
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;

  // 1. Running sequences, in order; preempt from the back when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()) - s->n_computed, chunk_cap(s, budget));
    bool self_preempted = false;
    while (!grow_blocks(s, s->n_computed + n)) {
      Sequence* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // s was the last running sequence
    sched.push_back({s, n});
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences (FCFS within priority), unless we just had to preempt.
  // Slots: running sequences plus the samples their unforked prompts will
  // fork (a request with n samples occupies n slots after its prompt).
  int slots = 0;
  for (const Sequence* r : running_) slots += 1 + r->n_fork;
  while (!preempted && budget > 0 && !waiting_.empty() && slots < cfg_.max_num_seqs) {
    Sequence* s = waiting_.front();
    if (slots > 0 && slots + 1 + s->n_fork > cfg_.max_num_seqs) break;  // a lone request may exceed it
    const int64_t n_tokens = static_cast<int64_t>(s->tokens.size());
    if (s->swapped) {
      if (!swap_in(s, std::min<int64_t>(n_tokens - s->n_computed, chunk_cap(s, budget)))) break;
    } else if (!s->holds_blocks() && blocks_->prefix_caching() && !s->needs_prompt_rows()) {
      s->n_computed = static_cast<int64_t>(match_cached_prefix(s)) * cfg_.block_size;
    }
    const int64_t n = std::min<int64_t>(n_tokens - s->n_computed, chunk_cap(s, budget));
    if (!grow_blocks(s, s->n_computed + n)) {
      free_tables(s);  // hits go back to the cache; retry next step
      s->hashes.clear();
      s->n_computed = 0;
      break;
    }
    if (blocks_->prefix_caching()) blocks_->record_query(n_tokens - 1, s->n_computed);
    if (s->n_cached_prompt < 0) {
      s->n_cached_prompt = s->n_computed;
      s->queue_seconds = now_seconds() - s->t_arrival;
    }
    waiting_.erase(waiting_.begin());
    s->running = true;
    insert_sorted(running_, s);
    slots += 1 + s->n_fork;
    sched.push_back({s, n});
    budget -= n;
  }
  if (sched.empty()) {
    out.seconds = now_seconds() - t0;
    return out;
  }

  // 3. One ragged forward pass over every scheduled token.
  std::vector<SeqBatch> batch;
  batch.reserve(sched.size());
  int n_logits = 0;
  for (const Sched& sc : sched) {
    Sequence* s = sc.s;
    s->cache->sync();
    SeqBatch b;
    b.tokens = s->tokens.data() + s->n_computed;
    b.n = sc.n;
    b.pos0 = s->n_computed;
    b.cache = s->cache.get();
    b.want_logits = s->n_computed + sc.n == static_cast<int64_t>(s->tokens.size());
    b.all_logits = s->needs_prompt_rows();
    n_logits += b.all_logits ? static_cast<int>(sc.n) : b.want_logits;
    batch.push_back(b);
    out.n_batched_tokens += sc.n;
  }
  const int V = model_.config().n_vocab;
  if (logits_.size() < static_cast<size_t>(n_logits) * V) logits_.resize(static_cast<size_t>(n_logits) * V);
  EMBER_RETURN_IF_ERROR(fwd_->forward_ragged(batch.data(), static_cast<int>(batch.size()), logits_.data()));

  // 4. Advance, cache full blocks, sample where a sequence reached its end.
  int row = 0;
  for (size_t i = 0; i < sched.size(); ++i) {
    Sequence* s = sched[i].s;
    const int64_t pos0 = s->n_computed;
    s->n_computed += sched[i].n;
    register_full_blocks(s);
    release_out_of_window(s);
    if (batch[i].all_logits) {
      // Row j (position pos0 + j) predicts the token at pos0 + j + 1.
      PromptLogprobEvent ev;
      ev.id = s->id;
      ev.first = s->n_prompt_lp_done;
      for (int64_t j = 0; j < sched[i].n; ++j) {
        const int64_t q = pos0 + j + 1;
        if (q != s->n_prompt_lp_done || q >= s->n_prompt) continue;
        const float* lg = logits_.data() + static_cast<size_t>(row + j) * V;
        const double lse = log_sum_exp_row(lg, V);
        ev.logprobs.push_back(static_cast<float>(lg[s->tokens[q]] - lse));
        ev.top.push_back(s->prompt_logprobs > 0 ? top_k_logprobs(lg, V, s->prompt_logprobs, lse) : TopLogprobs{});
        ++s->n_prompt_lp_done;
      }
      if (!ev.logprobs.empty()) out.prompt_logprobs.push_back(std::move(ev));
      row += static_cast<int>(sched[i].n) - 1;  // the last row is this slice's sampling row
      if (!batch[i].want_logits) {
        ++row;
        continue;
      }
    } else if (!batch[i].want_logits) {
      continue;
    }
    float* lg = logits_.data() + static_cast<size_t>(row++) * V;
    if (s->n_fork > 0) fork_samples(s, lg, &out);
    sample_into(s, lg, &out);
  }
  out.n_seqs = static_cast<int>(sched.size());
  out.seconds = now_seconds() - t0;
  ++stats_.n_steps;
  stats_.n_computed_tokens += out.n_batched_tokens;
  stats_.last_step_tokens = out.n_batched_tokens;
  stats_.last_step_seconds = out.seconds;
  stats_.total_step_seconds += out.seconds;
  return out;
}

EngineStats Engine::stats() const {
  EngineStats st = stats_;
  st.n_running = static_cast<int>(running_.size());
  st.n_waiting = static_cast<int>(waiting_.size());
  st.n_swapped = 0;
  for (const Sequence* s : waiting_) st.n_swapped += s->swapped;
  st.swap_bytes_used = static_cast<int64_t>(swap_used_);
  st.blocks_used = blocks_->n_used();
  st.blocks_free = blocks_->n_free();
  st.blocks_cached_free = blocks_->n_cached_free();
  st.prefix = blocks_->counters();
  st.kv_slots_allocated = 0;
  st.kv_slots_filled = 0;
  for (const Sequence* s : running_) {
    for (const auto& t : s->tables)
      for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] < 0) continue;
        st.kv_slots_allocated += cfg_.block_size;
        st.kv_slots_filled += std::clamp<int64_t>(s->n_computed - static_cast<int64_t>(i) * cfg_.block_size, 0,
                                                  cfg_.block_size);
      }
  }
  return st;
}

Status Engine::check_invariants() const {
  std::vector<const std::vector<int32_t>*> tables;
  for (const auto& [id, s] : seqs_) {
    for (const auto& t : s->tables) {
      tables.push_back(&t);
      if (t.size() != s->tables[0].size()) return Status::errorf("sequence '{}': group tables differ in length", id);
    }
    if (s->swapped) {
      if (s->running || s->holds_blocks()) return Status::errorf("swapped sequence '{}' is running or holds blocks", id);
      continue;
    }
    const int64_t covered = static_cast<int64_t>(s->tables[0].size()) * cfg_.block_size;
    if (s->n_computed > covered)
      return Status::errorf("sequence '{}': {} computed tokens but blocks for {}", id, s->n_computed, covered);
    if (!s->running && (s->holds_blocks() || s->n_computed != 0))
      return Status::errorf("waiting sequence '{}' holds blocks", id);
    if (s->n_computed > static_cast<int64_t>(s->tokens.size()))
      return Status::errorf("sequence '{}': computed past its tokens", id);
  }
  if (seqs_.size() != running_.size() + waiting_.size()) return Status::error("sequence queues out of sync");
  size_t swap_bytes = 0;
  for (const auto& [id, s] : seqs_) swap_bytes += s->swap.size() * sizeof(float);
  if (swap_bytes != swap_used_) return Status::errorf("swap space accounting: {} held, {} counted", swap_bytes, swap_used_);
  int live = 0;
  for (const auto& [id, g] : groups_) {
    if (g.live < 1 || g.live > g.n) return Status::errorf("request '{}': {} live samples of {}", id, g.live, g.n);
    live += g.live;
  }
  if (live != static_cast<int>(seqs_.size())) return Status::error("request groups out of sync with sequences");
  return blocks_->check(tables);
}

}  // namespace ember
