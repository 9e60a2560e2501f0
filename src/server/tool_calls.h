// Tool calling for `ember serve`: the model's output text is parsed into
// OpenAI `tool_calls` for the common formats, incrementally, so that a
// streamed answer (text arriving in fragments of any size) yields exactly
// the same content and calls as the whole text parsed at once:
//   hermes       Hermes / Qwen: <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>, repeated
//   llama3_json  Llama 3.x: {"name": .., "parameters": {..}} (optionally after <|python_tag|>,
//                several separated by ';'), the whole output being the call(s)
//   mistral      Mistral: [TOOL_CALLS][{"name": .., "arguments": {..}}, ...] or the v11 form
//                [TOOL_CALLS]name[ARGS]{..}
// A call block that does not parse (invalid JSON, no name) is passed through
// as content, never dropped, unless the text was cut inside it (max_tokens,
// a stop string): partial markup is not content.
//
// Streaming: a call is committed as soon as its head
// `{"name": "...", "arguments": {` (llama3_json: "parameters"; mistral v11:
// `name[ARGS]{`) has been read: its name is reported then, and its
// arguments as they arrive (whitespace between JSON tokens removed), so a
// client sees the id and name first and the arguments in fragments. A
// committed call stands even if the text stops inside it (its arguments are
// then what was written). In llama3_json and mistral the calls are a list
// (objects separated by ';', a JSON array, one object, or v11 calls): after
// a committed call, the next object (or the list's end) follows; text that
// is neither ends the list and is content. A block or list whose first head
// reads otherwise (another key order, quoted arguments) is parsed whole when
// it ends and reported at once, all or nothing, as before streaming. Also:
// the grammar that forces a call in a format (tool_choice "required" or a
// named function) and the format a chat template implies
// (--tool-call-parser auto).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// kHarmony (gpt-oss): calls are commentary messages to functions.NAME,
// parsed with the rest of the harmony structure by ReasoningParser
// (server/reasoning.h); ToolCallParser passes the text through.
enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral, kHarmony };

// "none", "hermes", "llama3_json", "mistral", "gpt_oss" (not "auto": see detect_tool_call_format).
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat f);
// The format a chat template writes tool calls in (kNone if it shows none).
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object
  bool operator==(const ToolCall&) const = default;
};

// One piece of parser output, in order: content text (call < 0), or the
// start of call `call` (its name; calls are numbered 0, 1, ... in order) or
// a fragment of its arguments text (name empty).
struct ToolCallEvent {
  int call = -1;
  std::string name;
  std::string text;
};

// Folds events into content and calls (calls indexed by ToolCallEvent::call).
void apply_tool_call_events(const std::vector<ToolCallEvent>& events, std::string* content,
                            std::vector<ToolCall>* calls);

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat f) : format_(f) {}
  // Feeds model text: appends what can be shown now to *out.
  void push(std::string_view text, std::vector<ToolCallEvent>* out);
  // The end of the output: whatever was held back. `cut`: max_tokens or a
  // stop string ended the text: a call block left open that is not a call
  // (`<tool_call>\n{` and the like) and a partial marker are dropped, never
  // shown as content (a committed call stands, see above).
  void finish(std::vector<ToolCallEvent>* out, bool cut = false);
  // The same folded (apply_tool_call_events) into *content and *calls (all
  // the calls so far: pass the same vector every time).
  void push(std::string_view text, std::string* content, std::vector<ToolCall>* calls);
  void finish(std::string* content, std::vector<ToolCall>* calls, bool cut = false);
  // After finish(): the output ended inside a committed call's arguments.
  bool cut() const { return cut_; }
  // Texts of control tokens that carry meaning for this format (passed to
  // the parser even when special tokens are not shown).
  bool is_marker(std::string_view token_text) const;

 private:
  enum class Head { kNo, kPartial, kYes };
  // A block being read: head not read yet, parsed whole at its end, or a
  // committed call in its arguments / past them.
  enum class Stream { kUndecided, kWhole, kArgs, kTail };
  static Head parse_head(std::string_view s, std::string* name, size_t* args_at);
  bool stream_call(std::string_view close);
  // The llama3_json / mistral call lists (see above).
  enum class List { kNone, kLlama3, kMistral, kArray, kSingle, kV11 };
  void start_list(List kind);
  void stream_list();
  void end_list();
  void commit(std::string name, size_t args_at, int tail_depth);
  bool stream_object();
  bool finish_list(bool cut);
  bool is_partial_marker(std::string_view s) const;
  void content(std::string_view s);
  void emit_content(std::string_view s);
  void add_call(ToolCall call);
  void push_marked(std::string_view open, std::string_view close);
  void push_llama3();
  bool finish_llama3();
  bool finish_mistral();

  std::vector<ToolCallEvent>* out_ = nullptr;  // the events of the current push / finish
  int n_calls_ = 0;
  Stream stream_ = Stream::kUndecided;
  int call_ = -1;  // the committed call
  int depth_ = 0;  // nesting inside its arguments
  bool in_string_ = false, escape_ = false;
  bool cut_ = false;
  List list_ = List::kNone;
  int list_calls_ = 0;     // calls committed in the current list
  bool expect_obj_ = true; // at the list's start or after a separator
  int tail_depth_ = 0;     // nesting of the call object around its arguments

  ToolCallFormat format_;
  std::string buf_;         // text held back
  std::string ws_;          // whitespace-only content held until something else follows
  bool in_call_ = false;    // inside a call block (after its opening marker)
  bool decided_ = false;    // llama3_json: the output's first non-space text was seen
  bool any_call_ = false;
  bool strip_leading_ = false;  // whitespace right after a call is not content
};

// GBNF that admits exactly the tool calls of `format` for the given call
// object grammar: `call_gbnf` is GBNF text whose root rule (`root`) is one
// JSON object {"name": .., "arguments" (or "parameters"): ..}. `parallel`:
// one or more calls, else exactly one. Whitespace between JSON tokens is
// at most one space.
std::string tool_call_gbnf(ToolCallFormat format, const std::string& call_gbnf, bool parallel);
// The arguments key of a format's calls ("parameters" for llama3_json).
const char* tool_arguments_key(ToolCallFormat format);

}  // namespace ember
