// Reasoning parsing (server/reasoning.h, server/choice_output.h) on the real
// chat templates of DeepSeek-R1-Distill-Qwen, QwQ, Qwen3 and gpt-oss
// (tests/data/template/templates, rendered by ember's Jinja interpreter,
// which the template fixtures hold byte-identical to Python jinja2): the
// syntax is detected from each template, the rendered prompt says where the
// model starts, and scripted outputs written as those models write them
// give the same reasoning, content and tool calls for every fragmentation of
// the text (all two-piece splits, random splits, byte by byte) and, through
// ChoiceOutput, token by token (Qwen3's tokenizer; harmony markers as
// control tokens that are hidden from the text yet reach the parser).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "server/choice_output.h"
#include "server/reasoning.h"
#include "template/chat_template.h"
#include "server/harmony_vocab.h"
#include "tokenizer/tokenizer_test_util.h"

namespace ember {
namespace {

using nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/tests/data/template/templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

constexpr const char* kR1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja";
constexpr const char* kQwQ = "Qwen-QwQ-32B.jinja";
constexpr const char* kQwen3 = "Qwen-Qwen3-0.6B.jinja";
constexpr const char* kGptOss = "openai-gpt-oss-120b.jinja";

const json& weather_tools() {
  static const json t = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather in a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  return t;
}

std::string render(const std::string& file, const json& kwargs = json::object(), bool tools = false) {
  tmpl::ChatInputs in;
  in.messages = tmpl::Value(json::parse(R"([{"role": "user", "content": "What is the weather in Oslo?"}])"));
  in.tools = tools ? tmpl::Value(weather_tools()) : tmpl::Value(nullptr);
  in.add_generation_prompt = true;
  in.extra_context = tmpl::Value(kwargs);
  in.options.now = 1754395200;
  auto out = tmpl::apply_chat_template(read_template(file), in);
  EXPECT_TRUE(out.is_ok()) << file << ": " << out.status().message();
  return out.is_ok() ? out.value() : "";
}

struct Parsed {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Parsed&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Parsed& p) {
  os << "{reasoning: " << json(p.reasoning).dump() << ", content: " << json(p.content).dump() << ", calls:";
  for (const auto& [n, a] : p.calls) os << " " << n << a;
  return os << "}";
}

// The answer goes on through a tool-call parser when `tools` is given (as in ChoiceOutput).
void fold(std::vector<ReasoningEvent>& ev, Parsed* p, ToolCallParser* tools, std::vector<ToolCall>* tcalls) {
  for (const auto& e : ev) {
    switch (e.kind) {
      case ReasoningEvent::Kind::kReasoning: p->reasoning += e.text; break;
      case ReasoningEvent::Kind::kContent:
        if (!tools) {
          p->content += e.text;
        } else {
          tools->push(e.text, &p->content, tcalls);
        }
        break;
      case ReasoningEvent::Kind::kCallStart: p->calls.push_back({e.text, ""}); break;
      case ReasoningEvent::Kind::kCallArgs: p->calls.at(static_cast<size_t>(e.call)).second += e.text; break;
    }
  }
  ev.clear();
}

Parsed parse_pieces(const ReasoningSyntax& s, const std::string& prompt, const std::vector<std::string>& pieces,
                    ToolCallFormat tools = ToolCallFormat::kNone) {
  ReasoningParser p(s, prompt);
  std::unique_ptr<ToolCallParser> tp;
  if (tools != ToolCallFormat::kNone) tp = std::make_unique<ToolCallParser>(tools);
  Parsed out;
  std::vector<ToolCall> tcalls;  // the tool-call parser's calls, in pieces as they stream
  std::vector<ReasoningEvent> ev;
  for (const auto& piece : pieces) {
    p.push(piece, &ev);
    fold(ev, &out, tp.get(), &tcalls);
  }
  p.finish(&ev);
  fold(ev, &out, tp.get(), &tcalls);
  if (tp) {
    tp->finish(&out.content, &tcalls);
    for (auto& c : tcalls) out.calls.push_back({c.name, c.arguments});
  }
  return out;
}

// Every fragmentation gives what the whole text gives, and that is `want`.
void expect_all_fragmentations(const ReasoningSyntax& s, const std::string& prompt, const std::string& text,
                               const Parsed& want, const std::string& label,
                               ToolCallFormat tools = ToolCallFormat::kNone) {
  const Parsed whole = parse_pieces(s, prompt, {text}, tools);
  EXPECT_EQ(whole, want) << label;
  for (size_t cut = 0; cut <= text.size(); ++cut)
    ASSERT_EQ(parse_pieces(s, prompt, {text.substr(0, cut), text.substr(cut)}, tools), whole)
        << label << " split at " << cut;
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(parse_pieces(s, prompt, bytes, tools), whole) << label << " byte by byte";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = rng() % 9;  // empty pieces too
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    ASSERT_EQ(parse_pieces(s, prompt, pieces, tools), whole) << label << " trial " << trial;
  }
}

TEST(ReasoningSyntax, DetectedFromTheRealTemplates) {
  for (const char* f : {kR1, kQwQ, kQwen3}) {
    const ReasoningSyntax s = detect_reasoning_syntax(read_template(f));
    EXPECT_EQ(s.format, ReasoningFormat::kThinkTags) << f;
    EXPECT_EQ(s.start, "<think>");
    EXPECT_EQ(s.end, "</think>");
  }
  EXPECT_EQ(detect_reasoning_syntax(read_template(kGptOss)).format, ReasoningFormat::kHarmony);
  for (const char* f : {"google-gemma-3-it.jinja", "meta-llama-Llama-3.1-Instruct.jinja", "Qwen-Qwen2.5-Instruct.jinja",
                        "mistralai-Mistral-Nemo-Instruct-2407.jinja"})
    EXPECT_EQ(detect_reasoning_syntax(read_template(f)).format, ReasoningFormat::kNone) << f;
  EXPECT_EQ(reasoning_parser_name(*reasoning_syntax_from_name("deepseek-r1")), std::string("deepseek_r1"));
  EXPECT_EQ(reasoning_parser_name(*reasoning_syntax_from_name("harmony")), std::string("gpt_oss"));
  EXPECT_FALSE(reasoning_syntax_from_name("auto"));
  EXPECT_FALSE(reasoning_syntax_from_name("deepseek"));
}

TEST(ReasoningSyntax, ThePromptSaysWhereTheModelStarts) {
  const ReasoningSyntax tags = detect_reasoning_syntax(read_template(kQwen3));
  using Phase = ReasoningParser::Phase;
  // R1 and QwQ open the thinking section in the generation prompt.
  EXPECT_EQ(ReasoningParser(tags, render(kR1)).phase(), Phase::kThinking);
  EXPECT_EQ(ReasoningParser(tags, render(kQwQ)).phase(), Phase::kThinking);
  // Qwen3 leaves it to the model; with enable_thinking=false it writes an empty one.
  EXPECT_EQ(ReasoningParser(tags, render(kQwen3)).phase(), Phase::kStart);
  const std::string off = render(kQwen3, json{{"enable_thinking", false}});
  EXPECT_NE(off.find("<think>\n\n</think>\n\n"), std::string::npos);
  EXPECT_EQ(ReasoningParser(tags, off).phase(), Phase::kStart);
  // deepseek_r1 named: thinking from the first token unless the prompt closed it.
  const ReasoningSyntax r1 = *reasoning_syntax_from_name("deepseek_r1");
  EXPECT_EQ(ReasoningParser(r1, "<｜User｜>Hi<｜Assistant｜>").phase(), Phase::kThinking);
  EXPECT_EQ(ReasoningParser(r1, off).phase(), Phase::kStart);
  // gpt-oss: a header ("<|start|>assistant"), the model writes the channel.
  const ReasoningSyntax h = detect_reasoning_syntax(read_template(kGptOss));
  EXPECT_EQ(ReasoningParser(h, render(kGptOss)).phase(), Phase::kStart);
  EXPECT_EQ(ReasoningParser(h, render(kGptOss) + "<|channel|>analysis<|message|>So far").phase(), Phase::kThinking);
}

TEST(ReasoningParser, DeepSeekR1AndQwQEveryFragmentation) {
  const ReasoningSyntax s = detect_reasoning_syntax(read_template(kR1));
  for (const char* f : {kR1, kQwQ}) {
    const std::string prompt = render(f);
    // The template opened <think>: the model writes no opening tag.
    expect_all_fragmentations(s, prompt,
                              "Okay, the user asks about Oslo.\nI cannot look it up.\n</think>\n\nI cannot check live "
                              "weather, but Oslo is cold in winter.",
                              {"Okay, the user asks about Oslo.\nI cannot look it up.",
                               "I cannot check live weather, but Oslo is cold in winter.", {}},
                              f);
    // R1-0528 writes the opening tag again: it is not reasoning text.
    expect_all_fragmentations(s, prompt, "<think>\nHmm, x < y and </thin is not the end.\n</think>\n\nDone.",
                              {"Hmm, x < y and </thin is not the end.", "Done.", {}}, f);
    // Cut inside thinking (max_tokens): all of it is reasoning, no content.
    expect_all_fragmentations(s, prompt, "Let me think about this carefully\n\n", {"Let me think about this carefully", "", {}},
                              f);
  }
}

TEST(ReasoningParser, Qwen3EveryFragmentation) {
  const ReasoningSyntax s = detect_reasoning_syntax(read_template(kQwen3));
  const std::string prompt = render(kQwen3, json::object(), true);
  expect_all_fragmentations(s, prompt,
                            "<think>\nThe user wants the weather.\nI should call get_weather.\n</think>\n\n<tool_call>\n"
                            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                            {"The user wants the weather.\nI should call get_weather.",
                             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                             {}},
                            "qwen3 thinking");
  // The same through the tool-call parser (Qwen3's <tool_call> format): the call, not its markup.
  expect_all_fragmentations(s, prompt,
                            "<think>\nI should call get_weather.\n</think>\n\nChecking.\n<tool_call>\n"
                            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                            {"I should call get_weather.", "Checking.", {{"get_weather", R"({"city":"Oslo"})"}}},
                            "qwen3 thinking + call", ToolCallFormat::kHermes);
  // No thinking: the whole text is content, "<" that is not "<think>" included.
  expect_all_fragmentations(s, prompt, "  <b>Hello</b>", {"", "  <b>Hello</b>", {}}, "qwen3 no thinking");
  expect_all_fragmentations(s, render(kQwen3, json{{"enable_thinking", false}}), "Hi there.", {"", "Hi there.", {}},
                            "qwen3 enable_thinking=false");
  // A text that is only the start of the tag stays content.
  expect_all_fragmentations(s, prompt, "<thi", {"", "<thi", {}}, "qwen3 partial tag");
}

TEST(ReasoningParser, GptOssHarmonyEveryFragmentation) {
  const ReasoningSyntax s = detect_reasoning_syntax(read_template(kGptOss));
  const std::string prompt = render(kGptOss, json::object(), true);
  expect_all_fragmentations(s, prompt,
                            "<|channel|>analysis<|message|>User asks the weather in Oslo. Use the tool.<|end|>"
                            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                            "<|message|>{\"city\": \"Oslo\", \"note\": \"a b\"}<|call|>",
                            {"User asks the weather in Oslo. Use the tool.", "",
                             {{"get_weather", R"({"city":"Oslo","note":"a b"})"}}},
                            "gpt-oss call");
  // The recipient after the role, as the template writes earlier calls.
  expect_all_fragmentations(s, prompt,
                            " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>",
                            {"", "", {{"get_weather", R"({"city":"Oslo"})"}}}, "gpt-oss recipient first");
  expect_all_fragmentations(s, prompt,
                            "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>analysis<|message|>"
                            "More.<|end|><|start|>assistant<|channel|>final<|message|>It is 3 degrees.<|return|>",
                            {"Think.\n\nMore.", "It is 3 degrees.", {}}, "gpt-oss final");
  // A stray byte before the next message's <|start|> (markers spelled in text tokens).
  expect_all_fragmentations(s, prompt,
                            "<|channel|>analysis<|message|>Hm.<|end|><<|start|>assistant<|channel|>final<|message|>Hi",
                            {"Hm.", "Hi", {}}, "gpt-oss stray byte");
  // Cut inside the analysis message.
  expect_all_fragmentations(s, prompt, "<|channel|>analysis<|message|>Still thinking <|e", {"Still thinking", "", {}},
                            "gpt-oss cut");
  // A model that ignores the format: all content.
  expect_all_fragmentations(s, prompt, "Hello <|there", {"", "Hello <|there", {}}, "gpt-oss raw");
}

// ---- token by token through ChoiceOutput ----------------------------------

struct Folded {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;
  int64_t reasoning_tokens = 0;
};

Folded run_tokens(const Tokenizer& tok, const ChoiceOutputOptions& o, const std::vector<int32_t>& ids, bool cut) {
  ChoiceOutput out(tok, o);
  std::vector<OutputEvent> ev;
  for (int32_t t : ids) out.push(t, &ev);
  out.finish(cut, &ev);
  Folded f;
  for (const auto& e : ev) {
    if (e.kind == OutputEvent::Kind::kReasoning) f.reasoning += e.text;
    if (e.kind == OutputEvent::Kind::kContent) f.content += e.text;
    if (e.kind == OutputEvent::Kind::kCall) {
      if (static_cast<size_t>(e.call) >= f.calls.size()) f.calls.push_back({e.name, ""});
      f.calls[static_cast<size_t>(e.call)].second += e.text;
    }
  }
  f.reasoning_tokens = out.reasoning_tokens();
  return f;
}

TEST(ChoiceOutput, Qwen3TokensReasoningThenToolCall) {
  const Tokenizer* tok = testing_tok::hf_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  ASSERT_GE(tok->token_id("<think>"), 0);
  ChoiceOutputOptions o;
  o.reasoning = detect_reasoning_syntax(read_template(kQwen3));
  o.prompt = render(kQwen3, json::object(), true);
  o.tools = ToolCallFormat::kHermes;
  const std::string think = "<think>\nThe user wants the weather in Oslo.\n</think>";
  const std::string answer = "\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  EncodeOptions eo;
  eo.add_bos = false;
  eo.parse_special = true;
  std::vector<int32_t> ids = tok->encode(think, eo);
  const size_t n_think = ids.size();
  for (int32_t t : tok->encode(answer, eo)) ids.push_back(t);
  ids.push_back(tok->token_id("<|im_end|>"));
  const Folded f = run_tokens(*tok, o, ids, false);
  EXPECT_EQ(f.reasoning, "The user wants the weather in Oslo.");
  EXPECT_EQ(f.content, "");
  ASSERT_EQ(f.calls.size(), 1u);
  EXPECT_EQ(f.calls[0].first, "get_weather");
  EXPECT_EQ(f.calls[0].second, R"({"city":"Oslo"})");
  // <think> ... </think>: every token of the section, its tags included.
  EXPECT_EQ(f.reasoning_tokens, static_cast<int64_t>(n_think));
  // Cut by max_tokens right after "<tool_call>\n{": no partial markup in content.
  std::vector<int32_t> cut(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_think));
  for (int32_t t : tok->encode("\n\n<tool_call>\n{", eo)) cut.push_back(t);
  const Folded g = run_tokens(*tok, o, cut, true);
  EXPECT_EQ(g.content, "");
  EXPECT_TRUE(g.calls.empty());
  // The same text ended by the model itself stays content (nothing is lost).
  EXPECT_EQ(run_tokens(*tok, o, cut, false).content, "<tool_call>\n{");
}

TEST(ChoiceOutput, HarmonyMarkersAreControlTokensHiddenFromTheText) {
  auto tok = harmony_tokenizer();
  ASSERT_NE(tok, nullptr);
  EncodeOptions eo;
  eo.add_bos = false;
  eo.parse_special = true;
  const std::string text =
      "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>";
  const std::vector<int32_t> ids = tok->encode(text, eo);
  ASSERT_EQ(tok->token_type(ids[0]), TokenType::kControl);
  // Hidden from the text (but <|end|>, which the tokenizer keeps as text in
  // gpt-oss vocabularies, where it separates messages).
  EXPECT_EQ(tok->decode(ids).find("<|channel|>"), std::string::npos);
  EXPECT_EQ(tok->token_type(tok->token_id("<|end|>")), TokenType::kUserDefined);
  ChoiceOutputOptions o;
  o.reasoning = *reasoning_syntax_from_name("gpt_oss");
  o.prompt = render(kGptOss, json::object(), true);
  o.tools = ToolCallFormat::kHarmony;
  const Folded f = run_tokens(*tok, o, ids, false);
  EXPECT_EQ(f.reasoning, "Need the tool.");
  EXPECT_EQ(f.content, "");
  ASSERT_EQ(f.calls.size(), 1u);
  EXPECT_EQ(f.calls[0], (std::pair<std::string, std::string>{"get_weather", R"({"city":"Oslo"})"}));
  // "<|channel|>analysis<|message|>" opens the section: the tokens from its
  // <|message|> to <|end|> are reasoning tokens.
  const size_t open = text.find("<|message|>") + std::string("<|message|>").size();
  const size_t close = text.find("<|end|>");
  const int64_t inside = static_cast<int64_t>(tok->encode(text.substr(open, close - open), eo).size());
  EXPECT_EQ(f.reasoning_tokens, inside + 2);  // + <|message|> and <|end|>
  // Without parsing (reasoning format "none") the visible text is all content.
  ChoiceOutputOptions raw;
  raw.skip_special_tokens = false;
  const Folded r = run_tokens(*tok, raw, ids, false);
  EXPECT_EQ(r.content, text);
  EXPECT_EQ(r.reasoning_tokens, 0);
}

}  // namespace
}  // namespace ember
