// Tool-call parsing and grammars; see tool_calls.h.
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "grammar/json_schema.h"

namespace ember {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`
// (text that may still become the marker).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

// Index just past the JSON object or array starting at s[i], or npos when it
// does not end within s.
size_t json_value_end(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

// The arguments of a call as JSON text: an object is written compactly; a
// string that holds JSON (some models quote their arguments) is used as is.
std::optional<std::string> arguments_text(const ordered_json& a) {
  if (a.is_object()) return dump(a);
  if (a.is_string()) {
    const std::string s = a.get<std::string>();
    const ordered_json inner = ordered_json::parse(s, nullptr, false);
    if (!inner.is_discarded() && inner.is_object()) return s;
  }
  return std::nullopt;
}

// {"name": "...", "arguments" | "parameters": {...}} -> a call.
std::optional<ToolCall> call_from_json(const ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else {
    auto text = arguments_text(*args);
    if (!text) return std::nullopt;
    call.arguments = std::move(*text);
  }
  return call;
}

std::optional<ToolCall> call_from_text(std::string_view text) {
  const ordered_json j = ordered_json::parse(trim(text), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return call_from_json(j);
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    default: return "none";
  }
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (t.find(kMistralOpen) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (t.find(kPythonTag) != std::string_view::npos ||
      (t.find("ipython") != std::string_view::npos && t.find("\"parameters\"") != std::string_view::npos))
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

bool ToolCallParser::is_marker(std::string_view text) const {
  switch (format_) {
    case ToolCallFormat::kHermes: return text == kHermesOpen || text == kHermesClose;
    case ToolCallFormat::kMistral: return text == kMistralOpen || text == kMistralArgs;
    case ToolCallFormat::kLlama3Json: return text == kPythonTag;
    default: return false;
  }
}

// Content is written with its trailing whitespace held back: whitespace
// right before a call, right after one or at the end of an answer with calls
// is layout, not content. The same text in any fragments gives the same result.
void ToolCallParser::emit_content(std::string_view s, std::string* content) {
  if (strip_leading_) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    if (s.empty()) return;
    strip_leading_ = false;
  }
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  if (end == 0) {
    ws_.append(s);
    return;
  }
  *content += ws_;
  content->append(s.substr(0, end));
  ws_.assign(s.substr(end));
}

void ToolCallParser::add_call(ToolCall call, std::vector<ToolCall>* calls) {
  calls->push_back(std::move(call));
  any_call_ = true;
  ws_.clear();
  strip_leading_ = true;
}

// Formats whose calls sit after an opening marker: the text before it is
// content; with a closing marker each block is parsed when it closes,
// without one (Mistral) everything after the marker waits for the end.
void ToolCallParser::push_marked(std::string_view open, std::string_view close, std::string* content,
                                 std::vector<ToolCall>* calls) {
  for (;;) {
    if (!in_call_) {
      const size_t at = buf_.find(open);
      if (at == std::string::npos) {
        const size_t keep = partial_marker(buf_, open);
        emit_content(std::string_view(buf_).substr(0, buf_.size() - keep), content);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      emit_content(std::string_view(buf_).substr(0, at), content);
      buf_.erase(0, at + open.size());
      in_call_ = true;
    }
    if (close.empty()) return;
    const size_t end = buf_.find(close);
    if (end == std::string::npos) return;
    if (auto call = call_from_text(std::string_view(buf_).substr(0, end))) {
      add_call(std::move(*call), calls);
    } else {
      emit_content(std::string(open) + buf_.substr(0, end + close.size()), content);
    }
    buf_.erase(0, end + close.size());
    in_call_ = false;
  }
}

// Llama 3: the answer is a call when its first non-space text is '{' or
// <|python_tag|>; then all of it waits for the end.
void ToolCallParser::push_llama3(std::string* content) {
  if (!decided_) {
    const size_t first = buf_.find_first_not_of(" \n\t\r");
    if (first == std::string::npos) return;
    const std::string_view rest = std::string_view(buf_).substr(first);
    if (rest.front() == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag) {
      decided_ = in_call_ = true;
    } else if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest) {
      return;  // may still become <|python_tag|>
    } else {
      decided_ = true;
    }
  }
  if (in_call_) return;
  emit_content(buf_, content);
  buf_.clear();
}

bool ToolCallParser::finish_llama3(std::vector<ToolCall>* calls) {
  std::string_view s = trim(buf_);
  if (s.substr(0, kPythonTag.size()) == kPythonTag) s.remove_prefix(kPythonTag.size());
  std::vector<ToolCall> found;
  size_t i = 0;
  for (;;) {
    while (i < s.size() && (is_space(s[i]) || (s[i] == ';' && !found.empty()))) ++i;
    if (i == s.size()) break;
    if (s[i] != '{') return false;
    const size_t end = json_value_end(s, i);
    if (end == std::string_view::npos) return false;
    auto call = call_from_text(s.substr(i, end - i));
    if (!call) return false;
    found.push_back(std::move(*call));
    i = end;
  }
  if (found.empty()) return false;
  for (auto& c : found) add_call(std::move(c), calls);
  return true;
}

// After [TOOL_CALLS]: a JSON array of calls (or one call), or the v11 form
// name[ARGS]{...} repeated with [TOOL_CALLS] between calls.
bool ToolCallParser::finish_mistral(std::vector<ToolCall>* calls) {
  const std::string_view s = trim(buf_);
  std::vector<ToolCall> found;
  if (!s.empty() && (s.front() == '[' || s.front() == '{')) {
    const ordered_json j = ordered_json::parse(s, nullptr, false);
    if (j.is_discarded()) return false;
    if (j.is_array()) {
      for (const auto& x : j) {
        auto call = call_from_json(x);
        if (!call) return false;
        found.push_back(std::move(*call));
      }
    } else {
      auto call = call_from_json(j);
      if (!call) return false;
      found.push_back(std::move(*call));
    }
  } else {
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t next = s.find(kMistralOpen, pos);
      if (next == std::string_view::npos) next = s.size();
      const std::string_view part = trim(s.substr(pos, next - pos));
      const size_t a = part.find(kMistralArgs);
      if (a == std::string_view::npos) return false;
      ToolCall call;
      call.name = std::string(trim(part.substr(0, a)));
      const ordered_json args = ordered_json::parse(part.substr(a + kMistralArgs.size()), nullptr, false);
      if (call.name.empty() || args.is_discarded()) return false;
      auto text = arguments_text(args);
      if (!text) return false;
      call.arguments = std::move(*text);
      found.push_back(std::move(call));
      pos = next + kMistralOpen.size();
    }
  }
  if (found.empty()) return false;
  for (auto& c : found) add_call(std::move(c), calls);
  return true;
}

void ToolCallParser::push(std::string_view text, std::string* content, std::vector<ToolCall>* calls) {
  buf_.append(text);
  switch (format_) {
    case ToolCallFormat::kHermes: return push_marked(kHermesOpen, kHermesClose, content, calls);
    case ToolCallFormat::kMistral: return push_marked(kMistralOpen, {}, content, calls);
    case ToolCallFormat::kLlama3Json: return push_llama3(content);
    default:
      content->append(buf_);
      buf_.clear();
  }
}

void ToolCallParser::finish(std::string* content, std::vector<ToolCall>* calls) {
  if (in_call_) {
    bool ok = false;
    std::string raw = buf_;
    switch (format_) {
      case ToolCallFormat::kHermes:  // no closing tag: the block up to the end
        raw = std::string(kHermesOpen) + buf_;
        if (auto call = call_from_text(buf_)) {
          add_call(std::move(*call), calls);
          ok = true;
        }
        break;
      case ToolCallFormat::kMistral:
        raw = std::string(kMistralOpen) + buf_;
        ok = finish_mistral(calls);
        break;
      case ToolCallFormat::kLlama3Json: ok = finish_llama3(calls); break;
      default: break;
    }
    if (!ok) emit_content(raw, content);
  } else {
    emit_content(buf_, content);
  }
  buf_.clear();
  in_call_ = false;
  if (!any_call_) content->append(ws_);
  ws_.clear();
}

const char* tool_arguments_key(ToolCallFormat format) {
  return format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
}

std::string tool_call_gbnf(ToolCallFormat format, const std::string& call_gbnf, bool parallel) {
  constexpr std::string_view kRoot = "root ::= ";
  EMBER_CHECK_MSG(call_gbnf.rfind(kRoot, 0) == 0, "tool_call_gbnf: the call grammar must start with its root rule");
  std::string rules = "tool-call ::= " + call_gbnf.substr(kRoot.size());
  // Calls are written compactly: at most one space between JSON tokens (the
  // schema grammar's bounded whitespace lets a model pad with tabs and
  // newlines, tokens that carry nothing).
  rules = grammar::with_json_whitespace(std::move(rules), "| \" \"");
  std::string root;
  switch (format) {
    case ToolCallFormat::kHermes:
      root = R"(root ::= "<tool_call>\n" tool-call "\n</tool_call>")";
      if (parallel) root += R"( ( "\n<tool_call>\n" tool-call "\n</tool_call>" )*)";
      break;
    case ToolCallFormat::kMistral:
      root = R"(root ::= "[TOOL_CALLS][" tool-call)";
      if (parallel) root += R"( ( "," " "? tool-call )*)";
      root += R"( "]")";
      break;
    default:  // llama3_json: the bare object(s)
      root = "root ::= tool-call";
      if (parallel) root += R"( ( ";" " "? tool-call )*)";
      break;
  }
  return root + "\n" + rules;
}

}  // namespace ember
