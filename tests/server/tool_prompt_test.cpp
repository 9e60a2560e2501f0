// The generic tool format (server/tool_prompt.h) on real templates: which
// templates render tools themselves; a whole tool round trip (call, result,
// answer) rewritten for Gemma 3's template, which rejects a tool turn
// as it is ("roles must alternate"), renders with the tools in the first
// turn, the call as <tool_call> text and the result as a user turn; calls
// are written as Python's json.dumps writes them (what tojson gives).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "server/tool_prompt.h"
#include "template/chat_template.h"

namespace ember {
namespace {

using nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/tests/data/template/templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const json& tools() {
  static const json t = json::parse(R"J([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather in a city (°C)", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])J");
  return t;
}

const json& round_trip() {
  static const json m = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3 degrees"},
    {"role": "tool", "tool_call_id": "call_2", "content": "windy"},
    {"role": "user", "content": "Thanks. Should I wear a coat?"}])");
  return m;
}

TEST(ToolPrompt, WhichTemplatesRenderToolsThemselves) {
  for (const char* f : {"Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja", "openai-gpt-oss-120b.jinja",
                        "meta-llama-Llama-3.1-Instruct.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                        "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Qwen-Qwen2.5-Instruct.jinja"})
    EXPECT_TRUE(template_renders_tools(read_template(f))) << f;
  for (const char* f : {"google-gemma-3-it.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"})
    EXPECT_FALSE(template_renders_tools(read_template(f))) << f;
  EXPECT_FALSE(template_renders_tools("{{ message['tools'] }} {{ x.tools }} {{ 'tools' }}"));
  EXPECT_TRUE(template_renders_tools("{% if tools %}{{ tools | tojson }}{% endif %}"));
}

TEST(ToolPrompt, GemmaRendersAWholeRoundTrip) {
  const std::string gemma = read_template("google-gemma-3-it.jinja");
  // As it is, the template refuses the tool turn.
  EXPECT_FALSE(apply_chat_template(gemma, round_trip(), tools(), true, "<bos>", "<eos>", json::object()).is_ok());
  const std::string text = generic_tools_text(tools(), ToolCallFormat::kHermes, true);
  const json msgs = generic_tool_messages(round_trip(), text, ToolCallFormat::kHermes);
  // system, user, assistant (the call as text), user (results + the next question).
  ASSERT_EQ(msgs.size(), 4u) << msgs.dump(1);
  EXPECT_EQ(msgs[0]["content"], "Be brief.\n\n" + text);
  EXPECT_EQ(msgs[2]["content"], "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>");
  EXPECT_EQ(msgs[3]["content"],
            "<tool_response>\n3 degrees\n</tool_response>\n<tool_response>\nwindy\n</tool_response>\n\nThanks. Should I "
            "wear a coat?");
  auto out = apply_chat_template(gemma, msgs, nullptr, true, "<bos>", "<eos>", json::object());
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const std::string& r = out.value();
  EXPECT_EQ(r.rfind("<bos><start_of_turn>user\nBe brief.\n\n# Tools", 0), 0u) << r;
  EXPECT_NE(r.find("<start_of_turn>model\n<tool_call>\n{\"name\": \"get_weather\""), std::string::npos) << r;
  EXPECT_NE(r.find("<start_of_turn>user\n<tool_response>\n3 degrees"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.size() - 21), "<start_of_turn>model\n") << r;
  // The same when the conversation has no system turn: one is inserted.
  json no_system = round_trip();
  no_system.erase(0);
  const json m2 = generic_tool_messages(no_system, text, ToolCallFormat::kHermes);
  EXPECT_EQ(m2[0]["role"], "system");
  EXPECT_EQ(m2[0]["content"], text);
  // Or in the first user turn, for templates without a system turn.
  const json m3 = generic_tool_messages(no_system, text, ToolCallFormat::kHermes, true);
  EXPECT_EQ(m3[0]["role"], "user");
  EXPECT_EQ(m3[0]["content"], text + "\n\nWeather in Oslo?");
}

TEST(ToolPrompt, CallsAreWrittenAsTojsonWritesThem) {
  // Qwen3's template writes each tool with tojson: python_json gives the same text.
  auto out = apply_chat_template(read_template("Qwen-Qwen3-0.6B.jinja"),
                                 json::parse(R"([{"role": "user", "content": "hi"}])"), tools(), true, "", "<|im_end|>",
                                 json::object());
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_NE(out.value().find(python_json(tools()[0])), std::string::npos) << out.value();
  EXPECT_EQ(python_json(json::parse(R"({"a": [1, 2.5, "é\n"], "b": {}, "c": null})")),
            "{\"a\": [1, 2.5, \"é\\n\"], \"b\": {}, \"c\": null}");
  // Other formats.
  const json calls = json::parse(R"([{"function": {"name": "f", "arguments": {"x": 1}}},
                                     {"function": {"name": "g", "arguments": "{\"y\": 2}"}}])");
  EXPECT_EQ(generic_call_text("", calls, ToolCallFormat::kMistral),
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"arguments\": {\"y\": 2}}]");
  EXPECT_EQ(generic_call_text("Sure.", calls, ToolCallFormat::kLlama3Json),
            "Sure.\n{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {\"y\": 2}}");
}

}  // namespace
}  // namespace ember
