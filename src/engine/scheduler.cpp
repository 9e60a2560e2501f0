// Continuous-batching scheduler; see scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace ember {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

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

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  struct Pick {
    Request* r;
    int64_t n;
  };
  std::vector<Pick> picks;
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;

  // 1. Running requests, in order; preempt from the back when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    int64_t n = std::min<int64_t>(r->num_tokens() - r->num_computed_tokens, chunk_cap(r, budget));
    if (schedule_spec(r, budget, &out.kv_ops, &n)) {
      picks.push_back({r, n});
      budget -= n;
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!kv_.allocate_slots(*r, n, 0, &out.kv_ops)) {
      Request* victim = running_.back();
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
  int slots = 0;
  for (const Request* r : running_) slots += 1 + r->n_fork;
  while (!preempted && budget > 0 && !waiting_.empty() && slots < cfg_.max_num_seqs) {
    Request* r = waiting_.front();
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
      r->queue_seconds = now_seconds() - r->t_arrival;
    }
    waiting_.erase(waiting_.begin());
    add_running(r);
    slots += 1 + r->n_fork;
    picks.push_back({r, n});
    budget -= n;
  }

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
