// Forced tool calls (tool_choice "required" or a named function) in the
// harmony format of gpt-oss, whose calls are written with control tokens a
// grammar over text cannot produce: after the call's header
// "<|start|>assistant<|channel|>commentary to=functions." (forced by the
// thinking processor, server/thinking_budget.h), this processor takes the
// function's name under a grammar of the tools' names followed by a space,
// then forces "<|constrain|>json<|message|>" (the model's own control
// tokens), then applies the chosen tool's parameters grammar to the
// arguments; end-of-generation tokens (<|call|>) only once they are
// complete. Harmony markers are never admitted inside (a JSON string
// holding "<|end|>" would end the message). The result parses as one call
// (server/reasoning.h) whose arguments validate.
//
// Threading and ownership as for every LogitsProcessor; the Spec is shared
// and immutable.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/logits_processor.h"
#include "grammar/token_mask.h"

namespace ember {

class HarmonyCallLogits final : public LogitsProcessor {
 public:
  struct Spec {
    // "name " for each tool that may be called (a ConstrainedLogits prototype, no end tokens).
    std::shared_ptr<const LogitsProcessor> names;
    // Per tool name: its arguments' grammar (a ConstrainedLogits prototype with the end tokens).
    std::vector<std::pair<std::string, std::shared_ptr<const LogitsProcessor>>> args;
    std::vector<int32_t> separator;  // "<|constrain|>json<|message|>", tokenized with its control tokens
    std::shared_ptr<const grammar::TokenVocab> vocab;  // each token's bytes (to read the name)
    // Tokens never admitted in the name or the arguments: harmony markers
    // that are text in the vocabulary (<|end|>), which would end the message.
    std::vector<int32_t> banned;
  };

  explicit HarmonyCallLogits(std::shared_ptr<const Spec> spec);

  void process(const int32_t* tokens, int64_t n_tokens, int64_t n_prompt, float* logits, int n_vocab) override;
  void accept(int32_t token) override;
  void forced_tokens(std::vector<int32_t>* out) override;
  std::unique_ptr<LogitsProcessor> clone() const override;

 private:
  enum class Phase { kName, kSeparator, kArgs };
  std::shared_ptr<const Spec> spec_;
  Phase phase_ = Phase::kName;
  std::unique_ptr<LogitsProcessor> inner_;  // the names' or the arguments' grammar
  std::string name_;                        // the name written so far
  size_t pos_ = 0;                          // kSeparator: tokens of it accepted
};

}  // namespace ember
