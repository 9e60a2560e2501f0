// The text pipeline of one chat or completion choice in `ember serve`:
// token ids -> text (streaming detokenizer; control tokens that mark
// reasoning or tool calls are kept even when special tokens are hidden) ->
// stop strings (held back until they cannot match) -> reasoning parser
// (thinking apart from the answer, server/reasoning.h) -> tool-call parser
// (server/tool_calls.h), as one ordered list of events. Fed token by token,
// so tokens can be attributed to the thinking section (reasoning_tokens in
// usage). The same tokens give the same events whatever the updates they
// arrive in: a streamed answer is the non-streamed one in pieces.
//
// Threading: one ChoiceOutput per choice, used under its job's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning.h"
#include "server/stop_matcher.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace ember {

struct OutputEvent {
  enum class Kind { kReasoning, kContent, kCall };
  Kind kind = Kind::kContent;
  int call = -1;     // kCall: the call's index (0, 1, ...)
  std::string name;  // kCall: the call's name when it starts, else ""
  std::string text;  // text, or a fragment of the call's arguments
};

struct ChoiceOutputOptions {
  bool skip_special_tokens = true;
  std::vector<std::string> stop;
  // Reasoning parsing (kNone: the text is all content) and the rendered
  // prompt whose end says where the model starts.
  ReasoningSyntax reasoning;
  std::string prompt;
  // Tool-call parsing of the answer (kNone: none). harmony calls come from
  // the reasoning parser (commentary messages to functions).
  ToolCallFormat tools = ToolCallFormat::kNone;
};

class ChoiceOutput {
 public:
  ChoiceOutput(const Tokenizer& tok, const ChoiceOutputOptions& opts);
  ~ChoiceOutput();

  // One generated token: appends the events it completes to *out and
  // returns the token's text as decoded (for log-probabilities). Nothing is
  // produced once a stop string has matched.
  std::string push(int32_t token, std::vector<OutputEvent>* out);
  // The end of the output: whatever was held back. `cut`: max_tokens ended
  // it (a stop string is known here): a tool-call block left open is
  // dropped, never shown as content.
  void finish(bool cut, std::vector<OutputEvent>* out);

  bool stopped() const { return stop_.stopped(); }
  // Tokens generated inside the thinking section (its tags included).
  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  // After finish(): a tool call was cut inside its arguments.
  bool tool_call_cut() const { return tools_ && tools_->cut(); }

 private:
  void parse(std::string_view text, std::vector<OutputEvent>* out);
  void tool_events(std::vector<ToolCallEvent>& ev, std::vector<OutputEvent>* out);
  bool is_marker(int32_t token) const;

  const Tokenizer& tok_;
  bool skip_special_;
  StreamDecoder dec_;
  StopMatcher stop_;
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  int64_t reasoning_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace ember
