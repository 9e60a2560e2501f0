// Tool-call parsing and grammars; see tool_calls.h.
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "grammar/json_schema.h"
#include "server/text_scan.h"

namespace ember {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

using text::is_space;
using text::partial_marker;
using text::trim;

// One character of JSON text: updates *in_string / *escape and returns +1
// for an opening bracket outside strings, -1 for a closing one, else 0.
int json_step(char c, bool* in_string, bool* escape) {
  if (*in_string) {
    if (*escape) *escape = false;
    else if (c == '\\') *escape = true;
    else if (c == '"') *in_string = false;
    return 0;
  }
  if (c == '"') *in_string = true;
  else if (c == '{' || c == '[') return 1;
  else if (c == '}' || c == ']') return -1;
  return 0;
}

// Index just past the JSON object or array starting at s[i], or npos when it
// does not end within s.
size_t json_value_end(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (; i < s.size(); ++i) {
    const int d = json_step(s[i], &in_string, &escape);
    depth += d;
    if (d < 0 && depth == 0) return i + 1;
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

// The head of a call object, `{"name": "<name>", "arguments": {` (or
// "parameters"), with any whitespace between its tokens: kYes with the name
// and the offset of the arguments' `{`; kPartial while `s` may still become
// one; kNo when it cannot (another key order, quoted arguments, ...: the
// block is then parsed whole when it closes).
ToolCallParser::Head ToolCallParser::parse_head(std::string_view s, std::string* name, size_t* args_at) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && is_space(s[i])) ++i;
    return i < s.size();
  };
  // 1: matched, 0: partial, -1: no.
  auto lit = [&](std::string_view l) {
    const std::string_view r = s.substr(i, l.size());
    if (r != l.substr(0, r.size())) return -1;
    if (r.size() < l.size()) return 0;
    i += l.size();
    return 1;
  };
  for (std::string_view l : {"{", "\"name\"", ":"}) {
    if (!ws()) return Head::kPartial;
    const int m = lit(l);
    if (m <= 0) return m < 0 ? Head::kNo : Head::kPartial;
  }
  if (!ws()) return Head::kPartial;
  if (s[i] != '"') return Head::kNo;
  size_t j = i + 1;
  for (bool esc = false; j < s.size(); ++j) {
    if (esc) esc = false;
    else if (s[j] == '\\') esc = true;
    else if (s[j] == '"') break;
  }
  if (j >= s.size()) return Head::kPartial;
  const ordered_json n = ordered_json::parse(s.substr(i, j + 1 - i), nullptr, false);
  if (n.is_discarded() || !n.is_string() || n.get<std::string>().empty()) return Head::kNo;
  i = j + 1;
  if (!ws()) return Head::kPartial;
  if (s[i] != ',') return Head::kNo;
  ++i;
  if (!ws()) return Head::kPartial;
  const size_t at = i;
  int m = lit("\"arguments\"");
  if (m < 0) {
    i = at;
    m = lit("\"parameters\"");
  }
  if (m <= 0) return m < 0 ? Head::kNo : Head::kPartial;
  if (!ws()) return Head::kPartial;
  if (s[i] != ':') return Head::kNo;
  ++i;
  if (!ws()) return Head::kPartial;
  if (s[i] != '{') return Head::kNo;
  *name = n.get<std::string>();
  *args_at = i;
  return Head::kYes;
}

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  if (name == "gpt_oss" || name == "gpt-oss" || name == "harmony") return ToolCallFormat::kHarmony;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kHarmony: return "gpt_oss";
    default: return "none";
  }
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  if (t.find("<|channel|>") != std::string_view::npos && t.find("<|call|>") != std::string_view::npos)
    return ToolCallFormat::kHarmony;
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (t.find(kMistralOpen) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (t.find(kPythonTag) != std::string_view::npos ||
      (t.find("ipython") != std::string_view::npos && t.find("\"parameters\"") != std::string_view::npos))
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

// Text held back at the end that is a proper start of the format's call marker.
bool ToolCallParser::is_partial_marker(std::string_view s) const {
  s = trim(s);
  std::string_view m;
  switch (format_) {
    case ToolCallFormat::kHermes: m = kHermesOpen; break;
    case ToolCallFormat::kMistral: m = kMistralOpen; break;
    case ToolCallFormat::kLlama3Json: m = kPythonTag; break;
    default: return false;
  }
  return !s.empty() && s.size() < m.size() && m.substr(0, s.size()) == s;
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
void ToolCallParser::emit_content(std::string_view s) {
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
  content(ws_);
  content(s.substr(0, end));
  ws_.assign(s.substr(end));
}

void ToolCallParser::content(std::string_view s) {
  if (s.empty()) return;
  if (out_->empty() || out_->back().call >= 0) out_->push_back({-1, "", ""});
  out_->back().text.append(s);
}

void ToolCallParser::add_call(ToolCall call) {
  const int k = n_calls_++;
  out_->push_back({k, std::move(call.name), ""});
  out_->push_back({k, "", std::move(call.arguments)});
  any_call_ = true;
  ws_.clear();
  strip_leading_ = true;
}

// Formats whose calls sit after an opening marker: the text before it is
// content; with a closing marker each block is parsed when it closes,
// without one (Mistral) everything after the marker waits for the end.
void ToolCallParser::push_marked(std::string_view open, std::string_view close) {
  for (;;) {
    if (!in_call_) {
      const size_t at = buf_.find(open);
      if (at == std::string::npos) {
        const size_t keep = partial_marker(buf_, open);
        emit_content(std::string_view(buf_).substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      emit_content(std::string_view(buf_).substr(0, at));
      buf_.erase(0, at + open.size());
      in_call_ = true;
      stream_ = Stream::kUndecided;
      if (close.empty()) start_list(List::kMistral);
    }
    if (close.empty()) {  // Mistral: a list of calls after the marker
      stream_list();
      if (in_call_) return;
      continue;
    }
    if (stream_ == Stream::kUndecided) {
      std::string name;
      size_t args_at = 0;
      const Head h = parse_head(buf_, &name, &args_at);
      if (h == Head::kPartial) return;
      if (h == Head::kYes) {
        commit(std::move(name), args_at, 0);
      } else {
        stream_ = Stream::kWhole;
      }
    }
    if (stream_ == Stream::kArgs || stream_ == Stream::kTail) {
      if (!stream_call(close)) return;
      in_call_ = false;
      strip_leading_ = true;
      continue;
    }
    const size_t end = buf_.find(close);
    if (end == std::string::npos) return;
    if (auto call = call_from_text(std::string_view(buf_).substr(0, end))) {
      add_call(std::move(*call));
    } else {
      emit_content(std::string(open) + buf_.substr(0, end + close.size()));
    }
    buf_.erase(0, end + close.size());
    in_call_ = false;
  }
}

// The arguments object of a committed call, streamed without the whitespace
// between JSON tokens, up to its end (depth 0); then the rest of the block
// up to the closing marker (the call object's end) is skipped. A closing
// marker outside a string ends the block even inside the arguments. True
// when the block has closed.
bool ToolCallParser::stream_call(std::string_view close) {
  std::string frag;
  size_t i = 0;
  for (; i < buf_.size() && stream_ == Stream::kArgs; ++i) {
    const char c = buf_[i];
    if (!in_string_ && c == close.front()) {
      const std::string_view rest = std::string_view(buf_).substr(i);
      if (rest.substr(0, close.size()) == close) {
        stream_ = Stream::kTail;
        break;
      }
      if (close.substr(0, rest.size()) == rest) break;  // may be the marker: wait
    }
    if (!in_string_ && is_space(c)) continue;
    frag.push_back(c);
    if ((depth_ += json_step(c, &in_string_, &escape_)) == 0) stream_ = Stream::kTail;
  }
  buf_.erase(0, i);
  if (!frag.empty()) out_->push_back({call_, "", std::move(frag)});
  if (stream_ != Stream::kTail) return false;
  const size_t end = buf_.find(close);
  if (end == std::string::npos) {
    buf_.erase(0, buf_.size() - partial_marker(buf_, close));
    return false;
  }
  buf_.erase(0, end + close.size());
  stream_ = Stream::kUndecided;
  return true;
}

// Committed: the call's name now, its arguments (the '{' at args_at) as
// they come. tail_depth: the nesting around the arguments that closes the
// call (1: a call object; 0: mistral v11, whose arguments are the call).
void ToolCallParser::commit(std::string name, size_t args_at, int tail_depth) {
  stream_ = Stream::kArgs;
  call_ = n_calls_++;
  out_->push_back({call_, std::move(name), ""});
  any_call_ = true;
  ws_.clear();
  buf_.erase(0, args_at);
  depth_ = 0;
  in_string_ = escape_ = false;
  tail_depth_ = tail_depth;
}

// The arguments of a committed list call, streamed as in stream_call, then
// the rest of its call object skipped to its end. True when it has ended.
bool ToolCallParser::stream_object() {
  std::string frag;
  size_t i = 0;
  for (; i < buf_.size(); ++i) {
    const char c = buf_[i];
    if (stream_ == Stream::kTail) {
      if (tail_depth_ == 0) break;
      tail_depth_ += json_step(c, &in_string_, &escape_);
      continue;
    }
    if (!in_string_ && is_space(c)) continue;
    frag.push_back(c);
    if ((depth_ += json_step(c, &in_string_, &escape_)) == 0) stream_ = Stream::kTail;
  }
  buf_.erase(0, i);
  if (!frag.empty()) out_->push_back({call_, "", std::move(frag)});
  return stream_ == Stream::kTail && tail_depth_ == 0;
}

void ToolCallParser::start_list(List kind) {
  list_ = kind;
  list_calls_ = 0;
  expect_obj_ = true;
  stream_ = Stream::kUndecided;
}

void ToolCallParser::end_list() {
  in_call_ = false;
  list_ = List::kNone;
  list_calls_ = 0;
  expect_obj_ = true;
  stream_ = Stream::kUndecided;
  strip_leading_ = true;
}

// The calls of a llama3_json / mistral list as they arrive. Until the first
// call commits nothing is erased from buf_, so a list that turns out not to
// stream (kWhole) is parsed whole at the end from the same text.
void ToolCallParser::stream_list() {
  while (in_call_) {
    if (stream_ == Stream::kWhole) return;
    if (stream_ == Stream::kArgs || stream_ == Stream::kTail) {
      if (!stream_object()) return;
      ++list_calls_;
      stream_ = Stream::kUndecided;
      expect_obj_ = false;
      if (list_ == List::kSingle || list_ == List::kV11) end_list();
      continue;
    }
    size_t i = 0;
    auto skip = [&] {
      while (i < buf_.size() && is_space(buf_[i])) ++i;
      return i < buf_.size();
    };
    if (!skip()) {
      if (list_calls_ > 0) buf_.clear();
      return;
    }
    if (list_calls_ == 0) {  // the list's opening, read again until a call commits
      if (list_ == List::kLlama3 && std::string_view(buf_).substr(i, kPythonTag.size()) == kPythonTag) {
        i += kPythonTag.size();
        if (!skip()) return;
      }
      if (list_ == List::kMistral) list_ = buf_[i] == '[' ? List::kArray : buf_[i] == '{' ? List::kSingle : List::kV11;
      if (list_ == List::kArray && buf_[i] == '[') {
        ++i;
        if (!skip()) return;
      }
    } else if (!expect_obj_) {  // after a call: a separator, the list's end, or content
      const char c = buf_[i];
      if ((list_ == List::kLlama3 && c == ';') || (list_ == List::kArray && c == ',')) {
        buf_.erase(0, i + 1);
        expect_obj_ = true;
      } else if (list_ == List::kArray && c == ']') {
        buf_.erase(0, i + 1);
        end_list();
      } else {
        buf_.erase(0, i);
        end_list();
      }
      continue;
    }
    if (list_ == List::kV11) {  // name[ARGS]{...}
      const size_t a = buf_.find(kMistralArgs, i);
      if (a == std::string::npos) return;
      size_t j = a + kMistralArgs.size();
      while (j < buf_.size() && is_space(buf_[j])) ++j;
      if (j == buf_.size()) return;
      std::string name(trim(std::string_view(buf_).substr(i, a - i)));
      if (name.empty() || buf_[j] != '{') {
        stream_ = Stream::kWhole;
        return;
      }
      commit(std::move(name), j, 0);
      continue;
    }
    std::string name;
    size_t args_at = 0;
    const Head h = buf_[i] == '{' ? parse_head(std::string_view(buf_).substr(i), &name, &args_at) : Head::kNo;
    if (h == Head::kPartial) return;
    if (h == Head::kYes) {
      commit(std::move(name), i + args_at, 1);
      continue;
    }
    if (list_calls_ == 0) {  // not a streamed list: all or nothing at the end
      stream_ = Stream::kWhole;
      return;
    }
    // After a committed call, an object of another shape: parsed when it ends.
    const size_t end = buf_[i] == '{' ? json_value_end(buf_, i) : i;
    if (end == std::string::npos) return;
    std::optional<ToolCall> call;
    if (end > i) call = call_from_text(std::string_view(buf_).substr(i, end - i));
    if (!call) {
      buf_.erase(0, i);
      end_list();
      continue;
    }
    add_call(std::move(*call));
    ++list_calls_;
    buf_.erase(0, end);
    expect_obj_ = false;
  }
}

// The end of the output inside a streamed list: a call cut in its arguments
// stands as written; a last object of another shape is a call if it parses;
// anything else left is content.
bool ToolCallParser::finish_list(bool cut) {
  if (stream_ == Stream::kArgs) {
    cut_ = true;
    return true;
  }
  if (stream_ == Stream::kTail) return true;
  const std::string_view rest = trim(buf_);
  if (rest.empty()) return true;
  if (expect_obj_ && list_ != List::kV11 && rest.front() == '{') {
    if (auto call = call_from_text(rest)) {
      add_call(std::move(*call));
      return true;
    }
  }
  if (!cut) emit_content(rest);
  return true;
}

// Llama 3: the answer is a call list when its first non-space text is '{'
// or <|python_tag|>.
void ToolCallParser::push_llama3() {
  if (!decided_) {
    const size_t first = buf_.find_first_not_of(" \n\t\r");
    if (first == std::string::npos) return;
    const std::string_view rest = std::string_view(buf_).substr(first);
    if (rest.front() == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag) {
      decided_ = in_call_ = true;
      start_list(List::kLlama3);
    } else if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest) {
      return;  // may still become <|python_tag|>
    } else {
      decided_ = true;
    }
  }
  if (in_call_) {
    stream_list();
    if (in_call_) return;
  }
  emit_content(buf_);
  buf_.clear();
}

bool ToolCallParser::finish_llama3() {
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
  for (auto& c : found) add_call(std::move(c));
  return true;
}

// After [TOOL_CALLS]: a JSON array of calls (or one call), or the v11 form
// name[ARGS]{...} repeated with [TOOL_CALLS] between calls.
bool ToolCallParser::finish_mistral() {
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
  for (auto& c : found) add_call(std::move(c));
  return true;
}

void ToolCallParser::push(std::string_view text, std::vector<ToolCallEvent>* out) {
  out_ = out;
  buf_.append(text);
  switch (format_) {
    case ToolCallFormat::kHermes: return push_marked(kHermesOpen, kHermesClose);
    case ToolCallFormat::kMistral: return push_marked(kMistralOpen, {});
    case ToolCallFormat::kLlama3Json: return push_llama3();
    default:
      content(buf_);
      buf_.clear();
  }
}

void apply_tool_call_events(const std::vector<ToolCallEvent>& events, std::string* content,
                            std::vector<ToolCall>* calls) {
  for (const ToolCallEvent& e : events) {
    if (e.call < 0) {
      content->append(e.text);
      continue;
    }
    if (static_cast<size_t>(e.call) >= calls->size()) calls->resize(static_cast<size_t>(e.call) + 1);
    ToolCall& c = (*calls)[static_cast<size_t>(e.call)];
    c.name += e.name;
    c.arguments += e.text;
  }
}

void ToolCallParser::push(std::string_view text, std::string* content, std::vector<ToolCall>* calls) {
  std::vector<ToolCallEvent> ev;
  push(text, &ev);
  apply_tool_call_events(ev, content, calls);
}

void ToolCallParser::finish(std::string* content, std::vector<ToolCall>* calls, bool cut) {
  std::vector<ToolCallEvent> ev;
  finish(&ev, cut);
  apply_tool_call_events(ev, content, calls);
}

void ToolCallParser::finish(std::vector<ToolCallEvent>* out, bool cut) {
  out_ = out;
  const bool streamed_list = list_ != List::kNone && stream_ != Stream::kWhole &&
                             (list_calls_ > 0 || stream_ == Stream::kArgs || stream_ == Stream::kTail);
  if (in_call_ && streamed_list) {
    finish_list(cut);
  } else if (in_call_ && stream_ != Stream::kUndecided && stream_ != Stream::kWhole) {
    // A streamed call cut short (a stop string, max_tokens): it stands with
    // the arguments written so far.
    cut_ = stream_ == Stream::kArgs;
  } else if (in_call_) {
    bool ok = false;
    std::string raw = buf_;
    switch (format_) {
      case ToolCallFormat::kHermes:  // no closing tag: the block up to the end
        raw = std::string(kHermesOpen) + buf_;
        if (auto call = call_from_text(buf_)) {
          add_call(std::move(*call));
          ok = true;
        }
        break;
      case ToolCallFormat::kMistral:
        raw = std::string(kMistralOpen) + buf_;
        ok = finish_mistral();
        break;
      case ToolCallFormat::kLlama3Json: ok = finish_llama3(); break;
      default: break;
    }
    if (!ok && !cut) emit_content(raw);
  } else if (!(cut && is_partial_marker(buf_))) {
    emit_content(buf_);
  }
  buf_.clear();
  in_call_ = false;
  list_ = List::kNone;
  list_calls_ = 0;
  expect_obj_ = true;
  if (!any_call_) content(ws_);
  ws_.clear();
  stream_ = Stream::kUndecided;
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
