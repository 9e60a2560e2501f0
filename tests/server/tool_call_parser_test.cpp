// Tool-call parsing (server/tool_calls.h): outputs in each format (Hermes /
// Qwen, Llama 3.x JSON, Mistral; written as those models write them) parse
// into the expected content and calls, fed whole and fed in random fragment
// sizes alike (streaming == non-streaming); blocks that do not parse stay
// content; the forcing grammar admits exactly the calls of its format.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "server/tool_calls.h"
#include "template/chat_template.h"

namespace ember {
namespace {

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

Parsed parse_in_pieces(ToolCallFormat f, const std::string& text, std::mt19937* rng) {
  ToolCallParser p(f);
  Parsed out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = rng ? 1 + (*rng)() % 7 : text.size();
    p.push(std::string_view(text).substr(i, n), &out.content, &out.calls);
    i += n;
  }
  p.finish(&out.content, &out.calls);
  return out;
}

struct Case {
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      // Hermes / Qwen 2.5 / Qwen 3: content, then one block per call.
      {ToolCallFormat::kHermes,
       "I'll check the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
       "\"unit\": \"celsius\"}}\n</tool_call>",
       "I'll check the weather.",
       {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}}},
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2, {\"y\": \"}\"}]}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
       "",
       {{"a", R"({"x":[1,2,{"y":"}"}]})"}, {"b", "{}"}}},
      {ToolCallFormat::kHermes, "No tools needed: 2 < 3 and <tool is not a tag.\n", "No tools needed: 2 < 3 and <tool is not a tag.\n", {}},
      // A block that is not a call stays content; so does an unclosed one that does not parse.
      {ToolCallFormat::kHermes, "a <tool_call>not json</tool_call> b", "a <tool_call>not json</tool_call> b", {}},
      {ToolCallFormat::kHermes, "x<tool_call>{\"name\": \"f\", \"argu", "x<tool_call>{\"name\": \"f\", \"argu", {}},
      // Unclosed but complete (the model stopped after the JSON); a streamed
      // call's arguments are the model's text less the whitespace between tokens.
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"\\u00e9 t\\u00e9\"}}\n", "",
       {{"f", "{\"q\":\"\\u00e9 t\\u00e9\"}"}}},
      // Cut inside its arguments (max_tokens): a committed call stands as written.
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": [1, 2", "", {{"f", "{\"q\":[1,2"}}},
      // Another key order, quoted arguments: parsed whole when the block closes.
      {ToolCallFormat::kHermes, "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"g\"}</tool_call>", "",
       {{"g", "{\"a\":1}"}}},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"a\\\": 2}\"}</tool_call>ok", "ok",
       {{"g", "{\"a\": 2}"}}},
      // A closing marker inside an argument string is text; outside, it ends the block.
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"h\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call> done",
       "done", {{"h", "{\"s\":\"</tool_call>\"}"}}},
      // Llama 3.x: the whole answer is the call (parameters), optionally after <|python_tag|>.
      {ToolCallFormat::kLlama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", {{"get_weather", R"({"city":"Paris"})"}}},
      {ToolCallFormat::kLlama3Json,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {\"s\": \"x;y\"}}",
       "",
       {{"a", R"({"n":1})"}, {"b", R"({"s":"x;y"})"}}},
      {ToolCallFormat::kLlama3Json, "  The answer is {42}.", "  The answer is {42}.", {}},
      {ToolCallFormat::kLlama3Json, "{\"city\": \"Paris\"}", "{\"city\": \"Paris\"}", {}},  // no name: content
      // Quoted arguments (JSON inside a string) are taken as they are.
      {ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}", "", {{"f", "{\"a\": 1}"}}},
      // Mistral: [TOOL_CALLS] and a JSON array, or the v11 form name[ARGS]{...}.
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
       "\"arguments\": {}}]",
       "",
       {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}},
      {ToolCallFormat::kMistral, "Let me look.[TOOL_CALLS]search[ARGS]{\"q\": \"ember\"}[TOOL_CALLS]open[ARGS]{\"id\": 3}",
       "Let me look.",
       {{"search", R"({"q":"ember"})"}, {"open", R"({"id":3})"}}},
      {ToolCallFormat::kMistral, "Plain [TOOL answer", "Plain [TOOL answer", {}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": 3}]", "[TOOL_CALLS][{\"name\": 3}]", {}},
      // Streamed lists: what follows a committed call is the next call, the
      // list's end, or content; a list cut short keeps its committed calls.
      {ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {\"x\": 1}} Done.", "Done.", {{"a", R"({"x":1})"}}},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {}};\n{\"parameters\": {\"y\": 2}, \"name\": \"b\"}",
       "", {{"a", "{}"}, {"b", R"({"y":2})"}}},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"q\": [1, 2", "", {{"f", R"({"q":[1,2)"}}},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"a\", \"parameters\": {\"s\": \"}\"}}; {\"name\": \"b\", \"param", "{\"name\": \"b\", \"param",
       {{"a", R"({"s":"}"})"}}},
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}", "",
       {{"a", R"({"x":1})"}, {"b", "{}"}}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}] ok", "ok", {{"a", "{}"}}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS] {\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}", "", {{"a", R"({"k":"v"})"}}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]f[ARGS] {\"s\": \"}{\", \"n\": {\"m\": 1}}", "", {{"f", R"({"s":"}{","n":{"m":1}})"}}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"9}\"}]", "",
       {{"a", R"({"x":1})"}}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"arguments\": {}, \"name\": \"z\"}]", "", {{"z", "{}"}}},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]no args here", "[TOOL_CALLS]no args here", {}},
      {ToolCallFormat::kNone, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", {}},
  };
  return kCases;
}

TEST(ToolCallParser, RecordedOutputsWholeAndInRandomFragments) {
  for (const Case& c : cases()) {
    const Parsed whole = parse_in_pieces(c.format, c.text, nullptr);
    EXPECT_EQ(whole.content, c.content) << c.text;
    EXPECT_EQ(whole.calls, c.calls) << c.text;
    for (uint32_t seed = 0; seed < 40; ++seed) {
      std::mt19937 rng(seed);
      const Parsed pieces = parse_in_pieces(c.format, c.text, &rng);
      ASSERT_EQ(pieces.content, whole.content) << c.text << " seed " << seed;
      ASSERT_EQ(pieces.calls, whole.calls) << c.text << " seed " << seed;
    }
  }
}

TEST(ToolCallParser, ContentIsShownBeforeTheOutputEnds) {
  // Streaming: plain text is not held back (only a possible marker prefix
  // and trailing whitespace).
  ToolCallParser p(ToolCallFormat::kHermes);
  std::string content;
  std::vector<ToolCall> calls;
  p.push("Hello wor", &content, &calls);
  EXPECT_EQ(content, "Hello wor");
  p.push("ld <tool", &content, &calls);
  EXPECT_EQ(content, "Hello world");
  p.push("_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", &content, &calls);
  ASSERT_EQ(calls.size(), 1u);  // a call is complete as soon as its block closes
  EXPECT_EQ(calls[0].name, "f");
  EXPECT_TRUE(p.is_marker("<tool_call>"));
  EXPECT_FALSE(ToolCallParser(ToolCallFormat::kLlama3Json).is_marker("<tool_call>"));
}

TEST(ToolCallParser, StreamedCallsStartWithTheirNameAndArriveInFragments) {
  struct Stream {
    ToolCallFormat format;
    std::string text, before, first_end;  // content before the calls; the text that ends call 0
  };
  const std::vector<Stream> streams = {
      {ToolCallFormat::kHermes,
       "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
       "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
       "Sure.", "</tool_call>"},
      {ToolCallFormat::kLlama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}; "
       "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
       "", "}}"},
      {ToolCallFormat::kMistral,
       "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}, "
       "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
       "Sure.", "}}"},
      {ToolCallFormat::kMistral,
       "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}[TOOL_CALLS]add[ARGS]"
       "{\"a\": 1, \"b\": 2}",
       "Sure.", "\"}"},
  };
  for (const Stream& st : streams)
  for (uint32_t seed = 0; seed < 30; ++seed) {
    SCOPED_TRACE(st.text);
    const std::string& text = st.text;
    std::mt19937 rng(seed);
    ToolCallParser p(st.format);
    std::vector<ToolCallEvent> all;
    size_t i = 0, fragments_before_close = 0;
    while (i < text.size()) {
      const size_t n = 1 + rng() % 5;
      std::vector<ToolCallEvent> ev;
      p.push(std::string_view(text).substr(i, n), &ev);
      i += n;
      for (const ToolCallEvent& e : ev)
        if (e.call == 0 && !e.text.empty() && text.find(st.first_end) + st.first_end.size() > i) ++fragments_before_close;
      all.insert(all.end(), ev.begin(), ev.end());
    }
    p.finish(&all);
    // Content, then call 0 (name first), then call 1; arguments in several fragments.
    size_t first = 0;
    std::string before;
    while (first < all.size() && all[first].call < 0) before += all[first++].text;
    EXPECT_EQ(before, st.before);
    ASSERT_LT(first, all.size());
    EXPECT_EQ(all[first].call, 0);
    EXPECT_EQ(all[first].name, "get_weather");
    EXPECT_TRUE(all[first].text.empty());
    for (size_t k = first + 1; k < all.size(); ++k) EXPECT_GE(all[k].call, all[k - 1].call) << seed;
    EXPECT_GT(fragments_before_close, 1u) << seed;
    std::string content;
    std::vector<ToolCall> calls;
    apply_tool_call_events(all, &content, &calls);
    EXPECT_EQ(content, st.before);
    EXPECT_EQ(calls, (std::vector<ToolCall>{{"get_weather", R"({"city":"Paris","unit":"celsius"})"},
                                             {"add", R"({"a":1,"b":2})"}}));
  }
}

TEST(ToolCallParser, FormatNamesAndDetection) {
  EXPECT_EQ(tool_call_format_from_name("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(tool_call_format_from_name("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(tool_call_format_from_name("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(tool_call_format_from_name("none"), ToolCallFormat::kNone);
  EXPECT_FALSE(tool_call_format_from_name("auto").has_value());
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::kLlama3Json), "llama3_json");
  // Fragments of the real templates.
  EXPECT_EQ(detect_tool_call_format("{{- '<tool_call>\\n{\"name\": \"<function-name>\", \"arguments\": <args-json-object>}"
                                    "\\n</tool_call>' }}"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{- \"[TOOL_CALLS] [\" }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{- '<|start_header_id|>ipython<|end_header_id|>' }} {\"name\": function name, "
                                    "\"parameters\": dictionary}"),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format("{{ bos_token }}<start_of_turn>user"), ToolCallFormat::kNone);
}

std::string read_template(const std::string& name) {
  std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/tests/data/template/templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ToolCallParser, DetectedFromTheRealTemplates) {
  const std::pair<const char*, ToolCallFormat> kWant[] = {
      {"Qwen-Qwen2.5-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"google-gemma-3-it.jinja", ToolCallFormat::kNone},
      {"builtin-chatml.jinja", ToolCallFormat::kHermes},  // ember's fallback writes calls the Hermes way
  };
  for (const auto& [name, want] : kWant) {
    const std::string t = read_template(name);
    ASSERT_FALSE(t.empty()) << name;
    EXPECT_EQ(detect_tool_call_format(t), want) << name;
  }
  // The template shows the tools and renders an earlier call (arguments as an object).
  const nlohmann::json tools = nlohmann::json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const nlohmann::json msgs = nlohmann::json::parse(R"([{"role": "user", "content": "Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
       "arguments": {"city": "Paris"}}}]}, {"role": "tool", "content": "sunny", "tool_call_id": "c1"}])");
  auto out = apply_chat_template(read_template("Qwen-Qwen2.5-Instruct.jinja"), msgs, tools, true, "", "<|im_end|>",
                                 nlohmann::json::object());
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_NE(out->find("<tools>"), std::string::npos) << *out;
  EXPECT_NE(out->find("\"name\": \"get_weather\""), std::string::npos) << *out;
  EXPECT_NE(out->find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << *out;
  EXPECT_NE(out->find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << *out;
}

// Runs the grammar over `text` byte by byte; true if it is a complete match.
bool matches(const grammar::Grammar& g, const std::string& text) {
  auto pool = std::make_shared<grammar::StackPool>(std::make_shared<const grammar::Grammar>(g));
  grammar::GrammarMatcher m(pool);
  for (char ch : text)
    if (!m.accept(std::string_view(&ch, 1))) return false;
  return m.can_end();
}

TEST(ToolCallGrammar, AdmitsExactlyTheFormatsCalls) {
  const nlohmann::ordered_json call = nlohmann::ordered_json::parse(R"({"type": "object",
    "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}},
    "required": ["name", "arguments"], "additionalProperties": false})");
  auto call_gbnf = grammar::json_schema_to_gbnf(call);
  ASSERT_TRUE(call_gbnf.is_ok());
  auto hermes = grammar::parse_gbnf(tool_call_gbnf(ToolCallFormat::kHermes, *call_gbnf, true));
  ASSERT_TRUE(hermes.is_ok()) << hermes.status().message();
  const std::string one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(matches(*hermes, one));
  EXPECT_TRUE(matches(*hermes, one + "\n" + one));
  EXPECT_FALSE(matches(*hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(matches(*hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(*hermes, "Sure. " + one));
  // Compact: single spaces only.
  EXPECT_TRUE(matches(*hermes, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\"}}\n</tool_call>"));
  EXPECT_FALSE(matches(*hermes, "<tool_call>\n{\n\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}\n</tool_call>"));
  auto single = grammar::parse_gbnf(tool_call_gbnf(ToolCallFormat::kHermes, *call_gbnf, false));
  ASSERT_TRUE(single.is_ok());
  EXPECT_TRUE(matches(*single, one));
  EXPECT_FALSE(matches(*single, one + "\n" + one));
  // Whatever the grammar admits, the parser reads back as the same call.
  Parsed p = parse_in_pieces(ToolCallFormat::kHermes, one + "\n" + one, nullptr);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1], (ToolCall{"get_weather", R"({"city":"Paris"})"}));
  EXPECT_EQ(p.content, "");
  auto mistral = grammar::parse_gbnf(tool_call_gbnf(ToolCallFormat::kMistral, *call_gbnf, true));
  ASSERT_TRUE(mistral.is_ok());
  const std::string m1 = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}";
  EXPECT_TRUE(matches(*mistral, "[TOOL_CALLS][" + m1 + ", " + m1 + "]"));
  EXPECT_FALSE(matches(*mistral, m1));
  EXPECT_EQ(parse_in_pieces(ToolCallFormat::kMistral, "[TOOL_CALLS][" + m1 + ", " + m1 + "]", nullptr).calls.size(), 2u);
  auto llama = grammar::parse_gbnf(tool_call_gbnf(ToolCallFormat::kLlama3Json, *call_gbnf, false));
  ASSERT_TRUE(llama.is_ok());
  EXPECT_TRUE(matches(*llama, m1));
  EXPECT_FALSE(matches(*llama, m1 + "; " + m1));
}

}  // namespace
}  // namespace ember
