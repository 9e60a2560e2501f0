// Speculator: speculative decoding as one component the Engine wires into
// its step, the way it wires the Scheduler and the OutputProcessor. A
// proposer (proposer.h: n-gram lookup, a draft model, layer skip, n-gram
// first) drafts up to k tokens per decoding request; one target forward
// pass over the k + 1 positions of every speculating request, mixed into
// the step's ragged batch, verifies them. Per step the engine calls
//
//   propose(running)       before scheduling: each running request that
//                          decodes gets its drafts (k: its own setting, the
//                          engine's, or adaptive k), checked and stored in
//                          Request::spec_tokens / spec_q; the scheduler
//                          turns them into verification slices (n_spec);
//   before_verify(slices)  after scheduling: the proposer may hand the
//                          target K/V and rows it computed (n_pre);
//   observe(so, seconds)   after the forward pass: the costs adaptive k
//                          weighs (adaptive_k.h);
//   verify(r, rows, ...)   per verification slice: the accept rule over its
//                          rows, emitting the accepted drafts and the
//                          target's next token; the engine then gives the
//                          rejected positions' KV slots back
//                          (Scheduler::on_verified) and appends any
//                          forced-token jump;
//
// and release(r) when a request ends. Output is identical to decoding
// without speculation (greedy and seeded): at each position the target's
// token is sampled exactly as without it, so neither the sampler nor a
// logits processor ever sees a rejected draft (nothing to roll back there);
// only KV slots are rolled back.
//
// Ownership and threading: owns the proposer. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/speculative/adaptive_k.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/proposer.h"
#include "model/model.h"

namespace ember {

struct KvDonor;  // draft_proposer.h

constexpr int kMaxSpecTokens = 32;  // draft tokens per request and step at most

// Speculative decoding settings (docs/engine.md, "Speculative decoding").
struct SpecConfig {
  SpecMethod method = SpecMethod::kNone;
  int num_speculative_tokens = 0;  // k (a request may override it)
  int ngram_min = 1, ngram_max = 4;  // n-gram lookup: suffix sizes tried, longest first
  bool ngram_k_by_match = false;     // n-gram lookup: at most 2^(n-1) drafts for a match of n (ngram_proposer.h)
  // Engine-wide switch-off: no proposals in a step with more running
  // sequences than this (0: no limit). Large batches make decode compute-
  // bound, where verifying k extra positions per sequence costs more than
  // the accepted tokens save.
  int max_running = 0;
  // kDraft / kLayerSkip: the draft model (borrowed; outlives the engine),
  // run by a DraftProposer with its own KV cache of draft_kv_cache_bytes
  // (0: a quarter of the target's KV budget, or as many pages as the
  // target's when it fixes a page count). Made by make_draft_proposer.
  const Model* draft_model = nullptr;
  size_t draft_kv_cache_bytes = 0;
  // kDraft / kLayerSkip: n-gram lookup first (ngram_first.h): a request
  // whose lookup matches at least ngram_first tokens takes the lookup's
  // proposal, the others the draft model's, at most draft_k tokens (0: k).
  // 0: the draft model only.
  int ngram_first = 0;
  int draft_k = 0;
  // kDraft / kLayerSkip: a draft whose layers are the target's first ones
  // (layer-skip views with no skipped layer before a kept one) copies the
  // target's K/V rows of final tokens instead of running them
  // (DraftProposer::set_kv_donor); false: it always runs them (for A/B).
  bool share_kv = true;
  // A truncated draft head of a view of the target also scores up to this
  // many tokens of each request's own context (DraftConfig::context_tokens).
  int draft_context_tokens = 2048;
  // Adaptive k (adaptive_k.h): per request and step, k in [0, k] from its
  // measured acceptance, the cost of a draft step (draft_cost >= 0: that
  // fraction of a target step; < 0: measured, proposer time over target
  // forward time per draft step) and of one more verified position
  // (verify_cost, a fraction of a target decode step).
  bool adaptive = false;
  double draft_cost = -1;
  double verify_cost = 0.05;  // < 0: measured (SpecStepCost over decode-only steps)
  // The n-gram lookup's settings (the ngram method and --ngram-first).
  NgramConfig ngram() const;
  Status validate() const;
  // kDraft / kLayerSkip: a proposer that runs a draft model.
  bool uses_draft_model() const { return method == SpecMethod::kDraft || method == SpecMethod::kLayerSkip; }
};

struct SpecCounters {
  int64_t n_verifications = 0;   // verification slices (a request with drafts in a step)
  int64_t n_draft_tokens = 0;    // draft tokens verified
  int64_t n_accepted_tokens = 0; // of which accepted
  // Verifications by number of accepted draft tokens (0 .. kMaxSpecTokens).
  std::vector<int64_t> accepted_hist = std::vector<int64_t>(kMaxSpecTokens + 1, 0);
  double acceptance_rate() const {
    return n_draft_tokens > 0 ? static_cast<double>(n_accepted_tokens) / n_draft_tokens : 0.0;
  }
  // Tokens emitted per verification (accepted drafts + the target's token).
  double mean_accepted_length() const {
    return n_verifications > 0 ? 1.0 + static_cast<double>(n_accepted_tokens) / n_verifications : 0.0;
  }
};

// What the target engine's KV settings make of a draft model's pool.
struct DraftKvBase {
  int block_size = 16;
  size_t kv_cache_bytes = 0;  // the target's KV budget
  int64_t num_kv_blocks = 0;  // the target's fixed page count (0: none)
  int max_batch = 512;        // tokens per forward pass
  KvTypes kv_types;           // the target's KV formats
  BackendFactory backend;     // the target's backend (empty: the CPU's)
};

// The draft-model proposer cfg asks for (cfg.uses_draft_model()) over
// target: a DraftProposer (with n-gram lookup first when cfg.ngram_first >
// 0) whose KV pool takes cfg.draft_kv_cache_bytes (0: a quarter of the
// target's budget, or the target's page count when it fixes one), and
// which copies the target's K/V from donor where it can (cfg.share_kv).
Result<std::unique_ptr<Proposer>> make_draft_proposer(const SpecConfig& cfg, const Model& target, ThreadPool& pool,
                                                      const DraftKvBase& base, const KvDonor& donor);

// One verification's outcome.
struct Verification {
  int n_emitted = 0;  // tokens appended to the request: the accepted drafts and the target's token
  // Why the request ends (a stop token or the length cap inside the burst:
  // the drafts after it are dropped), or kNone.
  FinishReason reason = FinishReason::kNone;
};

class Speculator {
 public:
  // n_vocab: the width of a logits row (proposals are checked against it);
  // max_seq_len: the sequence cap (no draft runs past it). Makes the
  // n-gram proposer when cfg asks for one; a draft model's comes through
  // set_proposer (make_draft_proposer).
  Speculator(const SpecConfig& cfg, int n_vocab, int64_t max_seq_len);

  // Replaces the proposer (null: no speculation). Call before the first step.
  void set_proposer(std::unique_ptr<Proposer> p) { proposer_ = std::move(p); }
  Proposer* proposer() { return proposer_.get(); }  // null without speculation
  const Proposer* proposer() const { return proposer_.get(); }
  bool enabled() const { return proposer_ != nullptr; }

  // Before scheduling: clears every running request's drafts, then asks the
  // proposer for those of the requests that decode (one token to compute,
  // no prompt rows to report, samples forked) and stores them in
  // Request::spec_tokens / spec_q. Errors: a proposer that returns more
  // tokens than asked, token ids outside the vocabulary, or distributions
  // of the wrong shape.
  Status propose(const std::vector<Request*>& running);
  // After scheduling, before the target's forward (Proposer::before_verify).
  void before_verify(std::vector<ScheduledRequest>& slices);
  // After the target's forward pass over so took exec_seconds: adaptive k's
  // measured costs (verification per position, draft step per target step).
  void observe(const SchedulerOutput& so, double exec_seconds);
  // Verifies r's drafts against the rows [n_spec + 1, n_vocab] of its
  // verification slice (modified: logits processor, penalties): at each
  // position the target's token is sampled as without speculation
  // (point-mass drafts: accepted iff equal, the rejection rule for q = 1;
  // drafts drawn from q: OutputProcessor::sample_draft's rejection rule) and
  // appended to r, reported in *events; the first rejection, a stop, the
  // length cap, or a forced-token jump (its tokens, not the drafts, follow:
  // into *forced, empty when r ends) ends the burst. Records the acceptance
  // (adaptive k, counters). The caller then runs Scheduler::on_verified.
  Verification verify(Request& r, float* rows, OutputProcessor& output, std::vector<int32_t>* forced,
                      std::vector<TokenEvent>* events);
  // r finished or was aborted: the proposer drops its state.
  void release(const Request& r) {
    if (proposer_) proposer_->release(r);
  }

  const SpecCounters& counters() const { return counters_; }

 private:
  SpecConfig cfg_;
  int n_vocab_;
  int64_t max_seq_len_;
  std::unique_ptr<Proposer> proposer_;
  std::vector<ProposeItem> items_;
  std::vector<Proposal> proposals_;
  std::vector<int32_t> drafts_;  // the drafts being verified (a copy: verification appends to r.tokens)
  double draft_cost_ = 0;        // measured draft-step cost relative to a target step (adaptive k)
  SpecStepCost step_cost_;       // measured forward seconds of decode steps by positions (adaptive k)
  double propose_seconds_ = 0;   // this step's proposer time
  int propose_k_ = 0;            // this step's largest k asked
  SpecCounters counters_;
};

}  // namespace ember
