// Forced tool calls in gpt-oss's harmony format (server/harmony_calls.h)
// inside the thinking-budget processor, on a byte-level vocabulary with the
// harmony markers as control tokens: whatever a random "model" prefers, the
// output opens an analysis message, thinks exactly the budget, and ends in
// one call, its header and "<|constrain|>json<|message|>" written with the
// control tokens, that the harmony parser reads back as a call to one of the
// allowed tools with arguments that validate; a named function is the one
// called; forced-token jumps or none give a valid call alike.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/choice_output.h"
#include "server/harmony_calls.h"
#include "server/harmony_vocab.h"
#include "server/structured_output.h"
#include "server/thinking_budget.h"

namespace ember {
namespace {

using nlohmann::json;

constexpr const char* kBody = R"({"tools": [
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
   "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0,
   "maximum": 99}}, "required": ["a", "b"], "additionalProperties": false}}}]})";

struct Result {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;
  int64_t thinking = 0;
};

Result run(const Tokenizer& tok, StructuredOutput& so, const std::vector<std::string>& allowed, uint32_t seed,
           bool jumps) {
  EncodeOptions eo;
  eo.add_bos = false;
  eo.parse_special = true;
  const std::vector<int32_t> stops = {tok.token_id("<|call|>"), tok.token_id("<|return|>")};
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kToolCall;
  c.tool_format = ToolCallFormat::kHarmony;
  c.choices = allowed;
  ApiError err;
  auto inner = so.harmony_call(c, kBody, stops, true, &err);
  EXPECT_NE(inner, nullptr) << err.message;
  auto pieces = std::make_shared<std::vector<std::string>>();
  for (int32_t i = 0; i < tok.n_vocab(); ++i) pieces->push_back(tok.token_to_piece(i, true));
  auto spec = std::make_shared<ThinkingSpec>();
  spec->harmony = true;
  spec->start = std::string(kHarmonyAnalysis);
  spec->end = std::string(kHarmonyEnd);
  spec->budget = 6;
  spec->answer_header = tok.encode("<|start|>assistant<|channel|>commentary to=functions.", eo);
  spec->close = tok.encode(" Enough.<|end|>", eo);
  spec->close.insert(spec->close.end(), spec->answer_header.begin(), spec->answer_header.end());
  spec->open_tokens = tok.encode(std::string(kHarmonyAnalysis), eo);
  spec->stop_ids = stops;
  spec->pieces = pieces;
  spec->space_tokens = std::make_shared<const std::vector<int32_t>>(whitespace_tokens(*pieces));
  ThinkingLogits p(spec, inner->clone());
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.f, 2.f);
  std::vector<int32_t> out;
  const int V = tok.n_vocab();
  for (int step = 0; step < 400; ++step) {
    std::vector<float> lg(V);
    for (float& x : lg) x = noise(rng);
    // A model writes the markers only where the format puts them.
    for (int32_t t = 256; t < V; ++t)
      if (tok.token_text(t) != "<|end|>") lg[t] = -30.f;
    p.process(out.data(), static_cast<int64_t>(out.size()), 0, lg.data(), V);
    int best = -1;
    for (int i = 0; i < V; ++i)
      if (std::isfinite(lg[i]) && (best < 0 || lg[i] > lg[best])) best = i;
    if (best < 0) break;
    out.push_back(best);
    p.accept(best);
    if (best == stops[0] || best == stops[1]) break;
    if (jumps) {
      std::vector<int32_t> f;
      p.forced_tokens(&f);
      for (int32_t t : f) {
        out.push_back(t);
        p.accept(t);
      }
    }
  }
  EXPECT_TRUE(!out.empty() && (out.back() == stops[0] || out.back() == stops[1]))
      << "seed " << seed << ": " << json(tok.decode(out, true)).dump(-1, ' ', false, json::error_handler_t::replace);
  ChoiceOutputOptions o;
  o.reasoning = *reasoning_syntax_from_name("gpt_oss");
  o.prompt = "<|start|>user<|message|>Weather?<|end|><|start|>assistant";
  o.tools = ToolCallFormat::kHarmony;
  ChoiceOutput co(tok, o);
  std::vector<OutputEvent> ev;
  for (int32_t t : out) co.push(t, &ev);
  co.finish(false, &ev);
  Result r;
  for (const auto& e : ev) {
    if (e.kind == OutputEvent::Kind::kReasoning) r.reasoning += e.text;
    if (e.kind == OutputEvent::Kind::kContent) r.content += e.text;
    if (e.kind == OutputEvent::Kind::kCall) {
      if (static_cast<size_t>(e.call) >= r.calls.size()) r.calls.push_back({e.name, ""});
      r.calls[static_cast<size_t>(e.call)].second += e.text;
    }
  }
  r.thinking = p.thinking_tokens();
  EXPECT_EQ(tok.decode(out, true).rfind("<|channel|>analysis<|message|>", 0), 0u) << tok.decode(out, true);
  return r;
}

void expect_valid_call(const Result& r, const std::vector<std::string>& allowed, const std::string& label) {
  ASSERT_EQ(r.calls.size(), 1u) << label;
  const auto& [name, args] = r.calls[0];
  EXPECT_NE(std::find(allowed.begin(), allowed.end(), name), allowed.end()) << label << ": " << name;
  const json a = json::parse(args, nullptr, false);
  ASSERT_TRUE(a.is_object()) << label << ": " << args;
  if (name == "get_weather") {
    size_t chars = 0;  // maxLength counts characters
    for (unsigned char ch : a.value("city", std::string())) chars += (ch & 0xC0) != 0x80;
    EXPECT_TRUE(a.size() == 1 && a["city"].is_string() && chars <= 8) << args;
  } else {
    EXPECT_TRUE(a.size() == 2 && a["a"].is_number_integer() && a["b"].is_number_integer()) << args;
    EXPECT_TRUE(a["a"].get<int>() >= 0 && a["a"].get<int>() <= 99 && a["b"].get<int>() >= 0 && a["b"].get<int>() <= 99)
        << args;
  }
  EXPECT_EQ(r.content, "") << label;
  // The budget, or an earlier end the model wrote itself (<|end|>).
  EXPECT_LE(r.thinking, 6) << label;
  if (r.thinking == 6) {
    EXPECT_NE(r.reasoning.find("Enough."), std::string::npos) << label << ": " << r.reasoning;
  }
}

TEST(HarmonyCalls, RequiredAndNamedCallsParseAndValidate) {
  auto tok = harmony_tokenizer();
  ASSERT_NE(tok, nullptr);
  StructuredOutput so(*tok);
  const std::vector<std::string> both = {"get_weather", "add"};
  std::set<std::string> seen;
  for (uint32_t seed = 1; seed <= 12; ++seed)
    for (const bool jumps : {true, false}) {
      const Result r = run(*tok, so, both, seed, jumps);
      const std::string label = "seed " + std::to_string(seed) + (jumps ? " jumps" : "");
      expect_valid_call(r, both, label);
      if (!r.calls.empty()) seen.insert(r.calls[0].first);
    }
  EXPECT_EQ(seen.size(), 2u);  // the random model picks either tool
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const Result r = run(*tok, so, {"add"}, seed, true);
    expect_valid_call(r, {"add"}, "named, seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace ember
