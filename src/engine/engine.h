// Engine: the serving core. Requests are added and aborted between steps;
// each step() schedules one ragged batch (decode tokens of running sequences
// and chunks of prompts, vLLM-style: every sequence simply advances
// num_computed_tokens towards num_tokens), runs one forward pass for all of
// them over the paged KV cache, samples, and reports new tokens and finished
// requests. Single-threaded: see AsyncEngine for the thread-safe front.
//
// Scheduling: running sequences first (in priority, then arrival order), so
// decodes keep flowing while long prompts arrive in chunks; then waiting
// ones (FCFS within priority) while the token budget
// (max_num_batched_tokens), the sequence cap (max_num_seqs) and free blocks
// allow. When a running sequence needs a block and none is free, the
// lowest-priority, newest running sequence is preempted: its blocks are freed
// and it is recomputed later (prefix-cache hits make that cheap). Output is
// identical whatever the batch composition, chunking, cache hits or
// preemptions (the kernels are batch-invariant and each sequence owns its
// sampler state).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kv/block_manager.h"
#include "engine/kv/kv_pool.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace ember {

struct EngineConfig {
  int block_size = 16;
  size_t kv_cache_bytes = size_t{256} << 20;  // see kv_budget_from_free_memory()
  int64_t num_kv_blocks = 0;          // > 0: overrides kv_cache_bytes
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
};

constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit
constexpr int kPromptLogprobChunk = 32;  // prompt tokens per step when their logits are all needed

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);

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
};

using TopLogprobs = std::vector<std::pair<int32_t, float>>;  // (token, logprob), most likely first

struct TokenEvent {
  std::string id;
  int index;      // sample index (0 .. n-1)
  int32_t token;
  float logprob;  // log-softmax of the raw logits at `token`; NaN unless requested
  TopLogprobs top;  // the top_logprobs most likely tokens (empty unless requested)
  double queue_seconds = -1;  // with a sequence's first token: its wait before first scheduled
};

// Log-probabilities of prompt tokens [first, first + logprobs.size()).
struct PromptLogprobEvent {
  std::string id;
  int64_t first = 1;
  std::vector<float> logprobs;
  std::vector<TopLogprobs> top;
};

struct FinishedRequest {
  std::string id;
  int index = 0;                 // sample index; a request with n samples finishes n times
  FinishReason reason = FinishReason::kNone;
  std::vector<int32_t> output;   // generated tokens
  std::vector<float> logprobs;   // per generated token, if requested
  int64_t n_prompt = 0;
  int64_t n_cached_prompt = 0;   // prompt tokens served by the prefix cache at first admission
  int n_preemptions = 0;
  double queue_seconds = -1;     // waiting time before first scheduled (-1: never scheduled)
};

struct StepOutput {
  std::vector<TokenEvent> tokens;
  std::vector<PromptLogprobEvent> prompt_logprobs;
  std::vector<FinishedRequest> finished;
  int64_t n_batched_tokens = 0;  // tokens in this step's forward pass
  int n_seqs = 0;                // sequences in it
  double seconds = 0;
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
  int64_t n_generated_tokens = 0;
  int64_t last_step_tokens = 0;
  double last_step_seconds = 0;
  double total_step_seconds = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const Model& model, ThreadPool& pool, const EngineConfig& cfg);
  ~Engine();

  // Queues a request. Errors (nothing queued): duplicate id, empty prompt,
  // token ids out of range, bad sampling parameters, or a prompt that can
  // never fit in the KV cache / max_model_len.
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

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  bool has_unfinished() const { return has_work() || !pending_finished_.empty(); }
  EngineStats stats() const;
  // Block-accounting invariants (reference counts == table entries, etc.).
  Status check_invariants() const;
  const EngineConfig& config() const { return cfg_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  // KV layer groups (pages per block of positions while all are in window).
  int n_kv_groups() const { return n_groups_; }

 private:
  struct Sequence;
  Engine(const Model& model, const EngineConfig& cfg);
  bool before(const Sequence* a, const Sequence* b) const;
  void insert_sorted(std::vector<Sequence*>& q, Sequence* s);
  void preempt(Sequence* s);
  void swap_out(Sequence* s);
  bool swap_in(Sequence* s, int64_t n_new);
  size_t page_floats() const;
  void finish(Sequence* s, FinishReason r, StepOutput* out);
  void register_full_blocks(Sequence* s);
  bool grow_blocks(Sequence* s, int64_t n_tokens);
  void free_tables(Sequence* s);
  void release_out_of_window(Sequence* s);
  int match_cached_prefix(Sequence* s);
  int64_t chunk_cap(const Sequence* s, int64_t budget) const;
  void fork_samples(Sequence* parent, const float* logits, StepOutput* out);
  void sample_into(Sequence* s, float* logits, StepOutput* out);
  struct Group {
    int n = 1;
    int live = 0;
  };

  const Model& model_;
  EngineConfig cfg_;
  std::unique_ptr<KvBlockPool> kv_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<ForwardContext> fwd_;
  int64_t max_seq_len_ = 0;
  int n_groups_ = 1;
  uint64_t next_arrival_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Sequence>> seqs_;  // by sequence key (id, index)
  std::unordered_map<std::string, Group> groups_;                    // by request id
  std::vector<Sequence*> waiting_;  // sorted: priority, arrival
  std::vector<Sequence*> running_;  // sorted: priority, arrival
  std::vector<FinishedRequest> pending_finished_;
  std::vector<float> logits_;  // [n sampled rows, n_vocab]
  std::vector<float> raw_;     // one raw logits row (logprobs)
  SamplerScratch sampler_scratch_;  // shared by every sequence's sampler (engine thread only)
  EngineStats stats_;
  size_t swap_used_ = 0;  // bytes held by swapped-out sequences
};

}  // namespace ember
