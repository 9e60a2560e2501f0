// OutputProcessor: turns the logits rows of a step into client-visible
// output: prompt log-probabilities, the per-request logits processor hook,
// sampling (each request's own Sampler: seeded RNG and penalty history),
// log-probabilities and top alternatives of the sampled token, forks of
// parallel samples (n > 1), and the stop / length decision. It does not
// touch the KV cache or the queues: the Engine acts on what it reports.
//
// Threading: engine thread only, except choose(), which the engine may run
// for different requests on the threads of its pool at once (each thread
// with its own slot of scratch). It owns the vocabulary-sized scratch the
// samplers share, one per slot (a sequence costs no vocabulary-sized memory).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"

namespace ember {

constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit

using TopLogprobs = std::vector<std::pair<int32_t, float>>;  // (token, logprob), most likely first

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);

struct TokenEvent {
  std::string id;
  int index;      // sample index (0 .. n-1)
  int32_t token;
  float logprob;  // log-softmax of the raw logits at `token`; NaN unless requested
  TopLogprobs top;  // the top_logprobs most likely tokens (empty unless requested)
  double queue_seconds = -1;  // with a sequence's first token: its wait before first scheduled
  bool forced = false;        // appended by a forced-token jump (not sampled; logprob NaN)
};

// Log-probabilities of prompt tokens [first, first + logprobs.size()).
struct PromptLogprobEvent {
  std::string id;
  int64_t first = 1;
  std::vector<float> logprobs;
  std::vector<TopLogprobs> top;
};

// The k largest logits as (token, logit - lse), largest first (lowest id
// first on ties).
TopLogprobs top_k_logprobs(const float* logits, int n, int k, double lse);

// A token chosen from a logits row, with what its event reports.
struct Choice {
  int32_t token = -1;
  double lse = 0;  // log-sum-exp of the raw row (want_logprobs)
  float logprob = std::numeric_limits<float>::quiet_NaN();
  TopLogprobs top;
};

class OutputProcessor {
 public:
  // max_seq_len: prompt + output cap (a sequence reaching it ends with kLength).
  OutputProcessor(int n_vocab, int64_t max_seq_len);

  int n_vocab() const { return n_vocab_; }
  // Scratch slots for choose() (>= 1; slot 0 is the engine thread's).
  void set_slots(int n);

  // A fresh sampler for r (its seed and parameters), sharing this
  // processor's scratch, with r's tokens accepted as context.
  void init_sampler(Request& r);

  // Log-probabilities of the prompt tokens predicted by the rows of a
  // slice [pos0, pos0 + n) (row j predicts the token at pos0 + j + 1),
  // those not reported yet; appended to *out when any.
  void prompt_logprobs(Request& r, int64_t pos0, int64_t n, const float* rows,
                       std::vector<PromptLogprobEvent>* out);

  // Samples r's next token from its logits row (modified in place): the
  // logits processor, the sampler, log-probabilities of the raw row; the
  // token is appended to r.tokens and reported in *out. Returns why r ends
  // now (kStop: a stop token; kLength: max_tokens or max_seq_len), or kNone.
  FinishReason sample(Request& r, float* logits, std::vector<TokenEvent>* out);
  // sample() in two halves. choose(): the logits processor, the sampler and
  // the log-probabilities, with scratch slot `slot`; touches only r's
  // sampler and processor and the row, so choose() for different requests
  // may run at once on different slots. commit(): the rest (accept, the
  // token, its event, the stop / length decision), engine thread. Together
  // exactly sample().
  void choose(Request& r, float* logits, int slot, Choice* c);
  FinishReason commit(Request& r, Choice& c, std::vector<TokenEvent>* out);

  // Speculative verification of a draft token drawn from the draft
  // distribution q [n_vocab]: as sample() up to the target distribution p
  // (logits processor, penalties, temperature, top-k/top-p/min-p; the
  // sampler's distribution()), then the rejection rule (speculative/rejection.h)
  // with the sampler's RNG: *accepted and the draft is appended, or the
  // token drawn from normalized max(0, p - q) is. The appended token is
  // distributed exactly as p.
  FinishReason sample_draft(Request& r, float* logits, int32_t draft, const float* q, bool* accepted,
                            std::vector<TokenEvent>* out);

  // Forced-token jump after r's last token was chosen: the tokens r's
  // logits processor forces (LogitsProcessor::forced_tokens) into *toks
  // (cleared; empty for requests that want log-probabilities: forced tokens
  // have no logits row to take them from).
  void forced(Request& r, std::vector<int32_t>* toks);
  // Appends them unsampled, through the sampler's and the processor's
  // accept(), reported as forced events; at most what max_tokens and
  // max_seq_len leave. Returns kLength when the jump reaches the length
  // cap, else kNone.
  FinishReason append_forced(Request& r, const std::vector<int32_t>& toks, std::vector<TokenEvent>* out);

  // Sample k (1 <= k <= parent.n_fork) of a request whose prompt was just
  // computed: the same tokens and settings, seed + k, its own sampler and a
  // clone of the parent's logits processor. The caller gives it a seq_id
  // and KV state.
  std::unique_ptr<Request> fork(const Request& parent, int k);

 private:
  struct Slot {
    std::vector<float> raw;   // one raw logits row (logprobs)
    SamplerScratch sampler;   // lent to the sampler being used on this slot
  };
  double prepare(Request& r, float* logits, Slot& s);
  // The log-probabilities of c->token from the slot's raw row.
  void logprobs(const Request& r, const Slot& s, Choice* c) const;

  int n_vocab_;
  int64_t max_seq_len_;
  std::vector<float> p_;  // the target distribution (sample_draft)
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace ember
