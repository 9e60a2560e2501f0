// Speculative decoding in the engine's step: propose, verify, the costs of
// adaptive k; see speculator.h.
#include "engine/speculative/speculator.h"

#include <algorithm>
#include <chrono>

#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/ngram_first.h"

namespace ember {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

NgramConfig SpecConfig::ngram() const {
  NgramConfig nc;
  nc.min_n = ngram_min;
  nc.max_n = ngram_max;
  nc.k_by_match = ngram_k_by_match;
  return nc;
}

Status SpecConfig::validate() const {
  if (method == SpecMethod::kNone) return Status::ok();
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpecTokens)
    return Status::errorf("number of speculative tokens must be in [1, {}] (got {})", kMaxSpecTokens,
                          num_speculative_tokens);
  if (max_running < 0) return Status::errorf("speculation max running must be >= 0 (got {})", max_running);
  if (!(draft_cost < 100) || !(verify_cost < 100))
    return Status::errorf("speculation costs out of range (draft {}, verify {})", draft_cost, verify_cost);
  if (uses_draft_model() && !draft_model)
    return Status::errorf("speculative method '{}' needs a draft model", spec_method_name(method));
  if (draft_context_tokens < 0 || draft_context_tokens > (1 << 20))
    return Status::errorf("draft context tokens must be in [0, {}] (got {})", 1 << 20, draft_context_tokens);
  if (ngram_first < 0 || ngram_first > 64)
    return Status::errorf("n-gram-first match length must be in [0, 64] (got {})", ngram_first);
  if (draft_k < 0 || draft_k > kMaxSpecTokens)
    return Status::errorf("draft model tokens must be in [0, {}] (got {})", kMaxSpecTokens, draft_k);
  if ((ngram_first > 0 || draft_k > 0) && !uses_draft_model())
    return Status::errorf("n-gram first and draft model tokens are for the draft and layerskip methods, not '{}'",
                          spec_method_name(method));
  if (ngram_first > 0 || method == SpecMethod::kNgram) return ngram().validate();
  return Status::ok();
}

Result<std::unique_ptr<Proposer>> make_draft_proposer(const SpecConfig& cfg, const Model& target, ThreadPool& pool,
                                                      const DraftKvBase& base, const KvDonor& donor) {
  EMBER_RETURN_IF_ERROR(cfg.validate());
  if (!cfg.uses_draft_model()) return Status::errorf("speculative method '{}' has no draft model",
                                                     spec_method_name(cfg.method));
  DraftConfig dc;
  dc.block_size = base.block_size;
  // Drafting is for few sequences (the engine-wide switch-off): a quarter
  // of the target's budget by default.
  dc.kv_cache_bytes = cfg.draft_kv_cache_bytes > 0 ? cfg.draft_kv_cache_bytes : base.kv_cache_bytes / 4;
  dc.num_kv_blocks = cfg.draft_kv_cache_bytes > 0 ? 0 : base.num_kv_blocks;
  dc.max_batch = base.max_batch;
  dc.method = cfg.method;
  dc.kv_types = base.kv_types;
  dc.backend = base.backend;
  dc.context_tokens = cfg.draft_context_tokens;
  auto dp = DraftProposer::create(target, *cfg.draft_model, pool, dc);
  if (!dp) return dp.status();
  // A draft made of the target's own first layers copies the target's K/V
  // of final tokens instead of recomputing it (draft_proposer.h).
  if (cfg.share_kv) (void)dp.value()->set_kv_donor(donor);
  if (cfg.ngram_first > 0)
    return std::unique_ptr<Proposer>(
        std::make_unique<NgramFirstProposer>(cfg.ngram(), cfg.ngram_first, cfg.draft_k, std::move(dp.value())));
  return std::unique_ptr<Proposer>(std::move(dp.value()));
}

Speculator::Speculator(const SpecConfig& cfg, int n_vocab, int64_t max_seq_len)
    : cfg_(cfg), n_vocab_(n_vocab), max_seq_len_(max_seq_len) {
  if (cfg.method == SpecMethod::kNgram) proposer_ = std::make_unique<NgramProposer>(cfg.ngram());
}

Status Speculator::propose(const std::vector<Request*>& running) {
  propose_seconds_ = 0;
  propose_k_ = 0;
  if (!proposer_) return Status::ok();
  for (Request* r : running) {
    r->spec_tokens.clear();
    r->spec_q.clear();
  }
  if (cfg_.max_running > 0 && static_cast<int>(running.size()) > cfg_.max_running) return Status::ok();
  items_.clear();
  if (proposals_.size() < running.size()) proposals_.resize(running.size());
  for (Request* r : running) {
    int k = r->num_speculative_tokens >= 0 ? r->num_speculative_tokens : cfg_.num_speculative_tokens;
    // Decoding only (one token to compute), and never past max_tokens or
    // the sequence cap: at most k + 1 tokens are emitted.
    if (k <= 0 || r->n_fork > 0 || r->num_tokens() - r->num_computed_tokens != 1 || r->needs_prompt_rows()) continue;
    k = static_cast<int>(std::min<int64_t>({k, r->max_tokens - r->n_output() - 1, max_seq_len_ - r->num_tokens() - 1}));
    if (k <= 0) continue;
    if (cfg_.adaptive) {
      const double cd = cfg_.draft_cost >= 0 ? cfg_.draft_cost : draft_cost_;
      const double cv = cfg_.verify_cost >= 0 ? cfg_.verify_cost : step_cost_.verify_cost(0.05);
      const int k_max = k;
      k = spec_choose_k(spec_alpha(r->spec_acc), k, cd, cv);
      // A probe once the evidence has decayed (~11 steps at k = 0): one
      // draft, so acceptance and the measured cost are seen again.
      if (k == 0 && r->spec_acc.s + r->spec_acc.f < 0.5) k = std::min(k_max, 1);
      if (k == 0) {
        spec_idle(&r->spec_acc);
        continue;
      }
    }
    propose_k_ = std::max(propose_k_, k);
    items_.push_back({r, k, &proposals_[items_.size()]});
  }
  if (items_.empty()) return Status::ok();
  const double t0 = now_seconds();
  EMBER_RETURN_IF_ERROR(proposer_->propose(items_));
  propose_seconds_ = now_seconds() - t0;
  for (const ProposeItem& it : items_) {
    const Proposal& p = *it.out;
    if (static_cast<int>(p.tokens.size()) > it.max_k)
      return Status::errorf("proposer returned {} draft tokens, at most {} asked", p.tokens.size(), it.max_k);
    for (int32_t t : p.tokens)
      if (t < 0 || t >= n_vocab_) return Status::errorf("proposer returned token id {} out of range", t);
    if (!p.q.empty() && p.q.size() != p.tokens.size())
      return Status::errorf("proposer returned {} draft distributions for {} tokens", p.q.size(), p.tokens.size());
    for (const std::vector<float>& q : p.q)
      if (static_cast<int>(q.size()) != n_vocab_)
        return Status::errorf("proposer returned a draft distribution of {} entries, the vocabulary has {}", q.size(),
                              n_vocab_);
    Request* r = const_cast<Request*>(it.req);  // one of `running`
    r->spec_tokens = p.tokens;
    r->spec_q.swap(it.out->q);
  }
  return Status::ok();
}

void Speculator::before_verify(std::vector<ScheduledRequest>& slices) {
  if (proposer_) proposer_->before_verify(slices);
}

void Speculator::observe(const SchedulerOutput& so, double exec) {
  if (!proposer_ || !cfg_.adaptive) return;
  bool decode_only = true;
  int64_t n_run = so.n_tokens;  // positions the forward computed (given rows are not)
  for (const ScheduledRequest& sr : so.scheduled) {
    decode_only &= sr.n_tokens == 1 + sr.n_spec;
    n_run -= sr.n_pre;
  }
  if (decode_only && !so.scheduled.empty()) step_cost_.observe(n_run, exec);
  // Draft cost per draft step, relative to a one-token target step.
  const double one = step_cost_.one_token_seconds() > 0 ? step_cost_.one_token_seconds() : exec;
  if (propose_k_ > 0 && one > 0) draft_cost_ = 0.8 * draft_cost_ + 0.2 * (propose_seconds_ / propose_k_ / one);
}

// Point-mass drafts: the target's token at each position is sampled exactly
// as without speculation (logits processor, sampler, logprobs of the raw
// row); a draft is accepted iff it equals that token (rejection.h: the
// rejection rule for q = 1), and the first mismatch (or, all accepted, the
// token after the last draft) ends the burst, as does a token after which
// the logits processor forces a jump (the forced tokens follow it, not the
// drafts: the output is the same as without speculation).
Verification Speculator::verify(Request& r, float* rows, OutputProcessor& output, std::vector<int32_t>* forced,
                                std::vector<TokenEvent>* events) {
  const int V = n_vocab_;
  drafts_.assign(r.spec_tokens.begin(), r.spec_tokens.end());
  const int k = static_cast<int>(drafts_.size());
  // Drafts drawn from a distribution q: the rejection rule per position
  // (sample_draft), the bonus row sampled plainly.
  const bool with_q = r.spec_q.size() >= static_cast<size_t>(k);
  int accepted = 0;
  Verification v;
  for (int j = 0; j <= k; ++j) {
    float* row = rows + static_cast<size_t>(j) * V;
    bool match = false;
    if (with_q && j < k) {
      v.reason = output.sample_draft(r, row, drafts_[j], r.spec_q[static_cast<size_t>(j)].data(), &match, events);
    } else {
      v.reason = output.sample(r, row, events);
      match = j < k && r.tokens.back() == drafts_[j];
    }
    ++v.n_emitted;
    accepted += match;
    if (v.reason != FinishReason::kNone) break;  // a stop inside the burst drops the drafts after it
    // A forced-token jump ends the burst too: the forced tokens, not the
    // drafts, follow (as without speculation).
    output.forced(r, forced);
    if (!match || !forced->empty()) break;
  }
  if (v.reason != FinishReason::kNone) forced->clear();
  r.spec_q.clear();
  spec_observe(&r.spec_acc, k, accepted);
  ++counters_.n_verifications;
  counters_.n_draft_tokens += k;
  counters_.n_accepted_tokens += accepted;
  ++counters_.accepted_hist[static_cast<size_t>(accepted)];
  return v;
}

}  // namespace ember
