// Sampling, log-probabilities, forks and stop decisions; see output_processor.h.
#include "engine/output_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/speculative/rejection.h"
#include "kernels/ops.h"

namespace ember {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

// One pass with a small sorted buffer.
TopLogprobs top_k_logprobs(const float* lg, int n, int k, double lse) {
  TopLogprobs top;  // ascending by (logit, -id) while scanning
  top.reserve(k + 1);
  auto less = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second < b.second || (a.second == b.second && a.first > b.first);
  };
  for (int j = 0; j < n; ++j) {
    if (static_cast<int>(top.size()) == k && !(lg[j] > top.front().second)) continue;
    std::pair<int32_t, float> e{j, lg[j]};
    top.insert(std::upper_bound(top.begin(), top.end(), e, less), e);
    if (static_cast<int>(top.size()) > k) top.erase(top.begin());
  }
  std::reverse(top.begin(), top.end());
  for (auto& e : top) e.second = static_cast<float>(e.second - lse);
  return top;
}

OutputProcessor::OutputProcessor(int n_vocab, int64_t max_seq_len) : n_vocab_(n_vocab), max_seq_len_(max_seq_len) {
  set_slots(1);
}

void OutputProcessor::set_slots(int n) {
  n = std::max(1, n);
  while (static_cast<int>(slots_.size()) < n) slots_.push_back(std::make_unique<Slot>());
  slots_.resize(static_cast<size_t>(n));
}

void OutputProcessor::init_sampler(Request& r) {
  r.sampler = std::make_unique<Sampler>(r.sampling);
  r.sampler->use_scratch(&slots_[0]->sampler);
  for (int32_t t : r.tokens) r.sampler->accept(t);
}

void OutputProcessor::prompt_logprobs(Request& r, int64_t pos0, int64_t n, const float* rows,
                                      std::vector<PromptLogprobEvent>* out) {
  const int V = n_vocab_;
  PromptLogprobEvent ev;
  ev.id = r.id;
  ev.first = r.n_prompt_lp_done;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t q = pos0 + j + 1;
    if (q != r.n_prompt_lp_done || q >= r.n_prompt) continue;
    const float* lg = rows + static_cast<size_t>(j) * V;
    const double lse = log_sum_exp_row(lg, V);
    ev.logprobs.push_back(static_cast<float>(lg[r.tokens[q]] - lse));
    ev.top.push_back(r.prompt_logprobs > 0 ? top_k_logprobs(lg, V, r.prompt_logprobs, lse) : TopLogprobs{});
    ++r.n_prompt_lp_done;
  }
  if (!ev.logprobs.empty()) out->push_back(std::move(ev));
}

FinishReason OutputProcessor::sample(Request& r, float* lg, std::vector<TokenEvent>* out) {
  Choice c;
  choose(r, lg, 0, &c);
  return commit(r, c, out);
}

void OutputProcessor::choose(Request& r, float* lg, int slot, Choice* c) {
  Slot& s = *slots_[static_cast<size_t>(slot)];
  c->lse = prepare(r, lg, s);
  r.sampler->use_scratch(&s.sampler);
  c->token = r.sampler->sample(lg, n_vocab_);
  r.sampler->use_scratch(&slots_[0]->sampler);
  logprobs(r, s, c);
}

void OutputProcessor::logprobs(const Request& r, const Slot& s, Choice* c) const {
  c->logprob = std::numeric_limits<float>::quiet_NaN();
  c->top.clear();
  if (r.want_logprobs) c->logprob = static_cast<float>(s.raw[c->token] - c->lse);
  if (r.top_logprobs > 0) c->top = top_k_logprobs(s.raw.data(), n_vocab_, r.top_logprobs, c->lse);
}

FinishReason OutputProcessor::sample_draft(Request& r, float* lg, int32_t draft, const float* q, bool* accepted,
                                           std::vector<TokenEvent>* out) {
  const int V = n_vocab_;
  Slot& s = *slots_[0];
  Choice c;
  c.lse = prepare(r, lg, s);
  p_.resize(V);
  r.sampler->distribution(lg, V, p_.data());
  const double u = r.sampler->uniform();
  int32_t tok = draft;
  *accepted = spec_accept(p_[draft], q[draft], u);
  if (!*accepted) tok = spec_residual_sample(p_.data(), q, draft, V, r.sampler->uniform());
  c.token = tok;
  logprobs(r, s, &c);
  return commit(r, c, out);
}

// Before a token is chosen from row lg: the raw row's log-sum-exp and a copy
// of it (log-probabilities), then the logits processor.
double OutputProcessor::prepare(Request& r, float* lg, Slot& s) {
  const int V = n_vocab_;
  double lse = 0;
  if (r.want_logprobs) {
    // log-sum-exp of the raw logits, before sampling modifies them in place.
    lse = log_sum_exp_row(lg, V);
    s.raw.assign(lg, lg + V);
  }
  if (r.logits_processor) r.logits_processor->process(r.tokens.data(), r.num_tokens(), r.n_prompt, lg, V);
  return lse;
}

// The chosen token joins the request: sampler and processor state, tokens,
// log-probabilities, the event; then the stop / length decision.
FinishReason OutputProcessor::commit(Request& r, Choice& c, std::vector<TokenEvent>* out) {
  const int32_t tok = c.token;
  r.sampler->accept(tok);
  if (r.logits_processor) r.logits_processor->accept(tok);
  r.tokens.push_back(tok);
  if (r.want_logprobs) r.logprobs.push_back(c.logprob);
  out->push_back({r.id, r.index, tok, c.logprob, std::move(c.top), r.n_output() == 1 ? r.queue_seconds : -1.0});
  if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), tok) != r.stop_token_ids.end())
    return FinishReason::kStop;
  if (r.n_output() >= r.max_tokens || r.num_tokens() >= max_seq_len_) return FinishReason::kLength;
  return FinishReason::kNone;
}

void OutputProcessor::forced(Request& r, std::vector<int32_t>* toks) {
  toks->clear();
  if (r.logits_processor && !r.want_logprobs) r.logits_processor->forced_tokens(toks);
}

FinishReason OutputProcessor::append_forced(Request& r, const std::vector<int32_t>& toks,
                                            std::vector<TokenEvent>* out) {
  if (toks.empty()) return FinishReason::kNone;
  for (int32_t tok : toks) {
    if (tok < 0 || tok >= n_vocab_) break;
    // A stop token is never forced (the grammar admits no end-of-generation token).
    if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), tok) != r.stop_token_ids.end()) break;
    if (r.n_output() >= r.max_tokens || r.num_tokens() >= max_seq_len_) break;
    r.sampler->accept(tok);
    r.logits_processor->accept(tok);
    r.tokens.push_back(tok);
    ++r.n_forced;
    TokenEvent ev{r.id, r.index, tok, std::numeric_limits<float>::quiet_NaN(), {}, -1.0};
    ev.forced = true;
    out->push_back(std::move(ev));
  }
  if (r.n_output() >= r.max_tokens || r.num_tokens() >= max_seq_len_) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::unique_ptr<Request> OutputProcessor::fork(const Request& p, int k) {
  auto c = std::make_unique<Request>();
  c->id = p.id;
  c->index = k;
  c->sampling = p.sampling;
  c->sampling.seed = p.sampling.seed + static_cast<uint64_t>(k);
  c->tokens = p.tokens;
  c->n_prompt = p.n_prompt;
  c->num_computed_tokens = p.num_computed_tokens;
  init_sampler(*c);
  if (p.logits_processor) c->logits_processor = p.logits_processor->clone();
  c->max_tokens = p.max_tokens;
  c->stop_token_ids = p.stop_token_ids;
  c->want_logprobs = p.want_logprobs;
  c->top_logprobs = p.top_logprobs;
  c->priority = p.priority;
  c->arrival = p.arrival;
  c->n_cached_prompt = p.n_cached_prompt;
  c->t_arrival = p.t_arrival;
  c->queue_seconds = p.queue_seconds;
  return c;
}

}  // namespace ember
