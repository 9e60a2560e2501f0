// Chat requests of `ember serve` (part of OpenAiService, openai_service.h):
// which tool-call format and reasoning syntax the chat template implies,
// the template variables a request sets (chat_template_kwargs,
// enable_thinking, reasoning_effort), the rendered prompt (tools in the
// generic format for templates without tool support, server/tool_prompt.h)
// and the logits processor that bounds thinking (server/thinking_budget.h).
#include <fmt/format.h>

#include <algorithm>

#include "server/chat_prompt.h"
#include "server/harmony_prompt.h"
#include "server/openai_service.h"
#include "server/thinking_budget.h"
#include "server/tool_prompt.h"
#include "template/chat_template.h"

namespace ember {

using nlohmann::json;

namespace {

// gpt-oss templates know low, medium and high.
const char* harmony_effort(const std::string& e) {
  if (e == "high" || e == "xhigh") return "high";
  if (e == "medium") return "medium";
  return "low";
}

// OpenRouter's shares of max_tokens for an effort level.
double effort_share(const std::string& e) {
  if (e == "xhigh") return 0.95;
  if (e == "high") return 0.8;
  if (e == "medium") return 0.5;
  if (e == "low") return 0.2;
  if (e == "minimal") return 0.1;
  return 0.0;
}

bool thinking_off(const ReasoningOptions& o) { return o.effort == "none" || (o.enabled && !*o.enabled) || o.budget == 0; }

}  // namespace

void OpenAiService::init_reasoning() {
  chat_template_ = !cfg_.chat_template.empty() ? cfg_.chat_template : chat_template_for(tok_, cfg_.arch);
  harmony_template_ = detect_tool_call_format(chat_template_) == ToolCallFormat::kHarmony;
  // An unknown parser name was refused by the command line; it reads as "none" here.
  if (cfg_.tool_call_parser == "auto") {
    const ToolCallFormat detected = detect_tool_call_format(chat_template_);
    tool_format_ = detected == ToolCallFormat::kNone ? ToolCallFormat::kHermes : detected;
    generic_tools_ = detected == ToolCallFormat::kNone || !template_renders_tools(chat_template_);
  } else {
    tool_format_ = tool_call_format_from_name(cfg_.tool_call_parser).value_or(ToolCallFormat::kNone);
    generic_tools_ = tool_format_ != ToolCallFormat::kNone && tool_format_ != ToolCallFormat::kHarmony &&
                     !template_renders_tools(chat_template_);
  }
  if (cfg_.reasoning_parser == "auto")
    reasoning_ = detect_reasoning_syntax(chat_template_);
  else
    reasoning_ = reasoning_syntax_from_name(cfg_.reasoning_parser).value_or(ReasoningSyntax{});
  if (reasoning_.format == ReasoningFormat::kNone) return;
  const bool harmony = reasoning_.format == ReasoningFormat::kHarmony;
  auto pieces = std::make_shared<std::vector<std::string>>(static_cast<size_t>(tok_.n_vocab()));
  for (int32_t id = 0; id < tok_.n_vocab(); ++id) (*pieces)[id] = tok_.token_to_piece(id, true);
  space_tokens_ = std::make_shared<const std::vector<int32_t>>(whitespace_tokens(*pieces));
  if (!harmony) start_tokens_ = tag_start_tokens(*pieces, reasoning_.start);
  pieces_ = std::move(pieces);
  EncodeOptions eo;
  eo.add_bos = false;
  eo.parse_special = true;
  close_tokens_ = tok_.encode(cfg_.reasoning_budget_message + (harmony ? std::string(kHarmonyEnd) : reasoning_.end), eo);
  if (harmony) {
    analysis_tokens_ = tok_.encode(std::string(kHarmonyAnalysis), eo);
    final_header_tokens_ = tok_.encode(std::string(kHarmonyStart) + "assistant" + std::string(kHarmonyFinal), eo);
    call_header_tokens_ = tok_.encode(std::string(kHarmonyStart) + "assistant" + std::string(kHarmonyChannel) +
                                          "commentary to=functions.",
                                      eo);
  }
}

bool OpenAiService::prepare_chat(GenerationRequest& r, JobPrompt* prompt, ApiError* err) {
  if (r.tool_choice != ToolChoice::kNone) {
    if (tool_format_ == ToolCallFormat::kNone) {
      *err = bad_request("tool calls are off: the server runs with --tool-call-parser none", "tools");
      return false;
    }
    r.tool_format = tool_format_;
    OutputConstraint& c = r.constraint;
    const bool forced = r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed;
    // tool_choice "auto" in the <tool_call> format: free text, and calls
    // under the tools' grammar once the model opens one (unless the request
    // constrains the output itself).
    const bool lazy = r.tool_choice == ToolChoice::kAuto && tool_format_ == ToolCallFormat::kHermes &&
                      c.kind == OutputConstraint::Kind::kNone;
    if (forced || lazy) {
      c.kind = OutputConstraint::Kind::kToolCall;
      c.param = "tool_choice";
      c.tool_format = tool_format_;
      // harmony: one call per message, and a message ends the output.
      c.parallel = r.tool_choice != ToolChoice::kNamed && tool_format_ != ToolCallFormat::kHarmony &&
                   r.parallel_tool_calls;
      if (lazy) c.trigger = "<tool_call>";
      if (r.tool_choice == ToolChoice::kNamed)
        c.choices = {r.tool_choice_name};
      else
        for (const auto& t : r.tools) c.choices.push_back(t["function"]["name"].get<std::string>());
    }
  }
  const std::string format = r.reasoning.format.empty() ? cfg_.reasoning_format : r.reasoning.format;
  if (format != "none") r.reasoning_syntax = reasoning_;
  // Template variables: the request's, then what the reasoning controls imply.
  json& kw = r.chat_template_kwargs;
  const ReasoningOptions& o = r.reasoning;
  const bool server_off = cfg_.reasoning_budget == 0 && o.budget == -2 && o.effort.empty() && !o.enabled.value_or(false);
  if (!kw.contains("enable_thinking")) {
    if (thinking_off(o) || server_off) kw["enable_thinking"] = false;
    else if (o.enabled.value_or(false)) kw["enable_thinking"] = true;
  }
  if (!o.effort.empty() && !kw.contains("reasoning_effort")) kw["reasoning_effort"] = harmony_effort(o.effort);
  auto ids = render_chat_prompt(r, &prompt->rendered, err);
  if (!ids) return false;
  prompt->tokens = std::move(*ids);
  return true;
}

std::optional<std::vector<int32_t>> OpenAiService::render_chat_prompt(const GenerationRequest& r,
                                                                      std::string* rendered, ApiError* err) const {
  const bool with_tools = r.tools.is_array() && !r.tools.empty();
  json messages = r.messages;
  json tools = r.tools;
  Result<std::string> text = Status::error("");
  if (generic_tools_) {
    const std::string tools_text = with_tools ? generic_tools_text(r.tools, tool_format_, r.parallel_tool_calls) : "";
    messages = generic_tool_messages(r.messages, tools_text, tool_format_);
    text = render_chat_template(tok_, chat_template_, messages, r.add_generation_prompt, nullptr, r.chat_template_kwargs);
    if (!text && !tools_text.empty()) {  // a template that takes no system turn
      json alt = generic_tool_messages(r.messages, tools_text, tool_format_, /*in_user_turn=*/true);
      auto t2 = render_chat_template(tok_, chat_template_, alt, r.add_generation_prompt, nullptr, r.chat_template_kwargs);
      if (t2) {
        messages = std::move(alt);
        text = std::move(t2);
      }
    }
  } else {
    if (harmony_template_) {  // what gpt-oss's template would drop or refuse (harmony_prompt.h)
      messages = harmony_messages(messages);
      tools = harmony_tools(tools);
    }
    text = render_chat_template(tok_, chat_template_, messages, r.add_generation_prompt, tools, r.chat_template_kwargs);
  }
  if (!text) {
    *err = bad_request(fmt::format("the chat template rejected the messages: {}", text.status().message()), "messages");
    return std::nullopt;
  }
  std::string s = std::move(text.value());
  if (r.continue_final_message) {
    // Cut right after the final message's content: the model continues it.
    const std::string last = messages.back()["content"].get<std::string>();
    const size_t at = last.empty() ? std::string::npos : s.rfind(last);
    if (at == std::string::npos) {
      *err = bad_request("cannot continue the final message: its content is empty or not in the rendered chat",
                         "continue_final_message");
      return std::nullopt;
    }
    s.resize(at + last.size());
  }
  std::vector<int32_t> ids = tokenize_rendered_chat(tok_, s, messages);
  if (rendered) *rendered = std::move(s);
  return ids;
}

bool OpenAiService::chat_processor(const GenerationRequest& r, const std::string& body, const JobPrompt& prompt,
                                   int64_t max_tokens, std::shared_ptr<const grammar::CompiledGrammar> g,
                                   const std::vector<int32_t>& stop_ids, std::shared_ptr<const LogitsProcessor>* out,
                                   ApiError* err) {
  const ReasoningOptions& o = r.reasoning;
  const bool harmony = reasoning_.format == ReasoningFormat::kHarmony;
  const bool harmony_call =
      r.constraint.kind == OutputConstraint::Kind::kToolCall && r.constraint.tool_format == ToolCallFormat::kHarmony;
  std::shared_ptr<const LogitsProcessor> inner;
  if (harmony_call) {
    if (!harmony) {
      *err = bad_request("a forced call in the gpt-oss format needs its reasoning parser (--reasoning-parser gpt_oss)",
                         "tool_choice");
      return false;
    }
    inner = structured_.harmony_call(r.constraint, body, stop_ids, r.forced_tokens, err);
    if (!inner) return false;
  }
  if (reasoning_.format == ReasoningFormat::kNone) {
    *out = structured_.processor(g, r.logit_bias, stop_ids, r.forced_tokens, r.constraint.trigger);
    return true;
  }
  const std::vector<int32_t>& header = harmony_call ? call_header_tokens_ : final_header_tokens_;
  std::vector<int32_t> close = close_tokens_;
  if (harmony) close.insert(close.end(), header.begin(), header.end());
  // The budget: the request's (thinking_budget, reasoning.max_tokens), none
  // when thinking is off, a share of max_tokens for an effort level (gpt-oss
  // takes the level itself), else the server's. Unless the request asked for
  // no limit, thinking leaves room for the forced end and a reserve for the
  // answer: a quarter of max_tokens, at most 1024 tokens.
  int64_t budget = cfg_.reasoning_budget;
  bool unlimited = false;
  if (o.budget != -2) {
    budget = o.budget;
    unlimited = budget < 0;
  } else if (thinking_off(o)) {
    budget = 0;
  } else if (!o.effort.empty() && !harmony) {
    budget = static_cast<int64_t>(effort_share(o.effort) * static_cast<double>(max_tokens));
  } else if (o.enabled.value_or(false) && budget == 0) {
    budget = -1;
  }
  if (!unlimited) {
    const int64_t cap = std::max<int64_t>(
        0, max_tokens - static_cast<int64_t>(close.size()) - std::min<int64_t>(max_tokens / 4, 1024));
    budget = budget < 0 ? cap : std::min(budget, cap);
  }
  const int64_t min_tokens = o.min_tokens >= 0 ? o.min_tokens : cfg_.reasoning_budget_min;
  if (!inner) inner = structured_.processor(g, {}, stop_ids, r.forced_tokens, r.constraint.trigger);
  if (budget < 0 && min_tokens == 0 && !inner) {
    *out = structured_.processor(nullptr, r.logit_bias, stop_ids, r.forced_tokens);
    return true;
  }
  auto spec = std::make_shared<ThinkingSpec>();
  spec->harmony = harmony;
  spec->start = harmony ? std::string(kHarmonyAnalysis) : reasoning_.start;
  spec->end = harmony ? std::string(kHarmonyEnd) : reasoning_.end;
  spec->open = ReasoningParser(reasoning_, prompt.rendered).phase() == ReasoningParser::Phase::kThinking;
  spec->budget = budget;
  spec->min_tokens = budget >= 0 ? std::min(min_tokens, budget) : min_tokens;
  spec->close = std::move(close);
  if (harmony) {
    spec->answer_header = header;
    spec->open_tokens = analysis_tokens_;
  }
  spec->stop_ids = stop_ids;
  spec->bias = r.logit_bias;
  spec->pieces = pieces_;
  spec->space_tokens = space_tokens_;
  spec->start_tokens = start_tokens_;
  spec->tok = &tok_;
  *out = std::make_shared<ThinkingLogits>(std::move(spec), inner ? inner->clone() : nullptr);
  return true;
}

}  // namespace ember
