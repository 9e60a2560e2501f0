// Engine: the serving core, composed vLLM-v1 style of
//   Scheduler       which requests run this step, how many tokens each
//                   (scheduler.h; continuous batching, chunked prefill,
//                   preemption),
//   KvCacheManager  which KV pages each request holds: slots, copy-on-
//                   write, prefix cache, sliding-window release, swap
//                   (kv/kv_cache_manager.h),
//   ModelRunner     KV memory and one forward pass per step over the
//                   scheduled slices (model_runner.h; CpuModelRunner over a
//                   Model, FakeModelRunner for tests),
//   OutputProcessor sampling, logits processors, log-probabilities, forks
//                   and stop decisions (output_processor.h),
//   Speculator      speculative decoding: drafts before scheduling, their
//                   verification after the forward pass, adaptive k
//                   (speculative/speculator.h),
// and the Requests (request.h) they share. Requests are added and aborted
// between steps; each step() schedules one ragged batch, runs it, samples,
// and reports new tokens and finished requests. Single-threaded: see
// AsyncEngine for the thread-safe front.
//
// Output is identical whatever the batch composition, chunking, prefix-
// cache hits or preemptions (the kernels are batch-invariant and each
// request owns its sampler state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kv/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative/speculator.h"
#include "model/model.h"

namespace ember {

struct EngineConfig {
  int block_size = 16;
  size_t kv_cache_bytes = size_t{256} << 20;  // see kv_budget_from_free_memory()
  int64_t num_kv_blocks = 0;          // > 0: overrides kv_cache_bytes
  // Storage formats of the KV pages (--kv-cache-dtype, kernels/kv_types.h);
  // the CPU runner Engine::create(model, ...) makes uses them.
  KvTypes kv_types;
  // The backend the runners Engine::create(model, ...) makes compute on
  // (the target's and a draft model's; kernels/backend.h); empty: the CPU
  // backend over the engine's pool.
  BackendFactory backend;
  int max_num_batched_tokens = 512;   // tokens per step (forward batch)
  int max_num_seqs = 64;              // sequences per step
  int64_t max_model_len = 0;          // prompt + output cap; 0: the model's training context
  bool enable_prefix_caching = true;
  // Sliding-window layers (Gemma 3) in their own KV groups, releasing blocks
  // that left the window; false: one group, every layer keeps every block.
  bool sliding_window_release = true;
  // Preemption: false recomputes a preempted sequence later (its prefix may
  // come back from the prefix cache); true first copies its KV pages to host
  // memory (up to swap_space_bytes in all) and copies them back on resume.
  bool preempt_swap = false;
  size_t swap_space_bytes = size_t{1} << 30;
  // Continuous (default), or request-level dynamic / static batching for
  // comparison (see scheduler.h); batch_window_s: the dynamic batch window.
  BatchingPolicy batching = BatchingPolicy::kContinuous;
  double batch_window_s = 0.05;
  SpecConfig spec;
  // Where the prefix cache publishes its block hashes (kv_events.h; for
  // `ember router --policy exact`); nullptr: not published.
  std::shared_ptr<KvEventLog> kv_events;
};

struct RequestParams {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;                 // generated tokens at most
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
  int priority = 0;                    // lower runs first (FCFS within a priority)
  bool logprobs = false;               // report log p(token) of each sampled token (raw logits)
  int top_logprobs = 0;                // with logprobs: also the k most likely tokens per step (k <= 20)
  // >= 0: report log p of every prompt token after the first (and this many
  // alternatives each). Such prompts skip the prefix cache (every row must be
  // computed) and are prefilled in chunks of at most kPromptLogprobChunk.
  int prompt_logprobs = -1;
  int n = 1;  // parallel samples; sample k uses seed + k and shares the prompt's KV blocks
  // Optional per-request logits hook (grammars, biases): a prototype each
  // sample clones at admission (see logits_processor.h).
  std::shared_ptr<const LogitsProcessor> logits_processor;
  // Draft tokens per step for this request: -1 the engine's setting, 0 off,
  // 1..kMaxSpecTokens (needs an engine with a proposer).
  int num_speculative_tokens = -1;
};

struct FinishedRequest {
  std::string id;
  int index = 0;                 // sample index; a request with n samples finishes n times
  FinishReason reason = FinishReason::kNone;
  std::vector<int32_t> output;   // generated tokens
  std::vector<float> logprobs;   // per generated token, if requested
  int64_t n_forced = 0;          // output tokens appended by forced-token jumps
  int64_t n_prompt = 0;
  int64_t n_cached_prompt = 0;   // prompt tokens served by the prefix cache at first admission
  int n_preemptions = 0;
  double queue_seconds = -1;     // waiting time before first scheduled (-1: never scheduled)
};

// Where a step's wall time went (seconds; StepOutput::times): the
// scheduler (drafts, admission, preemption, KV slots), the runner's part
// (RunnerStepTimes: host preparation of the step input, the forward pass's
// wall time, and inside them host <-> backend copies and the backend's
// device time where it measures one; on the CPU the model's time is the
// forward pass itself), then sampling and bookkeeping after it.
struct StepTimes : RunnerStepTimes {
  double schedule = 0;
  double sample = 0;
  // The model's time: the device's where measured, else the forward pass
  // less its copies.
  double model() const { return device_measured ? device : std::max(0.0, forward - copies); }
};

struct StepOutput {
  std::vector<TokenEvent> tokens;
  std::vector<PromptLogprobEvent> prompt_logprobs;
  std::vector<FinishedRequest> finished;
  int64_t n_batched_tokens = 0;  // tokens in this step's forward pass
  int n_seqs = 0;                // sequences in it
  int64_t n_spec_tokens = 0;     // draft tokens verified in it (part of n_batched_tokens)
  double seconds = 0;
  StepTimes times;               // parts of `seconds` (their sum <= seconds: the rest is the engine's other work)
};

struct EngineStats {
  int n_running = 0;
  int n_waiting = 0;
  int n_swapped = 0;  // waiting sequences whose KV pages are held in swap space
  int64_t swap_bytes_used = 0;
  int64_t n_swap_outs = 0, n_swap_ins = 0;
  int32_t blocks_total = 0;  // KV pages (one layer group x block_size positions)
  int32_t blocks_used = 0;
  int32_t blocks_free = 0;
  int32_t blocks_cached_free = 0;  // free but still holding prefix-cache content
  int64_t kv_slots_allocated = 0;  // block slots of running sequences
  int64_t kv_slots_filled = 0;     // of which hold a computed token
  // Allocated but unfilled fraction of the running sequences' block slots.
  double kv_waste() const {
    return kv_slots_allocated > 0 ? 1.0 - static_cast<double>(kv_slots_filled) / kv_slots_allocated : 0.0;
  }
  PrefixCacheCounters prefix;
  int64_t n_preemptions = 0;
  int64_t n_cow_copies = 0;        // shared partial blocks copied before a write
  int64_t n_steps = 0;
  int64_t n_computed_tokens = 0;   // tokens run through the model, all steps
  int64_t n_generated_tokens = 0;  // output tokens, sampled or forced
  int64_t n_forced_tokens = 0;     // of which appended by forced-token jumps (structured output)
  int64_t last_step_tokens = 0;
  double last_step_seconds = 0;
  double total_step_seconds = 0;
  SpecCounters spec;
  // KV capacity in the chosen formats: bytes one token position takes over
  // all layers (K + V), and token positions the pool holds in every layer.
  int64_t kv_bytes_per_token = 0;
  int64_t kv_tokens_total = 0;
  // What the KV format holds outside the pages (ModelRunner::kv_memory,
  // KvMemory; 0 for per-row formats): the budget reserved for it (taken out
  // before the pages are sized), the bytes held now and at most so far
  // (never above the reserve).
  int64_t kv_tail_reserve_bytes = 0;
  int64_t kv_tail_bytes = 0;
  int64_t kv_tail_peak_bytes = 0;
  // The reserve spread over the pool's token positions (rounded up), and
  // bytes per token with it: the pages' cost plus the tails' share.
  int64_t kv_tail_bytes_per_token() const {
    return kv_tokens_total > 0 ? (kv_tail_reserve_bytes + kv_tokens_total - 1) / kv_tokens_total : 0;
  }
  int64_t kv_bytes_per_token_with_tails() const { return kv_bytes_per_token + kv_tail_bytes_per_token(); }
};

class Engine {
 public:
  // The serving engine over a loaded model: a CpuModelRunner on the backend
  // cfg.backend makes (the CPU backend by default); errors: the backend
  // cannot start, or does not run the model's weight types
  // (Model::check_backend).
  static Result<std::unique_ptr<Engine>> create(const Model& model, ThreadPool& pool, const EngineConfig& cfg);
  // Over any model runner (e.g. FakeModelRunner in tests).
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg);
  // Over a runner that executes `target` elsewhere too (tensor / pipeline
  // parallelism: a ParallelRunner over this rank's shard of it): a draft
  // model (cfg.spec.draft_model) runs here, in this process, on `pool`, and
  // the runner verifies its drafts like any step. The draft must be a model
  // of its own (a whole file: --speculative-model), not a view of the
  // target's layers (layerskip), which a sharded target does not hold whole.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg,
                                                const Model& target, ThreadPool& pool);
  ~Engine();

  // Queues a request. Errors (nothing queued): duplicate id, empty prompt,
  // token ids out of range, bad sampling parameters, a prompt that can
  // never fit in the KV cache / max_model_len, or (a KV format with a tails
  // reserve) more samples than max_num_seqs, the sequences it is sized for.
  Status add_request(const std::string& id, RequestParams params);
  // Removes a waiting or running request (all its samples), frees its
  // blocks; it is reported as finished (kAbort) by the next step(). False if
  // the id is unknown.
  bool abort(const std::string& id);
  // Ends one sample of a request (e.g. a stop string matched) as kStop,
  // freeing its blocks; reported by the next step(). False if unknown.
  bool stop_sample(const std::string& id, int index);
  // One scheduling + forward + sampling iteration. Does nothing (and returns
  // only pending abort reports) when there is no work.
  Result<StepOutput> step();

  bool has_work() const {
    return !scheduler_->waiting().empty() || !scheduler_->running().empty() || !in_flight_.empty();
  }
  bool has_unfinished() const { return has_work() || !pending_finished_.empty(); }
  // Seconds until a waiting request may be admitted under the batching
  // policy (0 under continuous batching; see Scheduler).
  double seconds_until_admission() const;
  EngineStats stats() const;
  // Block-accounting and queue invariants (reference counts == table
  // entries, queues == live requests, etc.).
  Status check_invariants() const;
  const EngineConfig& config() const { return cfg_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  // Sequences of `len` tokens the KV pool holds at once (sliding-window
  // groups hold only their window), the capacity `ember serve` prints.
  int64_t kv_sequences_of(int64_t len) const;
  // KV layer groups (pages per block of positions while all are in window).
  int n_kv_groups() const { return kv_->n_groups(); }
  const ModelRunner& runner() const { return *runner_; }
  // Replaces the proposer made from cfg.spec (tests; a draft model). Call
  // before the first step; nullptr turns speculation off.
  void set_proposer(std::unique_ptr<Proposer> p) { spec_->set_proposer(std::move(p)); }
  Proposer* proposer() { return spec_->proposer(); }  // null without speculation
  const Proposer* proposer() const { return spec_->proposer(); }

 private:
  struct Group {
    int n = 1;
    int live = 0;
  };
  explicit Engine(const EngineConfig& cfg) : cfg_(cfg) {}
  // create(runner, cfg); with draft_follows a draft-model method is not
  // refused (create(model, ...) sets its proposer).
  static Result<std::unique_ptr<Engine>> build(std::unique_ptr<ModelRunner> runner, const EngineConfig& cfg,
                                               bool draft_follows);
  void finish(Request* r, FinishReason reason, StepOutput* out);
  void fork_samples(Request* parent, const float* logits, StepOutput* out);
  void sample_into(Request* r, float* logits, StepOutput* out);
  // sample_into after the token was chosen (OutputProcessor::commit, forced jumps, finish).
  void commit_into(Request* r, Choice& c, StepOutput* out);
  // row0_: each schedule entry's first row of the step's logits.
  void index_rows(const SchedulerOutput& so);
  // The tokens of this step's plain sampling rows (no fork, speculation or
  // prompt log-probabilities), chosen ahead of the step's bookkeeping, in
  // parallel on pool_ when there are several; indexed by schedule entry.
  void choose_rows(const SchedulerOutput& so, float* logits);
  FinishReason append_forced(Request* r, StepOutput* out);
  // Verifies sr's drafts against its rows (Speculator::verify), then gives
  // back the rejected positions' KV slots and appends a forced-token jump.
  void verify(const ScheduledRequest& sr, float* rows, StepOutput* out);
  // After a step's forward pass: advance, verify, sample, finish (step()).
  void process(const SchedulerOutput& so, float* logits, StepOutput* out);
  void finish_step(double t0, StepOutput* out);
  // out->times from the step's clock readings (start, execute / collect
  // start and end) and the runner's breakdown.
  void time_step(double t0, double t_exec, double t_done, StepOutput* out) const;
  // step() over a pipelined runner (max_in_flight() > 1) without
  // speculation: drafting needs each step's tokens before the next step is
  // scheduled, so a speculating engine runs one step at a time (pipelined_
  // false; the runner's execute() is submit + collect).
  Result<StepOutput> step_pipelined();
  // After a failed submit / collect: the steps in flight are lost.
  void drop_in_flight();

  EngineConfig cfg_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<OutputProcessor> output_;
  ThreadPool* pool_ = nullptr;  // the runner's pool (borrowed; null: sampling on the engine thread)
  std::vector<int64_t> row0_;                           // [so.scheduled.size()] first logits row (index_rows)
  std::vector<size_t> choose_rows_;                     // schedule entries choose_rows picks tokens for
  std::vector<Choice> choices_;                         // [so.scheduled.size()] their tokens
  std::vector<uint8_t> chosen_;                         // [so.scheduled.size()] entry has a choice
  int64_t max_seq_len_ = 0;
  int n_vocab_ = 0;
  size_t page_bytes_ = 0;
  uint64_t next_arrival_ = 0;
  uint64_t next_seq_id_ = 1;
  std::unordered_map<std::string, std::unique_ptr<Request>> seqs_;  // by sequence key (id, index)
  std::unordered_map<std::string, Group> groups_;                   // by request id
  std::vector<FinishedRequest> pending_finished_;
  std::vector<float> fork_row_;  // a copy of the parent's logits row per forked sample
  std::unique_ptr<Speculator> spec_;
  std::vector<int32_t> forced_;  // a forced-token jump's tokens (verify, append_forced)
  bool pipelined_ = false;                          // runner max_in_flight() > 1 and no speculation
  std::deque<SchedulerOutput> in_flight_;          // pipelining: submitted, not collected, oldest first
  std::vector<std::unique_ptr<Request>> zombies_;  // ended while in flight (Request::gone)
  EngineStats stats_;
};

}  // namespace ember
