// One choice's text pipeline; see choice_output.h.
#include "server/choice_output.h"

namespace ember {

ChoiceOutput::ChoiceOutput(const Tokenizer& tok, const ChoiceOutputOptions& opts)
    : tok_(tok), skip_special_(opts.skip_special_tokens), dec_(tok, !opts.skip_special_tokens), stop_(opts.stop) {
  if (opts.reasoning.format != ReasoningFormat::kNone)
    reasoning_ = std::make_unique<ReasoningParser>(opts.reasoning, opts.prompt);
  if (opts.tools != ToolCallFormat::kNone && opts.tools != ToolCallFormat::kHarmony)
    tools_ = std::make_unique<ToolCallParser>(opts.tools);
}

ChoiceOutput::~ChoiceOutput() = default;

bool ChoiceOutput::is_marker(int32_t token) const {
  if (tok_.token_type(token) != TokenType::kControl) return false;
  const std::string& text = tok_.token_text(token);
  return (tools_ && tools_->is_marker(text)) || (reasoning_ && reasoning_->is_marker(text));
}

std::string ChoiceOutput::push(int32_t token, std::vector<OutputEvent>* out) {
  std::string piece = dec_.push(token);
  // Control tokens that mark reasoning or tool calls reach the parsers even
  // when special tokens are not shown.
  if (skip_special_ && is_marker(token)) piece += dec_.flush() + tok_.token_text(token);
  if (stop_.stopped() || finished_) return piece;
  const std::string text = stop_.push(piece);
  if (!reasoning_) {
    parse(text, out);
    return piece;
  }
  const ReasoningParser::Phase before = reasoning_->phase();
  parse(text, out);
  const ReasoningParser::Phase after = reasoning_->phase();
  if (before == ReasoningParser::Phase::kThinking || after == ReasoningParser::Phase::kThinking) ++reasoning_tokens_;
  return piece;
}

void ChoiceOutput::tool_events(std::vector<ToolCallEvent>& ev, std::vector<OutputEvent>* out) {
  for (ToolCallEvent& e : ev) {
    if (e.call < 0) {
      if (!out->empty() && out->back().kind == OutputEvent::Kind::kContent) {
        out->back().text += e.text;
      } else {
        out->push_back({OutputEvent::Kind::kContent, -1, "", std::move(e.text)});
      }
    } else {
      out->push_back({OutputEvent::Kind::kCall, e.call, std::move(e.name), std::move(e.text)});
    }
  }
  ev.clear();
}

void ChoiceOutput::parse(std::string_view text, std::vector<OutputEvent>* out) {
  std::vector<ToolCallEvent> tev;
  auto answer = [&](std::string_view s) {
    if (tools_) {
      tools_->push(s, &tev);
      tool_events(tev, out);
    } else if (!s.empty()) {
      if (!out->empty() && out->back().kind == OutputEvent::Kind::kContent) {
        out->back().text.append(s);
      } else {
        out->push_back({OutputEvent::Kind::kContent, -1, "", std::string(s)});
      }
    }
  };
  if (!reasoning_) return answer(text);
  std::vector<ReasoningEvent> rev;
  if (text.empty() && !finished_) return;
  if (finished_) {
    reasoning_->push(text, &rev);
    reasoning_->finish(&rev);
  } else {
    reasoning_->push(text, &rev);
  }
  for (ReasoningEvent& e : rev) {
    switch (e.kind) {
      case ReasoningEvent::Kind::kReasoning:
        if (!out->empty() && out->back().kind == OutputEvent::Kind::kReasoning) {
          out->back().text += e.text;
        } else {
          out->push_back({OutputEvent::Kind::kReasoning, -1, "", std::move(e.text)});
        }
        break;
      case ReasoningEvent::Kind::kContent: answer(e.text); break;
      case ReasoningEvent::Kind::kCallStart: out->push_back({OutputEvent::Kind::kCall, e.call, std::move(e.text), ""}); break;
      case ReasoningEvent::Kind::kCallArgs: out->push_back({OutputEvent::Kind::kCall, e.call, "", std::move(e.text)}); break;
    }
  }
}

void ChoiceOutput::finish(bool cut, std::vector<OutputEvent>* out) {
  if (finished_) return;
  std::string rest;
  const bool was_stopped = stop_.stopped();
  if (!was_stopped) {
    rest = stop_.push(dec_.flush());
    if (!stop_.stopped()) rest += stop_.flush();
  }
  finished_ = true;
  parse(rest, out);
  if (tools_) {
    std::vector<ToolCallEvent> tev;
    tools_->finish(&tev, cut || stop_.stopped());
    tool_events(tev, out);
  }
}

}  // namespace ember
