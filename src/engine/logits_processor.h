// LogitsProcessor: a per-request hook that edits the logits row of each
// sampled position before the sampler sees it (structured output grammars
// will mask tokens here; logit_bias, banned tokens and forced tokens are
// other uses). Log-probabilities reported to the client are those of the
// raw logits, before any processor (vLLM's default "raw_logprobs").
//
// Ownership and threading: a request's samples each own one processor
// (cloned from the prototype in RequestParams at admission, and from the
// parent's at a fork). process() may run on any thread of the engine's
// pool, at the same time as other samples' processors (never two calls on
// one processor at once, and each call happens-after the previous call to
// any method of it); the other methods run on the engine thread. State a
// processor shares with others (a compiled grammar's cache) must be
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace ember {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // Edits logits [n_vocab] in place for the position after tokens[0 ..
  // n_tokens) (the prompt is tokens[0 .. n_prompt)).
  virtual void process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits, int n_vocab) = 0;
  // The sampled token was appended to the request (advance the state).
  // Only final tokens are accepted: a speculative verification samples the
  // target's token at each position and stops at the first that differs
  // from the draft, so a rejected draft never reaches a processor (nothing
  // to roll back).
  virtual void accept(int32_t token) {}
  // Forced-token jump: the tokens the constraint admits as the only
  // continuation after the accepted ones (JSON keys, punctuation, closing
  // brackets), appended to *out, tokenized as the model would write them.
  // The engine appends them unsampled (each through accept()) and computes
  // them as one chunk in the next step. Default: none.
  virtual void forced_tokens(std::vector<int32_t>* out) {}
  // An independent copy in the same state (a forked sample, n > 1).
  virtual std::unique_ptr<LogitsProcessor> clone() const = 0;
};

}  // namespace ember
