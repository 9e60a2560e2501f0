// Scheduler: decides, once per engine step, which requests run and how many
// of their tokens (vLLM v1 style: every request simply advances
// num_computed_tokens towards its number of tokens, so decode tokens and
// prompt chunks mix freely in one ragged batch). It knows nothing of the
// model: it talks to the KvCacheManager for slots and returns a plain
// SchedulerOutput for the model runner.
//
// Policy (continuous batching with chunked prefill): running requests first
// (priority, then arrival order), so decodes keep flowing while long prompts
// arrive in chunks; then waiting ones (FCFS within priority) while the token
// budget (max_num_batched_tokens), the sequence cap (max_num_seqs) and free
// blocks allow. When a running request needs a block and none is free, the
// lowest-priority, newest running request is preempted: its blocks are
// freed (or its pages moved to swap space) and it is recomputed (or swapped
// back in) later; no new request is admitted in a step that preempted.
//
// Batching policies (SchedulerConfig::policy), for comparison with the
// request-level batching of older servers; everything above holds within a
// batch:
//   continuous  iteration-level: a request joins as soon as a slot and
//               blocks are free, and leaves the moment it finishes (default);
//   dynamic     windowed: a batch of up to max_num_seqs requests starts when
//               that many are waiting or the oldest waiting request has
//               waited batch_window_s, and runs to completion: nothing joins
//               until every member has finished;
//   static      a batch of whatever is waiting (up to max_num_seqs) starts
//               as soon as the previous one has finished, and runs to
//               completion.
// The members of a batch are fixed when it starts (Request::batch_id); a
// member preempted from it rejoins it, not the next one. Finished members
// free their blocks at once (the cache stays paged); what is lost against
// continuous batching is the slots they leave idle until the batch drains.
//
// Ownership: Requests are owned by the Engine; the scheduler holds pointers
// in its queues. Engine thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

#include "engine/kv/kv_cache_manager.h"
#include "engine/request.h"

namespace ember {

constexpr int kPromptLogprobChunk = 32;  // prompt tokens per step when their logits are all needed

enum class BatchingPolicy { kContinuous, kDynamic, kStatic };
const char* batching_policy_name(BatchingPolicy p);
// "continuous" | "dynamic" | "static".
Result<BatchingPolicy> parse_batching_policy(const std::string& name);

struct SchedulerConfig {
  int max_num_batched_tokens = 512;  // tokens per step (forward batch)
  int max_num_seqs = 64;             // sequences per step
  // Preemption moves the KV pages to swap space (if they fit) instead of
  // dropping them for recomputation.
  bool preempt_swap = false;
  BatchingPolicy policy = BatchingPolicy::kContinuous;
  double batch_window_s = 0.05;  // dynamic batching: the longest a waiting request holds the batch back
};

// One request's slice of the step: tokens [pos0, pos0 + n_tokens) of
// req->tokens followed by req->spec_tokens (Request::token_at), written to
// and read from the KV cache through `tables`.
struct ScheduledRequest {
  Request* req = nullptr;
  int64_t pos0 = 0;
  int64_t n_tokens = 0;
  bool want_logits = false;  // the slice ends at the last known token: its row is sampled
  bool all_logits = false;   // a logits row for every token (prompt log-probabilities)
  const BlockTables* tables = nullptr;  // owned by the KvCacheManager, valid until the next schedule()
  // Speculative verification: the slice is the last known token and
  // n_spec = req->spec_tokens.size() draft tokens (n_tokens = 1 + n_spec),
  // with a logits row for each of them (want_logits is set).
  int64_t n_spec = 0;
  // Set by the proposer before the forward (Proposer::before_verify): the
  // first n_pre tokens of a verification slice were run through the
  // target's own layers by the draft, which wrote their K/V into this
  // slice's pages; pre_hidden holds their final residual rows [n_pre,
  // n_embd] (valid until the next propose). The runner computes the rest
  // (model/forward.h SeqBatch::pre_hidden). 0 <= n_pre < n_tokens.
  int64_t n_pre = 0;
  const float* pre_hidden = nullptr;
  // Logits rows the runner returns for this slice.
  int64_t n_rows() const { return all_logits || n_spec > 0 ? n_tokens : want_logits ? 1 : 0; }
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // in schedule order (the order of the logits rows)
  std::vector<KvOp> kv_ops;                 // memory ops to apply, in order, before the forward pass
  // The other sequences that hold KV pages (running, not in this step), at
  // num_computed_tokens: with the slices, where every live sequence writes
  // next (what KV state outside the pages the pool keeps: KvBlockPool::
  // apply_ops).
  std::vector<KvFrontier> idle;
  int64_t n_tokens = 0;                     // tokens in the forward pass
  int n_logit_rows = 0;                     // rows of logits it returns
  int n_preempted = 0;                      // requests preempted by this schedule
  bool empty() const { return scheduled.empty() && kv_ops.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvCacheManager& kv);

  // A new (or re-queued) request waits for admission.
  void add_waiting(Request* r);
  // A forked sample joins the running set directly (it shares the parent's
  // computed prompt).
  void add_running(Request* r);
  // Takes a finished or aborted request out of its queue (the caller frees
  // its KV state).
  void remove(Request* r);

  // The next step's batch. Mutates requests (num_computed_tokens on
  // prefix-cache hits and preemption, status, admission time) and the KV
  // manager (slots, swap).
  SchedulerOutput schedule();
  // The same at time `now` (steady-clock seconds, the clock of
  // Request::t_arrival), for tests of the batching window.
  SchedulerOutput schedule_at(double now);
  // Seconds from `now` until a waiting request could be admitted under the
  // batching policy: 0 when one may be now (or none waits), the rest of the
  // window when a dynamic batch is still forming, +inf while a batch runs
  // that admits no one. The engine loop sleeps at most this long.
  double seconds_until_admission(double now) const;
  // After the forward pass: the slice is computed. Advances
  // num_computed_tokens, registers the request's full final blocks in the
  // prefix cache and releases pages that left every sliding window.
  // For a verification slice (n_spec > 0) it only advances
  // num_computed_tokens; on_verified() then finishes the job.
  void on_computed(const ScheduledRequest& sr);
  // After a verification slice was computed (on_computed) and its accepted
  // tokens appended to req->tokens: gives back the KV slots past the last
  // accepted token (num_computed_tokens becomes num_tokens() - 1), then
  // registers full final blocks and releases out-of-window pages.
  void on_verified(const ScheduledRequest& sr);

  // Pipelining (a runner with steps in flight, Engine): at most n
  // sequences in the next schedules (0: no cap), so that the running
  // requests spread over the steps in flight.
  void set_step_seq_cap(int n) { step_seq_cap_ = n; }

  const std::vector<Request*>& running() const { return running_; }
  const std::vector<Request*>& waiting() const { return waiting_; }
  int64_t n_preemptions() const { return n_preemptions_; }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  static bool before(const Request* a, const Request* b);
  static void insert_sorted(std::vector<Request*>& q, Request* r);
  void preempt(Request* r, std::vector<KvOp>* ops);
  static int64_t chunk_cap(const Request* r, int64_t budget);
  bool batch_open() const;           // a request-level batch has members not finished
  bool may_start_batch(double now) const;
  void start_batch();
  bool admissible(const Request* r) const;
  // Tries to schedule r's verification slice (last token + its spec
  // tokens, trimmed to the budget); false (spec tokens dropped) if there
  // are none or their slots do not fit without preempting.
  bool schedule_spec(Request* r, int64_t budget, std::vector<KvOp>* ops, int64_t* n);

  SchedulerConfig cfg_;
  KvCacheManager& kv_;
  std::vector<Request*> waiting_;  // sorted: priority, arrival, sample index
  std::vector<Request*> running_;  // sorted likewise
  int64_t n_preemptions_ = 0;
  int64_t batch_id_ = 0;             // the current request-level batch (dynamic / static)
  int step_seq_cap_ = 0;             // set_step_seq_cap
};

}  // namespace ember
