// Serving engine: requests, and the step that drives scheduler, model runner
// and output processor; see engine.h.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "engine/cpu_model_runner.h"
#include "engine/speculative/draft_proposer.h"

namespace ember {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::string seq_key(const std::string& id, int index) { return fmt::format("{}\x1f{}", id, index); }
}  // namespace

int64_t Engine::kv_sequences_of(int64_t len) const {
  const KvLayout& l = kv_->layout();
  const int bs = kv_->block_size();
  const int64_t full = (len + bs - 1) / bs;
  int64_t per_seq = 0;
  for (int g = 0; g < l.n_groups; ++g) {
    const int w = l.group_window[g];
    per_seq += w > 0 ? std::min<int64_t>(full, (w + bs - 2) / bs + 1) : full;
  }
  return per_seq > 0 ? stats_.blocks_total / per_seq : 0;
}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, ThreadPool& pool, const EngineConfig& cfg) {
  if (cfg.max_num_batched_tokens < 1 || cfg.max_num_batched_tokens > (1 << 16))
    return Status::errorf("max_num_batched_tokens {} out of range [1, 65536]", cfg.max_num_batched_tokens);
  if (!model.config().head_tokens.empty())
    return Status::error("a model with a truncated output head is a draft, not a target");
  if (cfg.spec.uses_draft_model()) EMBER_RETURN_IF_ERROR(cfg.spec.validate().with_context("speculative decoding"));
  auto backend = make_backend(cfg.backend, pool);
  if (!backend) return backend.status();
  EMBER_RETURN_IF_ERROR(model.check_backend(*backend.value()));
  // A device backend holds the weights from here on (before the KV pages
  // take the rest of its memory): a model too large is an error now.
  const std::vector<const TensorView*> weights = model.backend_weights();
  EMBER_RETURN_IF_ERROR(backend.value()->upload_weights(weights.data(), static_cast<int64_t>(weights.size()))
                            .with_context(fmt::format("uploading the weights to the {} backend", backend.value()->name())));
  auto runner =
      std::make_unique<CpuModelRunner>(model, std::move(backend.value()), cfg.max_num_batched_tokens, cfg.kv_types);
  CpuModelRunner* target_runner = runner.get();
  auto e = build(std::move(runner), cfg, true);
  if (!e) return e;
  e.value()->pool_ = &pool;
  e.value()->output_->set_slots(pool.size());
  if (!cfg.spec.uses_draft_model()) return e;
  const DraftKvBase base{cfg.block_size, cfg.kv_cache_bytes, cfg.num_kv_blocks, cfg.max_num_batched_tokens,
                         cfg.kv_types, cfg.backend};
  auto p = make_draft_proposer(cfg.spec, model, pool, base, {target_runner->kv_pool(), e.value()->kv_.get()});
  if (!p) return p.status().with_context("speculative decoding");
  e.value()->spec_->set_proposer(std::move(p.value()));
  return e;
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg) {
  return build(std::move(runner), cfg, false);
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg,
                                               const Model& target, ThreadPool& pool) {
  if (cfg.spec.uses_draft_model()) {
    EMBER_RETURN_IF_ERROR(cfg.spec.validate().with_context("speculative decoding"));
    if (cfg.spec.method != SpecMethod::kDraft || !cfg.spec.draft_model->shard().whole())
      return Status::errorf("speculative decoding: --speculative-method {} drafts with the target's own layers, which "
                            "tensor / pipeline parallelism splits over the ranks; use a draft model "
                            "(--speculative-method draft --speculative-model PATH), which runs whole on rank 0",
                            spec_method_name(cfg.spec.method));
  }
  auto e = build(std::move(runner), cfg, true);
  if (!e) return e;
  if (!cfg.spec.uses_draft_model()) return e;
  // The draft runs whole on this rank's CPU (an empty backend factory).
  const DraftKvBase base{cfg.block_size, cfg.kv_cache_bytes, cfg.num_kv_blocks, cfg.max_num_batched_tokens,
                         cfg.kv_types, BackendFactory{}};
  // No KV donor: the target's pages on this rank hold only its shard.
  auto p = make_draft_proposer(cfg.spec, target, pool, base, KvDonor{});
  if (!p) return p.status().with_context("speculative decoding");
  e.value()->spec_->set_proposer(std::move(p.value()));
  return e;
}

Result<std::unique_ptr<Engine>> Engine::build(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg,
                                              bool draft_follows) {
  if (cfg.max_num_batched_tokens < 1 || cfg.max_num_batched_tokens > (1 << 16))
    return Status::errorf("max_num_batched_tokens {} out of range [1, 65536]", cfg.max_num_batched_tokens);
  if (cfg.max_num_batched_tokens > runner->max_batch_tokens())
    return Status::errorf("max_num_batched_tokens {} exceeds the model runner's batch capacity {}",
                          cfg.max_num_batched_tokens, runner->max_batch_tokens());
  if (cfg.max_num_seqs < 1 || cfg.max_num_seqs > 4096)
    return Status::errorf("max_num_seqs {} out of range [1, 4096]", cfg.max_num_seqs);
  if (cfg.max_model_len < 0) return Status::errorf("max_model_len {} is negative", cfg.max_model_len);
  if (!(cfg.batch_window_s >= 0 && cfg.batch_window_s <= 3600))
    return Status::errorf("batch window {} s out of range [0, 3600]", cfg.batch_window_s);
  EMBER_RETURN_IF_ERROR(cfg.spec.validate().with_context("speculative decoding"));
  if (cfg.spec.uses_draft_model() && !draft_follows)
    return Status::error("speculative decoding: a draft-model proposer needs the engine over a Model "
                         "(Engine::create(model, pool, cfg))");
  auto e = std::unique_ptr<Engine>(new Engine(cfg));
  e->pipelined_ = runner->max_in_flight() > 1 && cfg.spec.method == SpecMethod::kNone;
  const KvSpec spec = runner->kv_spec();
  const KvLayout layout = KvLayout::from_spec(spec, cfg.sliding_window_release);
  // The pool sizes itself: what the KV format keeps outside the pages for
  // max_num_seqs sequences and steps of max_num_batched_tokens comes out of
  // the budget first.
  const KvPoolLimits limits{cfg.max_num_seqs, cfg.max_num_batched_tokens};
  auto n_blocks = runner->allocate_kv(layout, cfg.block_size, cfg.kv_cache_bytes, cfg.num_kv_blocks, limits);
  if (!n_blocks) return n_blocks.status();
  const KvMemory mem = runner->kv_memory();
  e->page_bytes_ = mem.page_bytes;
  const int64_t n_swap_pages =
      cfg.preempt_swap && e->page_bytes_ > 0 ? static_cast<int64_t>(cfg.swap_space_bytes / e->page_bytes_) : 0;
  e->kv_ = std::make_unique<KvCacheManager>(layout, cfg.block_size, n_blocks.value(), cfg.enable_prefix_caching,
                                            n_swap_pages);
  e->kv_->set_event_log(cfg.kv_events.get());
  SchedulerConfig sc;
  sc.max_num_batched_tokens = cfg.max_num_batched_tokens;
  sc.max_num_seqs = cfg.max_num_seqs;
  sc.preempt_swap = cfg.preempt_swap;
  sc.policy = cfg.batching;
  sc.batch_window_s = cfg.batch_window_s;
  e->scheduler_ = std::make_unique<Scheduler>(sc, *e->kv_);
  int64_t len = cfg.max_model_len > 0 ? cfg.max_model_len : runner->n_ctx_train();
  if (len <= 0) len = int64_t{1} << 30;
  // A lone sequence must always fit: every group may hold all its positions.
  e->max_seq_len_ =
      std::min<int64_t>(len, static_cast<int64_t>(n_blocks.value()) / layout.n_groups * cfg.block_size);
  if (e->max_seq_len_ < 2)
    return Status::errorf("KV cache of {} pages is too small for {} layer groups", n_blocks.value(), layout.n_groups);
  e->n_vocab_ = runner->n_vocab();
  e->output_ = std::make_unique<OutputProcessor>(e->n_vocab_, e->max_seq_len_);
  e->spec_ = std::make_unique<Speculator>(cfg.spec, e->n_vocab_, e->max_seq_len_);
  e->runner_ = std::move(runner);
  e->stats_.blocks_total = n_blocks.value();
  e->stats_.kv_bytes_per_token = static_cast<int64_t>(kv_bytes_per_token(e->runner_->kv_spec()));
  e->stats_.kv_tokens_total = static_cast<int64_t>(n_blocks.value()) / layout.n_groups * cfg.block_size;
  e->stats_.kv_tail_reserve_bytes = mem.tail_reserve_bytes;
  return e;
}

Status Engine::add_request(const std::string& id, RequestParams p) {
  if (groups_.count(id)) return Status::errorf("request id '{}' is already in use", id);
  if (p.n < 1 || p.n > 256) return Status::errorf("request '{}': n must be in [1, 256] (got {})", id, p.n);
  if (p.prompt.empty()) return Status::errorf("request '{}': empty prompt", id);
  if (stats_.kv_tail_reserve_bytes > 0 && p.n > cfg_.max_num_seqs)
    return Status::errorf("request '{}': n = {} samples exceed max_num_seqs {}, the sequences the KV format's "
                          "tails reserve is sized for",
                          id, p.n, cfg_.max_num_seqs);
  const int V = n_vocab_;
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
  if (p.num_speculative_tokens < -1 || p.num_speculative_tokens > kMaxSpecTokens)
    return Status::errorf("request '{}': num_speculative_tokens must be in [-1, {}] (got {})", id, kMaxSpecTokens,
                          p.num_speculative_tokens);
  if (p.num_speculative_tokens > 0 && !spec_->enabled())
    return Status::errorf("request '{}': num_speculative_tokens {} asked, but speculative decoding is not enabled "
                          "(start with a speculative method)",
                          id, p.num_speculative_tokens);
  const int64_t n = static_cast<int64_t>(p.prompt.size());
  if (n >= max_seq_len_)
    return Status::errorf(
        "request '{}': prompt of {} tokens can never fit: at most {} tokens per sequence (KV cache of {} pages of {} "
        "tokens in {} layer groups, max_model_len {})",
        id, n, max_seq_len_ - 1, kv_->n_blocks(), cfg_.block_size, kv_->n_groups(), cfg_.max_model_len);
  auto r = std::make_unique<Request>();
  r->seq_id = next_seq_id_++;
  r->id = id;
  r->n_fork = p.n - 1;
  r->sampling = p.sampling;
  r->tokens = std::move(p.prompt);
  r->n_prompt = n;
  output_->init_sampler(*r);
  if (p.logits_processor) r->logits_processor = p.logits_processor->clone();
  r->max_tokens = p.max_tokens;
  r->stop_token_ids = std::move(p.stop_token_ids);
  r->priority = p.priority;
  r->want_logprobs = p.logprobs || p.top_logprobs > 0;
  r->top_logprobs = p.top_logprobs;
  r->prompt_logprobs = p.prompt_logprobs;
  r->num_speculative_tokens = p.num_speculative_tokens;
  r->arrival = next_arrival_++;
  r->t_arrival = now_seconds();
  kv_->add(*r);
  scheduler_->add_waiting(r.get());
  seqs_.emplace(seq_key(id, 0), std::move(r));
  groups_[id] = Group{p.n, 1};
  return Status::ok();
}

void Engine::finish(Request* r, FinishReason reason, StepOutput* out) {
  FinishedRequest f;
  f.id = r->id;
  f.index = r->index;
  f.reason = reason;
  f.output.assign(r->tokens.begin() + r->n_prompt, r->tokens.end());
  f.logprobs = std::move(r->logprobs);
  f.n_forced = r->n_forced;
  f.n_prompt = r->n_prompt;
  f.n_cached_prompt = std::max<int64_t>(0, r->n_cached_prompt);
  f.queue_seconds = r->queue_seconds;
  f.n_preemptions = r->n_preemptions;
  spec_->release(*r);
  kv_->remove(*r);
  scheduler_->remove(r);
  if (out) out->finished.push_back(std::move(f));
  else pending_finished_.push_back(std::move(f));
  auto g = groups_.find(r->id);
  if (--g->second.live == 0 && r->n_fork == 0) groups_.erase(g);
  auto it = seqs_.find(seq_key(r->id, r->index));
  if (r->n_in_flight > 0) {  // its step is in flight: kept until collected (step_pipelined)
    r->gone = true;
    zombies_.push_back(std::move(it->second));
  }
  seqs_.erase(it);  // destroys r unless kept
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
  Request* r = it->second.get();
  if (r->n_fork > 0) return false;  // its samples are not forked yet: nothing was generated
  finish(r, FinishReason::kStop, nullptr);
  return true;
}

void Engine::sample_into(Request* r, float* logits, StepOutput* out) {
  Choice c;
  output_->choose(*r, logits, 0, &c);
  commit_into(r, c, out);
}

void Engine::commit_into(Request* r, Choice& c, StepOutput* out) {
  FinishReason reason = output_->commit(*r, c, &out->tokens);
  ++stats_.n_generated_tokens;
  if (reason == FinishReason::kNone) {
    output_->forced(*r, &forced_);
    reason = append_forced(r, out);
  }
  if (reason != FinishReason::kNone) finish(r, reason, out);
}

// First logits row of every schedule entry, in the order execute() wrote
// them: a speculating entry has n_tokens rows (verified), a prompt-logprob
// entry n_tokens rows (the last is its sampling row when it wants logits),
// any other entry one row when it wants logits and none otherwise.
void Engine::index_rows(const SchedulerOutput& so) {
  row0_.resize(so.scheduled.size());
  int64_t row = 0;
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& sr = so.scheduled[i];
    row0_[i] = row;
    if (sr.n_spec > 0 || sr.all_logits) {
      row += sr.n_tokens;
    } else if (sr.want_logits) {
      ++row;
    }
  }
}

// The plain sampling rows (not speculating, not prompt-logprob rows, which
// step() reads first, not fork parents, whose samples fork from the raw
// row). Choosing a token touches only its request's sampler, logits
// processor and row, so the rows are independent and the order of the calls
// does not matter (each sampler has its own RNG).
void Engine::choose_rows(const SchedulerOutput& so, float* logits) {
  const size_t n = so.scheduled.size();
  chosen_.assign(n, 0);
  if (choices_.size() < n) choices_.resize(n);
  choose_rows_.clear();
  for (size_t i = 0; i < n; ++i) {
    const ScheduledRequest& sr = so.scheduled[i];
    if (sr.n_spec > 0 || sr.all_logits || !sr.want_logits || sr.req->n_fork > 0 || sr.req->gone) continue;
    choose_rows_.push_back(i);
  }
  if (pool_ == nullptr || pool_->size() < 2 || choose_rows_.size() < 2) return;
  // One scratch slot per pool thread (set_slots(pool.size()) at create).
  pool_->parallel_for(static_cast<int64_t>(choose_rows_.size()), 1, [&](int64_t b, int64_t e, int ith) {
    for (int64_t j = b; j < e; ++j) {
      const size_t i = choose_rows_[static_cast<size_t>(j)];
      output_->choose(*so.scheduled[i].req, logits + static_cast<size_t>(row0_[i]) * n_vocab_, ith, &choices_[i]);
    }
  });
  for (const size_t i : choose_rows_) chosen_[i] = 1;
}

// Forced-token jump (structured output): the tokens in forced_ (what r's
// logits processor forces after its last token) join r unsampled; the
// scheduler computes them with the next step's slice (num_tokens -
// num_computed_tokens > 1), like a prompt chunk.
FinishReason Engine::append_forced(Request* r, StepOutput* out) {
  const int64_t n0 = r->n_forced;
  const FinishReason reason = output_->append_forced(*r, forced_, &out->tokens);
  forced_.clear();
  stats_.n_forced_tokens += r->n_forced - n0;
  stats_.n_generated_tokens += r->n_forced - n0;
  return reason;
}

// The parent just computed the whole prompt: samples 1..n-1 start from its
// KV blocks (shared, reference-counted) and its last-token logits.
void Engine::fork_samples(Request* p, const float* logits, StepOutput* out) {
  Group& g = groups_[p->id];
  fork_row_.resize(n_vocab_);
  for (int k = 1; k <= p->n_fork; ++k) {
    std::unique_ptr<Request> c = output_->fork(*p, k);
    c->seq_id = next_seq_id_++;
    kv_->add(*c);
    kv_->fork(*p, *c);
    Request* cs = c.get();
    seqs_.emplace(seq_key(c->id, k), std::move(c));
    ++g.live;
    scheduler_->add_running(cs);
    std::copy(logits, logits + n_vocab_, fork_row_.begin());
    sample_into(cs, fork_row_.data(), out);
  }
  p->n_fork = 0;
}

Result<StepOutput> Engine::step() {
  if (pipelined_) return step_pipelined();
  const double t0 = now_seconds();
  StepOutput out;
  out.finished = std::move(pending_finished_);
  pending_finished_.clear();
  if (!has_work()) return out;

  EMBER_RETURN_IF_ERROR(spec_->propose(scheduler_->running()));
  SchedulerOutput so = scheduler_->schedule();
  if (so.empty()) {
    out.seconds = now_seconds() - t0;
    return out;
  }
  // KV memory ops (copy-on-write, swap) and one ragged forward pass over
  // every scheduled token.
  spec_->before_verify(so.scheduled);
  const double t_exec = now_seconds();
  auto rows = runner_->execute(so);
  if (!rows) return rows.status();
  const double t_done = now_seconds();
  spec_->observe(so, t_done - t_exec);
  time_step(t0, t_exec, t_done, &out);
  process(so, rows.value(), &out);
  out.times.sample = now_seconds() - t_done;
  finish_step(t0, &out);
  return out;
}

// Pipelining (a runner with max_in_flight() > 1): steps are submitted
// while fewer than that are in flight, each over requests not in flight
// (at most ceil(live / depth) sequences, so the micro-batches stay even),
// and each call collects the oldest one and processes it as step() does.
// A request in flight sits the schedules out and is never preempted; one
// that ends meanwhile (abort, stop) is kept until its step is collected.
Result<StepOutput> Engine::step_pipelined() {
  const double t0 = now_seconds();
  StepOutput out;
  out.finished = std::move(pending_finished_);
  pending_finished_.clear();
  if (!has_work()) return out;
  const int depth = runner_->max_in_flight();
  while (static_cast<int>(in_flight_.size()) < depth) {
    const int live = static_cast<int>(scheduler_->running().size() + scheduler_->waiting().size());
    scheduler_->set_step_seq_cap(std::max(1, (live + depth - 1) / depth));
    SchedulerOutput so = scheduler_->schedule();
    if (so.empty()) break;
    for (const ScheduledRequest& sr : so.scheduled) sr.req->n_in_flight = sr.n_tokens;
    if (Status st = runner_->submit(so); !st) {
      in_flight_.push_back(std::move(so));
      drop_in_flight();
      return st;
    }
    in_flight_.push_back(std::move(so));
  }
  if (in_flight_.empty()) {
    out.seconds = now_seconds() - t0;
    return out;
  }
  const double t_collect = now_seconds();
  auto rows = runner_->collect();
  const double t_done = now_seconds();
  SchedulerOutput so = std::move(in_flight_.front());
  in_flight_.pop_front();
  for (const ScheduledRequest& sr : so.scheduled) sr.req->n_in_flight = 0;
  if (!rows) {
    in_flight_.push_front(std::move(so));
    drop_in_flight();
    return rows.status();
  }
  time_step(t0, t_collect, t_done, &out);
  process(so, rows.value(), &out);
  zombies_.erase(std::remove_if(zombies_.begin(), zombies_.end(),
                                [](const std::unique_ptr<Request>& r) { return r->n_in_flight == 0; }),
                 zombies_.end());
  out.times.sample = now_seconds() - t_done;
  finish_step(t0, &out);
  return out;
}

void Engine::time_step(double t0, double t_exec, double t_done, StepOutput* out) const {
  StepTimes& t = out->times;
  t.schedule = t_exec - t0;
  const double exec = t_done - t_exec;
  if (!runner_->measures_step_times()) {
    t.forward = exec;
    return;
  }
  static_cast<RunnerStepTimes&>(t) = runner_->last_step_times();
  t.inputs = std::min(t.inputs, exec);
  t.forward = std::min(t.forward, exec - t.inputs);
}

void Engine::drop_in_flight() {
  for (const SchedulerOutput& so : in_flight_)
    for (const ScheduledRequest& sr : so.scheduled) sr.req->n_in_flight = 0;
  in_flight_.clear();
  zombies_.clear();
}

void Engine::process(const SchedulerOutput& so, float* logits, StepOutput* out) {
  if (so.scheduled.empty()) return;
  out->n_batched_tokens = so.n_tokens;
  out->n_seqs = static_cast<int>(so.scheduled.size());

  // Advance, cache full blocks, sample where a request reached its end.
  const int V = n_vocab_;
  index_rows(so);
  choose_rows(so, logits);
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& sr = so.scheduled[i];
    Request* r = sr.req;
    if (r->gone) continue;  // ended while its step was in flight
    scheduler_->on_computed(sr);
    float* lg = logits + static_cast<size_t>(row0_[i]) * V;
    if (sr.n_spec > 0) {
      out->n_spec_tokens += sr.n_spec;
      verify(sr, lg, out);
      continue;
    }
    if (sr.all_logits) {
      output_->prompt_logprobs(*r, sr.pos0, sr.n_tokens, lg, &out->prompt_logprobs);
      lg += static_cast<size_t>(sr.n_tokens - 1) * V;  // the last row is this slice's sampling row
    }
    if (!sr.want_logits) continue;
    if (chosen_[i]) {
      commit_into(r, choices_[i], out);
      continue;
    }
    if (r->n_fork > 0) fork_samples(r, lg, out);
    sample_into(r, lg, out);
  }
}

void Engine::finish_step(double t0, StepOutput* out) {
  out->seconds = now_seconds() - t0;
  if (out->n_seqs == 0) return;
  ++stats_.n_steps;
  stats_.n_computed_tokens += out->n_batched_tokens;
  stats_.last_step_tokens = out->n_batched_tokens;
  stats_.last_step_seconds = out->seconds;
  stats_.total_step_seconds += out->seconds;
}

double Engine::seconds_until_admission() const { return scheduler_->seconds_until_admission(now_seconds()); }
void Engine::verify(const ScheduledRequest& sr, float* rows, StepOutput* out) {
  Request* r = sr.req;
  const Verification v = spec_->verify(*r, rows, *output_, &forced_, &out->tokens);
  stats_.n_generated_tokens += v.n_emitted;
  scheduler_->on_verified(sr);
  FinishReason reason = v.reason;
  if (reason == FinishReason::kNone) reason = append_forced(r, out);  // after on_verified: its KV slots are new
  if (reason != FinishReason::kNone) finish(r, reason, out);
}

EngineStats Engine::stats() const {
  EngineStats st = stats_;
  st.spec = spec_->counters();
  st.n_running = static_cast<int>(scheduler_->running().size());
  st.n_waiting = static_cast<int>(scheduler_->waiting().size());
  st.n_swapped = 0;
  for (const Request* r : scheduler_->waiting()) st.n_swapped += kv_->swapped(*r);
  st.swap_bytes_used = kv_->n_swap_pages_used() * static_cast<int64_t>(page_bytes_);
  const KvCacheCounters c = kv_->counters();
  st.n_swap_outs = c.n_swap_outs;
  st.n_swap_ins = c.n_swap_ins;
  st.n_cow_copies = c.n_cow_copies;
  st.prefix = c.prefix;
  st.n_preemptions = scheduler_->n_preemptions();
  st.blocks_used = kv_->n_used_blocks();
  st.blocks_free = kv_->n_free_blocks();
  st.blocks_cached_free = kv_->n_cached_free_blocks();
  const KvMemory mem = runner_->kv_memory();
  st.kv_tail_bytes = mem.tail_bytes;
  st.kv_tail_peak_bytes = mem.tail_peak_bytes;
  st.kv_slots_allocated = 0;
  st.kv_slots_filled = 0;
  const int bs = cfg_.block_size;
  for (const Request* r : scheduler_->running()) {
    for (const auto& t : kv_->tables(*r))
      for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] < 0) continue;
        st.kv_slots_allocated += bs;
        st.kv_slots_filled += std::clamp<int64_t>(r->num_computed_tokens - static_cast<int64_t>(i) * bs, 0, bs);
      }
  }
  return st;
}

Status Engine::check_invariants() const {
  std::vector<const Request*> live;
  for (const auto& [key, r] : seqs_) {
    live.push_back(r.get());
    if (kv_->swapped(*r)) {
      if (r->running()) return Status::errorf("swapped sequence '{}' is running", r->id);
      continue;
    }
    if (r->num_computed_tokens > kv_->capacity(*r))
      return Status::errorf("sequence '{}': {} computed tokens but blocks for {}", r->id, r->num_computed_tokens,
                            kv_->capacity(*r));
    if (!r->running() && (kv_->holds_blocks(*r) || r->num_computed_tokens != 0))
      return Status::errorf("waiting sequence '{}' holds blocks", r->id);
    if (r->num_computed_tokens > r->num_tokens()) return Status::errorf("sequence '{}': computed past its tokens", r->id);
  }
  if (seqs_.size() != scheduler_->running().size() + scheduler_->waiting().size())
    return Status::error("sequence queues out of sync");
  int n_live = 0;
  for (const auto& [id, g] : groups_) {
    if (g.live < 1 || g.live > g.n) return Status::errorf("request '{}': {} live samples of {}", id, g.live, g.n);
    n_live += g.live;
  }
  if (n_live != static_cast<int>(seqs_.size())) return Status::error("request groups out of sync with sequences");
  return kv_->check(live);
}

}  // namespace ember
