// Request: the engine's state of one sequence (one sample of a client
// request): its tokens, how many of them the KV cache holds
// (num_computed_tokens), the speculative tokens proposed but not yet
// verified, its sampling state and its output so far. The KV state (block
// tables, prefix hashes, swap) is not here: KvCacheManager owns it, keyed by
// seq_id. Plain data plus small derived helpers; owned by the Engine, used
// on the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/logits_processor.h"
#include "engine/sampler.h"
#include "engine/speculative/adaptive_k.h"

namespace ember {

enum class RequestStatus { kWaiting, kRunning };

struct Request {
  uint64_t seq_id = 0;  // unique per sequence, never reused (KV manager key)
  std::string id;       // client request id (shared by its samples)
  int index = 0;        // sample index within the request
  int n_fork = 0;       // samples to fork off when the prompt is computed
  SamplingParams sampling;

  std::vector<int32_t> tokens;  // prompt + generated (final tokens only)
  int64_t n_prompt = 0;
  // Tokens whose K/V are in the cache. With speculative decoding this may
  // run past tokens.size() into spec_tokens while a verification is in
  // flight; otherwise <= tokens.size().
  int64_t num_computed_tokens = 0;
  // Tokens of a step submitted to a pipelined runner and not collected yet
  // (Engine's pipelining): the request sits the next schedules out.
  int64_t n_in_flight = 0;
  // Ended (aborted, stopped) while a step of it was in flight: the Engine
  // keeps it until that step is collected and drops the step's result.
  bool gone = false;
  // Proposed continuation not yet verified by the target model (empty
  // without speculative decoding). Their KV slots are lookahead slots: they
  // are never registered in the prefix cache and are rolled back if rejected.
  std::vector<int32_t> spec_tokens;
  // Their draft distributions when drawn from one ([k][n_vocab], rows in
  // spec_tokens order; empty: point masses). Read only for the first
  // spec_tokens.size() rows.
  std::vector<std::vector<float>> spec_q;

  std::unique_ptr<Sampler> sampler;                    // RNG + penalty history (survives preemption)
  std::unique_ptr<LogitsProcessor> logits_processor;   // optional

  int max_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool want_logprobs = false;
  int top_logprobs = 0;
  int prompt_logprobs = -1;      // see RequestParams
  int64_t n_prompt_lp_done = 1;  // prompt positions whose log p was reported (position 0 has none)
  std::vector<float> logprobs;   // per generated token, if requested
  int64_t n_forced = 0;          // output tokens appended by forced-token jumps (not sampled)

  int priority = 0;
  uint64_t arrival = 0;          // admission order (FCFS within a priority)
  RequestStatus status = RequestStatus::kWaiting;
  int n_preemptions = 0;
  int64_t batch_id = -1;         // request-level batch it belongs to (dynamic / static batching; -1: none)
  int64_t n_cached_prompt = -1;  // prompt tokens from the prefix cache at first admission (-1: not yet)
  double t_arrival = 0;          // add_request time (steady clock, seconds)
  double queue_seconds = -1;     // arrival to first admission

  // Speculative tokens this request may be given per step (-1: the
  // engine's setting; 0: none).
  int num_speculative_tokens = -1;
  SpecAcceptance spec_acc;  // acceptance so far (adaptive k)

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Token at position p of tokens followed by spec_tokens (what a
  // verification slice runs over).
  int32_t token_at(int64_t p) const {
    const int64_t n = num_tokens();
    return p < n ? tokens[static_cast<size_t>(p)] : spec_tokens[static_cast<size_t>(p - n)];
  }
  int64_t n_output() const { return num_tokens() - n_prompt; }
  bool running() const { return status == RequestStatus::kRunning; }
  // Prompt log-probabilities still to report: every prompt row is needed.
  bool needs_prompt_rows() const { return prompt_logprobs >= 0 && n_prompt_lp_done < n_prompt; }
};

}  // namespace ember
