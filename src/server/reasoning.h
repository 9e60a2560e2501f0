// Reasoning ("thinking") output of chat models for `ember serve`: which
// syntax a model's chat template uses, and an incremental parser that splits
// the model's text into reasoning and answer, so that a streamed answer (text
// arriving in fragments of any size) gives exactly the same reasoning,
// content and tool calls as the whole text parsed at once.
//
//   think tags  DeepSeek-R1 (and its distills), QwQ, Qwen3, ...:
//               [<think>] reasoning </think> answer. The opening tag may be
//               written by the template (R1, QwQ: the prompt ends with
//               "<think>\n") or by the model (Qwen3); R1-0528 writes it
//               again after the template did, which is accepted.
//   harmony     gpt-oss: messages <|channel|>analysis<|message|>...<|end|>
//               (reasoning), <|start|>assistant<|channel|>final<|message|>...
//               (the answer), and tool calls on the commentary channel:
//               <|channel|>commentary to=functions.NAME <|constrain|>json
//               <|message|>{...}<|call|> (the recipient may also follow the
//               role: <|start|>assistant to=functions.NAME<|channel|>...).
//
// Where the model starts (inside an opened thinking section or not) is read
// from the end of the rendered prompt (initial_phase), so the parser does not
// guess from the output. Reasoning text has its leading and trailing
// whitespace trimmed; the answer starts after the whitespace that follows the
// end of thinking. Text the parser holds back: a possible start of a tag and
// trailing whitespace of the reasoning.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

enum class ReasoningFormat { kNone, kThinkTags, kHarmony };

struct ReasoningSyntax {
  ReasoningFormat format = ReasoningFormat::kNone;
  std::string start;           // think tags: "<think>"
  std::string end;             // think tags: "</think>"
  bool implicit_open = false;  // deepseek_r1: the output starts in thinking unless the prompt closed it
  bool operator==(const ReasoningSyntax&) const = default;
};

// --reasoning-parser names: "none", "deepseek_r1" (also "deepseek-r1"),
// "qwen3" (also "think"), "gpt_oss" (also "gpt-oss", "harmony"). Not "auto"
// (see detect_reasoning_syntax).
std::optional<ReasoningSyntax> reasoning_syntax_from_name(std::string_view name);
const char* reasoning_parser_name(const ReasoningSyntax& s);
// The syntax a chat template implies: harmony when it writes
// "<|channel|>" messages, think tags when it mentions "</think>", else none.
ReasoningSyntax detect_reasoning_syntax(std::string_view chat_template);

// harmony markers.
inline constexpr std::string_view kHarmonyStart = "<|start|>";
inline constexpr std::string_view kHarmonyChannel = "<|channel|>";
inline constexpr std::string_view kHarmonyMessage = "<|message|>";
inline constexpr std::string_view kHarmonyEnd = "<|end|>";
inline constexpr std::string_view kHarmonyCall = "<|call|>";
inline constexpr std::string_view kHarmonyReturn = "<|return|>";
inline constexpr std::string_view kHarmonyConstrain = "<|constrain|>";
// The text that opens a reasoning message and the one that opens the answer.
inline constexpr std::string_view kHarmonyAnalysis = "<|channel|>analysis<|message|>";
inline constexpr std::string_view kHarmonyFinal = "<|channel|>final<|message|>";

// One piece of parser output, in order: reasoning text, answer text, the
// start of tool call `call` (text: its name) or a fragment of its arguments.
struct ReasoningEvent {
  enum class Kind { kReasoning, kContent, kCallStart, kCallArgs };
  Kind kind = Kind::kContent;
  int call = -1;
  std::string text;
};

class ReasoningParser {
 public:
  // kStart: the output may still open a thinking section; kThinking: inside
  // one; kAnswer: after it (or it never came). harmony: kStart between
  // messages (headers), kThinking in reasoning messages, kAnswer in the
  // others.
  enum class Phase { kStart, kThinking, kAnswer };

  // `prompt`: the rendered prompt (only its end is read) to start from the
  // state it leaves the model in.
  ReasoningParser(ReasoningSyntax syntax, std::string_view prompt);

  // Feeds model text: appends what can be shown now to *out.
  void push(std::string_view text, std::vector<ReasoningEvent>* out);
  // The end of the output: whatever was held back.
  void finish(std::vector<ReasoningEvent>* out);
  Phase phase() const { return phase_; }
  // Texts of control tokens that carry meaning for this syntax (passed to
  // the parser even when special tokens are not shown).
  bool is_marker(std::string_view token_text) const;

 private:
  void push_tags();
  void push_harmony();
  void reasoning(std::string_view s);  // trailing whitespace held back in ws_
  void content(std::string_view s);
  void emit(ReasoningEvent::Kind k, std::string_view s, int call = -1);
  void open_body();
  void body_text(std::string_view s);
  void close_body();

  ReasoningSyntax syntax_;
  Phase phase_ = Phase::kStart;
  std::vector<ReasoningEvent>* out_ = nullptr;
  std::string buf_;             // text held back
  std::string ws_;              // trailing whitespace of the reasoning, held
  bool reasoning_started_ = false;  // non-space reasoning text was emitted
  bool strip_lead_ = false;     // drop whitespace before the next text (start of reasoning / answer)
  // harmony
  enum class Body { kNone, kReasoning, kContent, kCall };
  bool in_body_ = false;
  Body body_ = Body::kNone;
  std::string header_;          // the current message's header (role, channel, recipient)
  bool header_generated_ = false;  // the model wrote part of the current header
  bool raw_ = false;            // the output does not follow harmony: all content
  int n_calls_ = 0;
  bool in_string_ = false, escape_ = false;  // inside the JSON arguments of a call
};

}  // namespace ember
