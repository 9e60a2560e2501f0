// Chat history for gpt-oss's template (server/harmony_prompt.h), rendered
// through the template itself: several system messages, parallel calls with
// their results, content and reasoning beside a call, tools without a
// description. Each case is first shown to go wrong with the template alone.
#include "server/harmony_prompt.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"

namespace ember {
namespace {

using json = nlohmann::json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Local time",
   "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}])");

Result<std::string> render(const json& messages, const json& tools) {
  return apply_chat_template(builtin_chat_template("gpt-oss"), messages, tools, true, "<|startoftext|>", "<|return|>",
                             json::object());
}

TEST(HarmonyPrompt, PlainHistoryIsUnchanged) {
  const json m = json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
       "function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]},
      {"role": "tool", "tool_call_id": "a", "content": "12:00"}])");
  EXPECT_EQ(harmony_messages(m), m);
  EXPECT_EQ(harmony_tools(kTools), kTools);
}

TEST(HarmonyPrompt, SystemMessagesAreJoined) {
  const json m = json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "system", "content": "Answer in French."},
      {"role": "user", "content": "Hi"}])");
  auto plain = render(m, nullptr);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->find("Answer in French."), std::string::npos);  // the template drops the second
  auto r = render(harmony_messages(m), nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r->find("<|start|>developer<|message|># Instructions\n\nBe brief.\n\nAnswer in French.\n\n<|end|>"
                    "<|start|>user<|message|>Hi<|end|><|start|>assistant"),
            std::string::npos)
      << *r;
}

TEST(HarmonyPrompt, ParallelCallsBecomeOneMessageEachWithItsResult) {
  const json m = json::parse(R"([{"role": "user", "content": "Weather and time in Oslo?"},
      {"role": "assistant", "content": "", "reasoning_content": "Two tools.", "tool_calls": [
        {"id": "w1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
        {"id": "t1", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]},
      {"role": "tool", "tool_call_id": "t1", "content": "12:00"},
      {"role": "tool", "tool_call_id": "w1", "content": "sunny"}])");
  auto plain = render(m, kTools);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->find("to=functions.get_time<|channel|>"), std::string::npos);  // the second call is lost
  const json h = harmony_messages(m);
  ASSERT_EQ(h.size(), 5u);
  auto r = render(h, kTools);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r->find("<|start|>user<|message|>Weather and time in Oslo?<|end|>"
                    "<|start|>assistant<|channel|>analysis<|message|>Two tools.<|end|>"
                    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                    "{\"city\": \"Oslo\"}<|call|>"
                    "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|>"
                    "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>"
                    "\"{\\\"tz\\\": \\\"CET\\\"}\"<|call|>"
                    "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>\"12:00\"<|end|>"
                    "<|start|>assistant"),
            std::string::npos)
      << *r;
  // Without ids (or with ids that match nothing) the results go in order.
  json anon = m;
  for (json& c : anon[1]["tool_calls"]) c.erase("id");
  const json ha = harmony_messages(anon);
  ASSERT_EQ(ha.size(), 5u);
  EXPECT_EQ(ha[2]["content"], "12:00");
  EXPECT_EQ(ha[3]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(ha[4]["content"], "sunny");
  // More results than calls: none is dropped.
  json extra = m;
  extra.push_back({{"role", "tool"}, {"tool_call_id", "zz"}, {"content", "late"}});
  const json he = harmony_messages(extra);
  ASSERT_EQ(he.size(), 6u);
  EXPECT_EQ(he[5]["content"], "late");
}

TEST(HarmonyPrompt, ContentAndReasoningBesideACall) {
  const json m = json::parse(R"([{"role": "user", "content": "Time?"},
      {"role": "assistant", "content": "Let me check.", "reasoning_content": "Need the tool.", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]},
      {"role": "tool", "tool_call_id": "t1", "content": "12:00"}])");
  auto plain = render(m, kTools);
  ASSERT_FALSE(plain.is_ok());
  EXPECT_NE(plain.status().message().find("Cannot pass both content and thinking"), std::string::npos);
  auto r = render(harmony_messages(m), kTools);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r->find("<|start|>assistant<|channel|>analysis<|message|>Need the tool.\n\nLet me check.<|end|>"
                    "<|start|>assistant to=functions.get_time<|channel|>"),
            std::string::npos)
      << *r;
}

TEST(HarmonyPrompt, ToolsWithoutDescription) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "ping"}},
      {"type": "function", "function": {"name": "pong", "description": null,
       "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}])");
  const json m = json::parse(R"([{"role": "user", "content": "Ping?"}])");
  EXPECT_FALSE(render(m, tools).is_ok());
  auto r = render(m, harmony_tools(tools));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r->find("namespace functions {\n\n// \ntype ping = () => any;\n\n// \ntype pong = (_: {\nn?: number,\n}) => any;"
                    "\n\n} // namespace functions"),
            std::string::npos)
      << *r;
}

}  // namespace
}  // namespace ember
