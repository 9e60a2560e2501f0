// Thinking budgets for reasoning models in `ember serve`: a LogitsProcessor
// that follows a sample through its thinking section (by the text of the
// tokens it accepts, so tags that are one token or several both work) and
//  - at the budget (N tokens accepted inside thinking) forces the end: the
//    budget message and the end-of-thinking text (harmony: <|end|> and the
//    final answer's header) follow as forced tokens (forced_tokens(); one at
//    a time through the mask when the engine takes no jumps, e.g. with
//    logprobs), so the answer comes after them and `content` is never empty
//    because thinking ran out;
//  - below a minimum, masks every token that would complete the end of
//    thinking, and the end-of-generation tokens;
//  - applies the request's output constraint (the inner processor: a
//    grammar for structured output or tool calls) to the answer only: no
//    token inside thinking is masked; the grammar starts after the end of
//    thinking and at most two whitespace-only tokens after it (harmony:
//    after the final channel's header, which is forced when a reasoning
//    message ends). Before a thinking section the model may choose to open
//    one (tokens that start the start tag, whose rest is then forced) or to
//    answer at once under the grammar (harmony: the analysis message is
//    opened for it). With a constraint the output cannot end inside
//    thinking: the end-of-generation tokens are masked there, the answer
//    must come.
// logit_bias is applied in every phase.
//
// Threading and ownership as for every LogitsProcessor
// (engine/logits_processor.h): one per sample, cloned from the request's
// prototype; the ThinkingSpec is shared, immutable apart from a cache
// guarded by its mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/logits_processor.h"

namespace ember {

class Tokenizer;

struct ThinkingSpec {
  std::string start;  // text that opens thinking: "<think>", or harmony's kHarmonyAnalysis
  std::string end;    // text that closes it: "</think>", or "<|end|>"
  bool harmony = false;
  bool open = false;  // the prompt left the model inside a thinking section
  int64_t budget = -1;      // thinking tokens before the forced end (-1: no budget)
  int64_t min_tokens = 0;   // the end of thinking is masked before this many
  std::vector<int32_t> close;          // forced at the budget: message + end (+ harmony's final header)
  std::vector<int32_t> answer_header;  // harmony with a constraint: forced after a reasoning message ends
  // harmony with a constraint: forced first when the prompt opened no
  // message ("<|channel|>analysis<|message|>": the model thinks, then answers
  // under the constraint).
  std::vector<int32_t> open_tokens;
  std::vector<int32_t> stop_ids;       // end-of-generation tokens (masked below the minimum)
  std::vector<std::pair<int32_t, float>> bias;  // logit_bias
  // Per token id: its text, control tokens included (shared by the service).
  std::shared_ptr<const std::vector<std::string>> pieces;
  // Tokens that are whitespace only, and tokens that start the start tag
  // (after optional whitespace), for the phase before thinking.
  std::shared_ptr<const std::vector<int32_t>> space_tokens;
  std::vector<int32_t> start_tokens;
  // Tokenizes the rest of the start tag once a token began it (must outlive
  // the processors; the server's does).
  const Tokenizer* tok = nullptr;

  // Tokens whose text completes `end` after its first k bytes (cached).
  const std::vector<int32_t>& end_completing(size_t k) const;

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::optional<std::vector<int32_t>>> completing_;
};

// Tokens of `pieces` whose text is whitespace only.
std::vector<int32_t> whitespace_tokens(const std::vector<std::string>& pieces);
// Tokens whose text, without leading whitespace, starts `tag` or contains all of it at its start.
std::vector<int32_t> tag_start_tokens(const std::vector<std::string>& pieces, const std::string& tag);

class ThinkingLogits final : public LogitsProcessor {
 public:
  // `inner`: the answer's constraint (nullptr: none); its logit_bias must be
  // empty (the spec's is applied here).
  ThinkingLogits(std::shared_ptr<const ThinkingSpec> spec, std::unique_ptr<LogitsProcessor> inner);

  void process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits, int n_vocab) override;
  void accept(int32_t token) override;
  void forced_tokens(std::vector<int32_t>* out) override;
  std::unique_ptr<LogitsProcessor> clone() const override;

  enum class Phase { kBefore, kThinking, kForcing, kSeparator, kAnswer };
  Phase phase() const { return phase_; }
  int64_t thinking_tokens() const { return count_; }

 private:
  void enter_thinking();
  void end_thinking();
  void force(const std::vector<int32_t>& toks, Phase after);
  // Runs the inner processor's mask but keeps the logits of `keep` tokens.
  void inner_with(const std::vector<int32_t>* keep_a, const std::vector<int32_t>* keep_b, const int32_t* tokens,
                  int64_t n_tokens, int64_t n_prompt, float* logits, int n_vocab);

  std::shared_ptr<const ThinkingSpec> spec_;
  std::unique_ptr<LogitsProcessor> inner_;
  Phase phase_ = Phase::kBefore;
  int64_t count_ = 0;           // tokens accepted inside thinking
  std::string text_;            // kBefore: text since the phase began; kThinking: its recent tail
  std::vector<int32_t> forced_;  // kForcing: the tokens, and how many are in
  size_t pos_ = 0;
  Phase after_ = Phase::kAnswer;
  int n_space_ = 0;             // whitespace-only tokens in kBefore / kSeparator
  std::vector<std::pair<int32_t, float>> saved_;
};

}  // namespace ember
