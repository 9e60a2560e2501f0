// Reasoning syntaxes and the incremental reasoning parser; see reasoning.h.
#include "server/reasoning.h"

#include <algorithm>

#include "server/text_scan.h"

namespace ember {

namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
// What ends a harmony message body (<|start|> begins the next message).
constexpr std::string_view kBodyEnds[] = {kHarmonyEnd, kHarmonyCall, kHarmonyReturn, kHarmonyStart};
constexpr size_t kMaxHeaderBytes = 512;

using text::is_space;
using text::lstrip;
using text::partial_marker;
using text::rstrip;

ReasoningSyntax think_tags(bool implicit_open) {
  ReasoningSyntax s;
  s.format = ReasoningFormat::kThinkTags;
  s.start = std::string(kThinkStart);
  s.end = std::string(kThinkEnd);
  s.implicit_open = implicit_open;
  return s;
}

// The word after `key` in a harmony header (up to a space or a marker).
std::string header_word(std::string_view h, std::string_view key) {
  const size_t at = h.find(key);
  if (at == std::string_view::npos) return "";
  size_t i = at + key.size(), j = i;
  while (j < h.size() && !is_space(h[j]) && h[j] != '<') ++j;
  return std::string(h.substr(i, j - i));
}

}  // namespace

std::optional<ReasoningSyntax> reasoning_syntax_from_name(std::string_view name) {
  if (name == "none") return ReasoningSyntax{};
  if (name == "deepseek_r1" || name == "deepseek-r1") return think_tags(true);
  if (name == "qwen3" || name == "think") return think_tags(false);
  if (name == "gpt_oss" || name == "gpt-oss" || name == "harmony") {
    ReasoningSyntax s;
    s.format = ReasoningFormat::kHarmony;
    return s;
  }
  return std::nullopt;
}

const char* reasoning_parser_name(const ReasoningSyntax& s) {
  switch (s.format) {
    case ReasoningFormat::kThinkTags: return s.implicit_open ? "deepseek_r1" : "qwen3";
    case ReasoningFormat::kHarmony: return "gpt_oss";
    default: return "none";
  }
}

ReasoningSyntax detect_reasoning_syntax(std::string_view t) {
  if (t.find(kHarmonyChannel) != std::string_view::npos && t.find(kHarmonyMessage) != std::string_view::npos)
    return *reasoning_syntax_from_name("harmony");
  if (t.find(kThinkEnd) != std::string_view::npos) return think_tags(false);
  return ReasoningSyntax{};
}

ReasoningParser::ReasoningParser(ReasoningSyntax syntax, std::string_view prompt) : syntax_(std::move(syntax)) {
  if (syntax_.format == ReasoningFormat::kThinkTags) {
    const std::string_view p = rstrip(prompt);
    const bool opened = p.size() >= syntax_.start.size() && p.substr(p.size() - syntax_.start.size()) == syntax_.start;
    const bool closed = p.size() >= syntax_.end.size() && p.substr(p.size() - syntax_.end.size()) == syntax_.end;
    if (opened || (syntax_.implicit_open && !closed)) {
      phase_ = Phase::kThinking;
      strip_lead_ = true;
    }
  } else if (syntax_.format == ReasoningFormat::kHarmony) {
    // The prompt ends inside a message's header (the generation prompt
    // "<|start|>assistant"), inside its body (a continued message) or after it.
    const size_t at = prompt.rfind(kHarmonyStart);
    std::string_view tail = at == std::string_view::npos ? std::string_view() : prompt.substr(at);
    const size_t m = tail.find(kHarmonyMessage);
    if (m == std::string_view::npos) {
      header_ = std::string(tail);
    } else {
      header_ = std::string(tail.substr(0, m));
      std::vector<ReasoningEvent> scratch;
      out_ = &scratch;
      open_body();
      bool ended = false;
      for (std::string_view e : kBodyEnds) ended |= tail.find(e, m) != std::string_view::npos;
      if (ended) close_body();
      n_calls_ = 0;
      out_ = nullptr;
    }
  }
}

bool ReasoningParser::is_marker(std::string_view text) const {
  switch (syntax_.format) {
    case ReasoningFormat::kThinkTags: return text == syntax_.start || text == syntax_.end;
    case ReasoningFormat::kHarmony:
      for (std::string_view m : {kHarmonyStart, kHarmonyChannel, kHarmonyMessage, kHarmonyEnd, kHarmonyCall,
                                 kHarmonyReturn, kHarmonyConstrain})
        if (text == m) return true;
      return false;
    default: return false;
  }
}

void ReasoningParser::emit(ReasoningEvent::Kind k, std::string_view s, int call) {
  if (s.empty() && k != ReasoningEvent::Kind::kCallStart) return;
  if (!out_->empty() && out_->back().kind == k && out_->back().call == call && k != ReasoningEvent::Kind::kCallStart) {
    out_->back().text.append(s);
    return;
  }
  out_->push_back({k, call, std::string(s)});
}

void ReasoningParser::reasoning(std::string_view s) {
  if (strip_lead_) {
    s = lstrip(s);
    if (s.empty()) return;
    strip_lead_ = false;
  }
  const std::string_view body = rstrip(s);
  if (body.empty()) {
    ws_.append(s);
    return;
  }
  std::string t = std::move(ws_);
  t.append(body);
  emit(ReasoningEvent::Kind::kReasoning, t);
  ws_.assign(s.substr(body.size()));
  reasoning_started_ = true;
}

void ReasoningParser::content(std::string_view s) {
  if (strip_lead_) {
    s = lstrip(s);
    if (s.empty()) return;
    strip_lead_ = false;
  }
  emit(ReasoningEvent::Kind::kContent, s);
}

void ReasoningParser::push(std::string_view text, std::vector<ReasoningEvent>* out) {
  out_ = out;
  buf_.append(text);
  switch (syntax_.format) {
    case ReasoningFormat::kThinkTags: return push_tags();
    case ReasoningFormat::kHarmony: return push_harmony();
    default:
      phase_ = Phase::kAnswer;
      emit(ReasoningEvent::Kind::kContent, buf_);
      buf_.clear();
  }
}

void ReasoningParser::push_tags() {
  const std::string_view start = syntax_.start, end = syntax_.end;
  for (;;) {
    if (phase_ == Phase::kStart) {
      const std::string_view t = lstrip(buf_);
      if (t.empty()) return;  // whitespace only: wait
      if (t.substr(0, start.size()) == start) {
        buf_.erase(0, buf_.size() - t.size() + start.size());
        phase_ = Phase::kThinking;
        strip_lead_ = true;
        continue;
      }
      if (start.substr(0, t.size()) == t) return;  // may still become the tag
      phase_ = Phase::kAnswer;
      continue;
    }
    if (phase_ == Phase::kThinking) {
      if (!reasoning_started_) {
        // The start tag again before any reasoning (R1-0528 after its template's).
        const std::string_view t = lstrip(buf_);
        if (t.empty()) {
          buf_.clear();
          return;
        }
        if (t.substr(0, start.size()) == start) {
          buf_.erase(0, buf_.size() - t.size() + start.size());
          continue;
        }
        if (start.substr(0, t.size()) == t && end.substr(0, t.size()) != t) return;
      }
      const size_t at = buf_.find(end);
      if (at != std::string::npos) {
        reasoning(std::string_view(buf_).substr(0, at));
        ws_.clear();
        buf_.erase(0, at + end.size());
        phase_ = Phase::kAnswer;
        strip_lead_ = true;
        continue;
      }
      const size_t keep = partial_marker(buf_, end);
      reasoning(std::string_view(buf_).substr(0, buf_.size() - keep));
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    content(buf_);
    buf_.clear();
    return;
  }
}

// Opens the body of the message whose header is header_ (after its last
// <|start|>): reasoning, answer text, or a call to a function.
void ReasoningParser::open_body() {
  std::string_view h = header_;
  if (const size_t s = h.rfind(kHarmonyStart); s != std::string_view::npos) h.remove_prefix(s + kHarmonyStart.size());
  const std::string channel = header_word(h, kHarmonyChannel);
  const std::string to = header_word(h, "to=");
  constexpr std::string_view kFunctions = "functions.";
  in_body_ = true;
  if (to.size() > kFunctions.size() && to.compare(0, kFunctions.size(), kFunctions) == 0) {
    body_ = Body::kCall;
    emit(ReasoningEvent::Kind::kCallStart, to.substr(kFunctions.size()), n_calls_);
    ++n_calls_;
    in_string_ = escape_ = false;
    phase_ = Phase::kAnswer;
  } else if (!to.empty() || channel == "analysis") {
    // Reasoning, and calls to built-in tools (browser, python), part of the chain of thought.
    body_ = Body::kReasoning;
    strip_lead_ = true;
    if (reasoning_started_) ws_ = "\n\n";  // between two reasoning messages
    phase_ = Phase::kThinking;
  } else {
    body_ = Body::kContent;  // final, and commentary without a recipient (preambles)
    phase_ = Phase::kAnswer;
  }
  header_.clear();
}

void ReasoningParser::body_text(std::string_view s) {
  switch (body_) {
    case Body::kReasoning: return reasoning(s);
    case Body::kContent: return content(s);
    case Body::kCall: {
      // The arguments, without the whitespace between JSON tokens.
      std::string frag;
      for (char c : s) {
        if (in_string_) {
          if (escape_) escape_ = false;
          else if (c == '\\') escape_ = true;
          else if (c == '"') in_string_ = false;
        } else if (is_space(c)) {
          continue;
        } else if (c == '"') {
          in_string_ = true;
        }
        frag.push_back(c);
      }
      emit(ReasoningEvent::Kind::kCallArgs, frag, n_calls_ - 1);
      return;
    }
    default: return;
  }
}

void ReasoningParser::close_body() {
  if (body_ == Body::kReasoning) ws_.clear();
  in_body_ = false;
  body_ = Body::kNone;
  header_.clear();
  header_generated_ = false;
  phase_ = Phase::kStart;
}

void ReasoningParser::push_harmony() {
  for (;;) {
    if (raw_) {
      content(buf_);
      buf_.clear();
      return;
    }
    if (in_body_) {
      size_t best = std::string::npos, len = 0;
      for (std::string_view e : kBodyEnds) {
        const size_t at = buf_.find(e);
        if (at < best) {
          best = at;
          len = e == kHarmonyStart ? 0 : e.size();  // <|start|> opens the next header
        }
      }
      if (best == std::string::npos) {
        size_t keep = 0;
        for (std::string_view e : kBodyEnds) keep = std::max(keep, partial_marker(buf_, e));
        body_text(std::string_view(buf_).substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      body_text(std::string_view(buf_).substr(0, best));
      buf_.erase(0, best + len);
      close_body();
      continue;
    }
    // A header. The model's first text there is a marker (<|channel|>,
    // <|start|>, ...) or a recipient ("to=..."); anything else means the
    // output does not follow harmony: it is all content.
    if (!header_generated_) {
      const std::string_view t = lstrip(buf_);
      if (t.empty()) return;
      const bool marker = t.front() == '<';  // (a stray "<" before "<|start|>" is cut with the header's start)
      const std::string_view to = "to=";
      const bool recipient = to.substr(0, std::min(t.size(), to.size())) == t.substr(0, std::min(t.size(), to.size()));
      if (!marker && !recipient) {
        raw_ = true;
        phase_ = Phase::kAnswer;
        continue;
      }
      header_generated_ = true;
    }
    const size_t m = buf_.find(kHarmonyMessage);
    if (m == std::string::npos) {
      if (buf_.size() > kMaxHeaderBytes) {  // no header is this long
        raw_ = true;
        phase_ = Phase::kAnswer;
        continue;
      }
      return;
    }
    header_.append(buf_, 0, m);
    buf_.erase(0, m + kHarmonyMessage.size());
    open_body();
  }
}

void ReasoningParser::finish(std::vector<ReasoningEvent>* out) {
  out_ = out;
  switch (syntax_.format) {
    case ReasoningFormat::kThinkTags:
      if (phase_ == Phase::kStart) {
        emit(ReasoningEvent::Kind::kContent, buf_);
      } else if (phase_ == Phase::kThinking) {
        reasoning(buf_);
      } else {
        content(buf_);
      }
      break;
    case ReasoningFormat::kHarmony:
      if (raw_) {
        content(buf_);
      } else if (in_body_) {
        // A held-back partial marker at the very end is markup, not text.
        size_t keep = 0;
        for (std::string_view e : kBodyEnds) keep = std::max(keep, partial_marker(buf_, e));
        body_text(std::string_view(buf_).substr(0, buf_.size() - keep));
      } else if (header_generated_ && buf_.find("<|") == std::string::npos) {
        content(buf_);  // text that never became a header
      }
      break;
    default: emit(ReasoningEvent::Kind::kContent, buf_);
  }
  buf_.clear();
  ws_.clear();
}

}  // namespace ember
