// Continuous-batching scheduler; see scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/check.h"

namespace ember {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* batching_policy_name(BatchingPolicy p) {
  switch (p) {
    case BatchingPolicy::kContinuous: return "continuous";
    case BatchingPolicy::kDynamic: return "dynamic";
    case BatchingPolicy::kStatic: return "static";
  }
  return "?";
}

Result<BatchingPolicy> parse_batching_policy(const std::string& name) {
  for (BatchingPolicy p : {BatchingPolicy::kContinuous, BatchingPolicy::kDynamic, BatchingPolicy::kStatic})
    if (name == batching_policy_name(p)) return p;
  return Status::errorf("unknown batching policy '{}' (expected continuous, dynamic or static)", name);
}

Scheduler::Scheduler(const SchedulerConfig& cfg, KvCacheManager& kv) : cfg_(cfg), kv_(kv) {}

bool Scheduler::before(const Request* a, const Request* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->arrival != b->arrival) return a->arrival < b->arrival;
  return a->index < b->index;
}

void Scheduler::insert_sorted(std::vector<Request*>& q, Request* r) {
  q.insert(std::upper_bound(q.begin(), q.end(), r, before), r);
}

void Scheduler::add_waiting(Request* r) {
  r->status = RequestStatus::kWaiting;
  insert_sorted(waiting_, r);
}

void Scheduler::add_running(Request* r) {
  r->status = RequestStatus::kRunning;
  if (cfg_.policy != BatchingPolicy::kContinuous) r->batch_id = batch_id_;  // forks join their parent's batch
  insert_sorted(running_, r);
}

void Scheduler::remove(Request* r) {
  auto& q = r->running() ? running_ : waiting_;
  auto it = std::find(q.begin(), q.end(), r);
  EMBER_CHECK_MSG(it != q.end(), "request is in neither scheduler queue");
  q.erase(it);
}

int64_t Scheduler::chunk_cap(const Request* r, int64_t budget) {
  return r->needs_prompt_rows() ? std::min<int64_t>(budget, kPromptLogprobChunk) : budget;
}

bool Scheduler::schedule_spec(Request* r, int64_t budget, std::vector<KvOp>* ops, int64_t* n) {
  if (r->spec_tokens.empty()) return false;
  const int64_t k = std::min<int64_t>(static_cast<int64_t>(r->spec_tokens.size()), budget - 1);
  if (k <= 0 || r->num_tokens() - r->num_computed_tokens != 1 || r->needs_prompt_rows() ||
      !kv_.allocate_slots(*r, 1, k, ops)) {
    r->spec_tokens.clear();  // never preempt for speculation
    return false;
  }
  r->spec_tokens.resize(static_cast<size_t>(k));
  *n = 1 + k;
  return true;
}

void Scheduler::preempt(Request* r, std::vector<KvOp>* ops) {
  r->spec_tokens.clear();
  bool swapped = false;
  if (cfg_.preempt_swap && kv_.holds_blocks(*r) && r->num_computed_tokens > 0) swapped = kv_.swap_out(*r, ops);
  kv_.free_blocks(*r);
  if (!swapped) r->num_computed_tokens = 0;
  running_.erase(std::find(running_.begin(), running_.end(), r));
  add_waiting(r);
  ++r->n_preemptions;
  ++n_preemptions_;
}

bool Scheduler::admissible(const Request* r) const {
  return cfg_.policy == BatchingPolicy::kContinuous || r->batch_id == batch_id_;
}

bool Scheduler::batch_open() const {
  if (!running_.empty()) return true;
  for (const Request* r : waiting_)
    if (r->batch_id == batch_id_) return true;  // preempted members
  return false;
}

bool Scheduler::may_start_batch(double now) const {
  if (waiting_.empty() || batch_open()) return false;
  if (cfg_.policy == BatchingPolicy::kStatic) return true;
  int slots = 0;
  double oldest = std::numeric_limits<double>::infinity();
  for (const Request* r : waiting_) {
    slots += 1 + r->n_fork;
    oldest = std::min(oldest, r->t_arrival);
  }
  return slots >= cfg_.max_num_seqs || now - oldest >= cfg_.batch_window_s;
}

void Scheduler::start_batch() {
  ++batch_id_;
  int slots = 0;
  for (Request* r : waiting_) {
    if (slots > 0 && slots + 1 + r->n_fork > cfg_.max_num_seqs) break;
    r->batch_id = batch_id_;
    slots += 1 + r->n_fork;
  }
}

double Scheduler::seconds_until_admission(double now) const {
  if (cfg_.policy == BatchingPolicy::kContinuous || waiting_.empty()) return 0;
  if (batch_open()) {
    for (const Request* r : waiting_)
      if (r->batch_id == batch_id_) return 0;
    return std::numeric_limits<double>::infinity();  // until the running batch finishes
  }
  if (may_start_batch(now)) return 0;
  double oldest = std::numeric_limits<double>::infinity();
  for (const Request* r : waiting_) oldest = std::min(oldest, r->t_arrival);
  return std::max(0.0, cfg_.batch_window_s - (now - oldest));
}

SchedulerOutput Scheduler::schedule() { return schedule_at(now_seconds()); }

SchedulerOutput Scheduler::schedule_at(double now) {
  SchedulerOutput out;
  struct Pick {
    Request* r;
    int64_t n;
  };
  std::vector<Pick> picks;
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;

  // 1. Running requests, in order; preempt from the back when blocks run out.
  // Requests whose previous step is still in flight (a pipelined runner)
  // sit this one out and are never preempted.
  const size_t seq_cap = step_seq_cap_ > 0 ? static_cast<size_t>(step_seq_cap_) : std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < running_.size() && budget > 0 && picks.size() < seq_cap;) {
    Request* r = running_[i];
    if (r->n_in_flight > 0) {
      ++i;
      continue;
    }
    int64_t n = std::min<int64_t>(r->num_tokens() - r->num_computed_tokens, chunk_cap(r, budget));
    if (schedule_spec(r, budget, &out.kv_ops, &n)) {
      picks.push_back({r, n});
      budget -= n;
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!kv_.allocate_slots(*r, n, 0, &out.kv_ops)) {
      auto last = std::find_if(running_.rbegin(), running_.rend(), [](const Request* q) { return q->n_in_flight == 0; });
      Request* victim = *last;  // r itself at worst
      preempt(victim, &out.kv_ops);
      preempted = true;
      ++out.n_preempted;
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // r was the last running request
    picks.push_back({r, n});
    budget -= n;
    ++i;
  }

  // 2. Waiting requests (FCFS within priority), unless we just had to
  // preempt. Slots: running requests plus the samples their unforked prompts
  // will fork (a request with n samples occupies n slots after its prompt).
  // Request-level batching admits only the members of the current batch.
  if (cfg_.policy != BatchingPolicy::kContinuous && may_start_batch(now)) start_batch();
  int slots = 0;
  for (const Request* r : running_) slots += 1 + r->n_fork;
  for (size_t i = 0; !preempted && budget > 0 && i < waiting_.size() && slots < cfg_.max_num_seqs &&
                     picks.size() < seq_cap;) {
    Request* r = waiting_[i];
    if (!admissible(r)) {
      ++i;
      continue;
    }
    r->spec_tokens.clear();  // a waiting request has tokens to (re)compute first
    if (slots > 0 && slots + 1 + r->n_fork > cfg_.max_num_seqs) break;  // a lone request may exceed it
    const int64_t n_tokens = r->num_tokens();
    if (kv_.swapped(*r)) {
      if (!kv_.swap_in(*r, std::min<int64_t>(n_tokens - r->num_computed_tokens, chunk_cap(r, budget)), &out.kv_ops))
        break;
    } else if (!kv_.holds_blocks(*r) && kv_.prefix_caching() && !r->needs_prompt_rows()) {
      r->num_computed_tokens = kv_.match_prefix(*r);
    }
    const int64_t n = std::min<int64_t>(n_tokens - r->num_computed_tokens, chunk_cap(r, budget));
    if (!kv_.allocate_slots(*r, n, 0, &out.kv_ops)) {
      kv_.free_blocks(*r);  // hits go back to the cache; retry next step
      r->num_computed_tokens = 0;
      break;
    }
    if (kv_.prefix_caching()) kv_.record_query(n_tokens - 1, r->num_computed_tokens);
    if (r->n_cached_prompt < 0) {
      r->n_cached_prompt = r->num_computed_tokens;
      r->queue_seconds = now - r->t_arrival;
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    add_running(r);
    slots += 1 + r->n_fork;
    picks.push_back({r, n});
    budget -= n;
  }

  std::vector<const Request*> picked;
  for (const Pick& p : picks) picked.push_back(p.r);
  std::sort(picked.begin(), picked.end());
  for (const Request* r : running_)
    if (kv_.holds_blocks(*r) && !std::binary_search(picked.begin(), picked.end(), r))
      out.idle.push_back({&kv_.tables(*r), r->num_computed_tokens + r->n_in_flight, r->seq_id});
  for (const Pick& p : picks) {
    ScheduledRequest sr;
    sr.req = p.r;
    sr.pos0 = p.r->num_computed_tokens;
    sr.n_tokens = p.n;
    sr.n_spec = static_cast<int64_t>(p.r->spec_tokens.size());
    sr.want_logits = sr.pos0 + p.n == p.r->num_tokens() + sr.n_spec;
    sr.all_logits = p.r->needs_prompt_rows();
    sr.tables = &kv_.tables(*p.r);
    out.n_logit_rows += static_cast<int>(sr.n_rows());
    out.n_tokens += p.n;
    out.scheduled.push_back(sr);
  }
  return out;
}

void Scheduler::on_computed(const ScheduledRequest& sr) {
  Request* r = sr.req;
  r->num_computed_tokens += sr.n_tokens;
  if (sr.n_spec > 0) return;  // on_verified() knows which positions stay
  kv_.cache_blocks(*r);
  kv_.release_out_of_window(*r);
}

void Scheduler::on_verified(const ScheduledRequest& sr) {
  Request* r = sr.req;
  const int64_t n_rejected = r->num_computed_tokens - (r->num_tokens() - 1);
  EMBER_CHECK(n_rejected >= 0 && n_rejected <= sr.n_spec);
  kv_.rollback(*r, n_rejected);
  r->num_computed_tokens -= n_rejected;
  r->spec_tokens.clear();
  kv_.cache_blocks(*r);
  kv_.release_out_of_window(*r);
}

}  // namespace ember
