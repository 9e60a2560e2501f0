// DraftProposer: speculative drafts from a draft model — a smaller model
// with the target's vocabulary (a lower-bit copy of the target, a smaller
// model of the same family), or the target itself with layers skipped
// (layerskip.h builds such a Model). The draft runs in its own
// CpuModelRunner over its own paged KV cache (its own KvCacheManager, no
// prefix cache); one batched draft forward per draft step carries every
// speculating request (and the prompt tokens the draft has not seen yet, in
// chunks).
//
// Draft KV follows the request: allocated at its first proposal, synced at
// every later one to the request's final tokens (the positions past the
// first token that differs — rejected drafts — are rolled back), freed when
// the request finishes, is aborted (release()) or was preempted (it is no
// longer running at the next proposal); when the draft pool is full, the
// KV of requests not drafting in this step is freed first.
//
// A draft with a truncated head (config().head_tokens, draft_head.h) drafts
// only those tokens: its logits are spread over the full vocabulary with
// -inf elsewhere before the draft token is chosen (q = 0 off the head).
// When the draft is a view of the target (the same embedding), the tokens
// of the request's own context that the head lacks are scored too (up to
// DraftConfig::context_tokens per request): their rows of the target's
// full head are gathered as they appear, and each draft step computes
// their logits from the draft's final residual row with the target's head
// arithmetic (output norm, the same matmul, softcap). Rewriting and
// quoting reuse the passage's rare words, which a frequency-ranked head
// misses.
//
// Draft tokens: a greedy request gets the draft's greedy token (penalties
// applied: the plain sampler's choice on the draft's logits) as a point mass;
// a sampled request gets a token drawn from the draft distribution q = the
// request's sampling parameters (temperature, top-k/top-p/min-p, penalties
// over its tokens and the drafts before) applied to the draft logits by the
// plain sampler's code (Sampler::distribution), with its own RNG seeded from
// the request's seed, and q is returned for the rejection rule. Logits
// processors (grammars) are not applied to drafts: the verifier applies
// them to p, so a draft they forbid is simply rejected.
//
// KV from the target: a draft whose layers are the target's first layers
// (a view of the target: --skip-layers none or a trailing set, with a
// truncated head) computes exactly the target's K/V for the same tokens.
// With the target's pages set as its donor (set_kv_donor), such a draft
// copies the K/V rows of a request's final tokens that the target has
// computed (its prompt, tokens a lookup proposed, ...) into its own pages
// instead of running them: a long prompt is not prefilled twice.
//
// Ownership: borrows both models, the thread pool and the donor. Engine
// thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/metadata.h"
#include "core/thread_pool.h"
#include "engine/cpu_model_runner.h"
#include "engine/kv/kv_cache_manager.h"
#include "engine/speculative/proposer.h"
#include "kernels/backend.h"
#include "model/model.h"

namespace ember {

struct DraftConfig {
  int block_size = 16;
  size_t kv_cache_bytes = size_t{256} << 20;  // the draft's KV pool
  int64_t num_kv_blocks = 0;                  // > 0: overrides kv_cache_bytes
  int max_batch = 512;                        // tokens per draft forward
  SpecMethod method = SpecMethod::kDraft;     // what method() reports (kDraft or kLayerSkip)
  // A truncated draft head of a view of the target also scores the tokens of
  // the request's own context (prompt and output) that it lacks, at most
  // this many per request, their rows taken from the target's full head
  // (see the top); 0: the head's tokens only.
  int context_tokens = 2048;
  // The target's KV storage: the draft stores its K/V the same way where its
  // head dims allow (draft_kv_types), so a draft that is the target's own
  // stack (layerskip none + a truncated head) computes the target's bits.
  KvTypes kv_types;
  // The backend the draft runs on (its runner's, and the context tokens'
  // head arithmetic): the target's (empty: the CPU backend).
  BackendFactory backend;
};

// The draft's KV formats for a target cache of formats t: t where the
// draft's head dims take it, f16 where they do not; token-group keys (q4c)
// become f16 (the draft's pool is sized without a tails reserve).
KvTypes draft_kv_types(KvTypes t, const ModelConfig& draft);

// The number n of leading draft layers whose K/V are the target's: the same
// token embedding and, for layers 0 .. n-1, the same weights (shared views:
// make_draft_view) and layer configuration as the target's layers 0 .. n-1.
int shared_kv_layers(const Model& target, const Model& draft);

// The target's KV as the source of a draft's (DraftProposer::set_kv_donor).
struct KvDonor {
  KvBlockPool* pool = nullptr;         // the target's pages
  const KvCacheManager* kv = nullptr;  // the target's block tables
};

// The draft's vocabulary must be the target's: the same size, and where the
// metadata lists the vocabulary (tokenizer.ggml.tokens, .model, bos/eos
// ids) the same lists. Error: the first difference.
Status check_same_vocabulary(const Metadata& target, int target_n_vocab, const Metadata& draft, int draft_n_vocab);

class DraftProposer final : public Proposer {
 public:
  static Result<std::unique_ptr<DraftProposer>> create(const Model& target, const Model& draft, ThreadPool& pool,
                                                       const DraftConfig& cfg);

  SpecMethod method() const override { return cfg_.method; }
  Status propose(const std::vector<ProposeItem>& items) override;
  void release(const Request& r) override;

  int64_t n_forwards() const { return n_forwards_; }      // draft forward passes so far
  int64_t n_tokens_run() const { return n_tokens_run_; }  // tokens through the draft model so far
  int n_tracked() const { return static_cast<int>(seqs_.size()); }  // requests holding draft KV
  int32_t n_used_blocks() const { return kv_->n_used_blocks(); }
  int draft_logits_width() const { return runner_->n_vocab(); }  // a truncated head's rows, else n_vocab

  // Takes the target's pages as the source of the draft's K/V (see the top)
  // when every draft layer is shared (shared_kv_layers) and both pools store
  // rows alike (formats, row bytes, block size; not token-group keys). False, and
  // nothing set, otherwise. The donor must outlive the proposer.
  bool set_kv_donor(const KvDonor& donor);
  bool has_kv_donor() const { return donor_.pool != nullptr; }
  int64_t n_tokens_copied() const { return n_tokens_copied_; }  // K/V positions copied from the donor so far
  // With a donor and the target's whole stack as the draft (no layer
  // skipped; a truncated head): the draft's final residual rows and K/V of
  // the positions it ran are handed to the target's verification
  // (before_verify), which then runs only the last draft token through the
  // layers and the full head over all rows.
  bool hands_over_rows() const { return donor_.pool != nullptr && whole_stack_; }
  void before_verify(std::vector<ScheduledRequest>& slices) override;
  int64_t n_rows_handed() const { return n_rows_handed_; }  // verification positions not recomputed so far

 private:
  struct Seq {
    const Request* req = nullptr;
    Request shadow;  // the draft's view: the request's tokens + drafts; num_computed_tokens in draft KV
    std::mt19937_64 rng;
    uint64_t last_used = 0;
    // This step's final residual rows [rows, n_embd] of positions
    // hidden_pos0 .. (whole-stack drafts only).
    std::vector<float> hidden;
    int64_t hidden_pos0 = -1;
    uint64_t hidden_step = 0;
    // Context tokens the truncated head lacks, and their rows of the full
    // head (base type) [extra.size(), row bytes]; context scanned so far.
    std::vector<int32_t> extra;
    std::vector<uint8_t> extra_rows;
    std::unordered_set<int32_t> extra_set;
    int64_t scanned = 0;
  };
  DraftProposer(const DraftConfig& cfg, int n_vocab) : cfg_(cfg), n_vocab_(n_vocab) {}
  Seq& sync(const Request& r);
  void drop(uint64_t seq_id);
  // Frees the draft KV of requests not drafting in this step; false if none.
  bool evict_idle();
  int32_t draw(Seq& s, float* row, std::vector<float>* q);
  // New context tokens of r outside the head into s.extra (at most
  // context_tokens); the logits of s.extra from residual row h into row.
  void scan_context(Seq& s, const Request& r);
  void score_context(Seq& s, const float* h, float* row);
  // The donor's rows of r's computed final tokens past the draft's.
  void copy_from_donor(const Request& r, Request& sh);

  DraftConfig cfg_;
  int n_vocab_;
  std::vector<int32_t> draft_head_tokens_;  // a truncated draft head's tokens (empty: full)
  std::vector<float> full_row_;             // [n_vocab] its scores spread over the vocabulary
  std::unique_ptr<CpuModelRunner> runner_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;  // by Request::seq_id
  SamplerScratch scratch_;
  uint64_t step_ = 0;
  int64_t n_forwards_ = 0, n_tokens_run_ = 0, n_tokens_copied_ = 0, n_rows_handed_ = 0;
  int shared_layers_ = 0;  // shared_kv_layers(target, draft)
  int n_draft_layers_ = 0;
  bool whole_stack_ = false;  // the draft's layers are all the target's layers
  int64_t n_embd_ = 0;
  // Context tokens (see the top): the target's full head and output norm,
  // which tokens the truncated head has, a backend (DraftConfig::backend)
  // for the norm, the matmul and the softcap.
  const Model* target_ = nullptr;
  bool context_ = false;
  std::vector<uint8_t> in_head_;  // [n_vocab]
  std::unique_ptr<Backend> backend_;
  std::vector<float> xn_, ctx_logits_;
  KvDonor donor_;
  std::vector<KvOp> pending_ops_;  // page ops of a copy's allocation, applied by the next forward
};

}  // namespace ember
