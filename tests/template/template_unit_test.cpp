// Unit tests of the chat-template interpreter: the Value model, JSON output,
// error reporting with line numbers, resource limits, apply_chat_template's
// input handling, strftime_now, and robustness against malformed templates.
// (Jinja2 conformance of each language feature is covered against Python
// jinja2 by fixtures_test.cpp.)
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"

namespace ember::tmpl {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

Result<std::string> render(std::string_view src, const Value& ctx = Value::object(), RenderOptions opts = {}) {
  auto t = Template::parse(src);
  if (!t.is_ok()) return t.status();
  return t.value()->render(ctx, opts);
}

std::string ok(std::string_view src, const Value& ctx = Value::object()) {
  auto r = render(src, ctx);
  EXPECT_TRUE(r.is_ok()) << src << " -> " << r.status().message();
  return r.is_ok() ? r.value() : std::string("<error>");
}

std::string err(std::string_view src, const Value& ctx = Value::object(), RenderOptions opts = {}) {
  auto r = render(src, ctx, opts);
  EXPECT_FALSE(r.is_ok()) << src << " unexpectedly rendered: " << (r.is_ok() ? r.value() : "");
  return r.is_ok() ? std::string() : r.status().message();
}

std::string read_file(const std::string& rel) {
  std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/tests/data/template/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ------------------------------------------------------------------ Value

TEST(TemplateValue, FromJsonKeepsOrderedKeysAndTypes) {
  ojson j = ojson::parse(R"({"z": 1, "a": [true, null, 1.5, "s"], "m": {"y": -2, "b": 3}})");
  Value v(j);
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.repr(), "{'z': 1, 'a': [True, None, 1.5, 's'], 'm': {'y': -2, 'b': 3}}");
  // Plain nlohmann::json sorts keys; the values still convert.
  Value sorted(json::parse(R"({"z": 1, "a": 2})"));
  EXPECT_EQ(sorted.repr(), "{'a': 2, 'z': 1}");
  Value big(json::parse("18446744073709551615"));
  EXPECT_TRUE(big.is_float());
}

TEST(TemplateValue, PythonFloatRepr) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(123.456), "123.456");
  EXPECT_EQ(float_repr(1.0 / 0.0), "inf");
}

TEST(TemplateValue, EqualityAndOrdering) {
  EXPECT_TRUE(values_equal(Value(1), Value(1.0)));
  EXPECT_TRUE(values_equal(Value(true), Value(1)));
  EXPECT_FALSE(values_equal(Value::array({Value(1)}), Value::array({Value(1)}, true)));
  EXPECT_FALSE(values_equal(Value(nullptr), Value::undefined()));
  EXPECT_TRUE(values_less(Value("a"), Value("b")).value());
  EXPECT_FALSE(values_less(Value(1), Value("a")).is_ok());
}

TEST(TemplateValue, JsonDumpOptions) {
  Value v(ojson::parse(R"({"b": [1, {"c": "ü"}], "a": {}})"));
  JsonOptions o;
  EXPECT_EQ(to_json(v, o).value(), R"({"b": [1, {"c": "ü"}], "a": {}})");
  o.sort_keys = true;
  o.ensure_ascii = true;
  EXPECT_EQ(to_json(v, o).value(), R"({"a": {}, "b": [1, {"c": "\u00fc"}]})");
  JsonOptions ind;
  ind.has_indent = true;
  ind.indent = "  ";
  ind.item_sep = ",";
  EXPECT_EQ(to_json(Value::array({Value(1), Value::array()}), ind).value(), "[\n  1,\n  []\n]");
  EXPECT_FALSE(to_json(Value::undefined(), o).is_ok());
}

// ------------------------------------------------------------------ features

TEST(TemplateRender, CoreLanguage) {
  EXPECT_EQ(ok("{% for m in ms %}{{ loop.index }}:{{ m.role|upper }}{% if not loop.last %}, {% endif %}{% endfor %}",
               Value(ojson::parse(R"({"ms": [{"role": "user"}, {"role": "assistant"}]})"))),
            "1:USER, 2:ASSISTANT");
  EXPECT_EQ(ok("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% if i is odd %}{% continue %}{% endif %}"
               "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(ok("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m('x', b='y') }}"), "ABxy");
  EXPECT_EQ(ok("{{ [3, 1, 2][::-1] }}|{{ 'abc'[1:] }}|{{ {'k': 1}.get('k') }}"), "[2, 1, 3]|bc|1");
  EXPECT_EQ(ok("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(ok("{% generation %}gen{% endgeneration %}"), "gen");
  EXPECT_EQ(ok("{{ x | tojson(indent=2) }}", Value(ojson::parse(R"({"x": {"a": [1]}})"))),
            "{\n  \"a\": [\n    1\n  ]\n}");
}

TEST(TemplateRender, StrftimeNowUsesInjectedClock) {
  RenderOptions opts;
  opts.now = std::time_t{1700000000};
  std::tm tm{};
  localtime_r(&*opts.now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  auto r = render("{{ strftime_now('%d %b %Y') }}", Value::object(), opts);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(), buf);
  // Real clock: the current year appears.
  std::time_t now = std::time(nullptr);
  localtime_r(&now, &tm);
  EXPECT_EQ(ok("{{ strftime_now('%Y') }}"), std::to_string(tm.tm_year + 1900));
}

// ------------------------------------------------------------------ errors

TEST(TemplateErrors, SyntaxErrorsCarryLineNumbers) {
  EXPECT_NE(err("a\nb\n{{ 1 + }}").find("line 3"), std::string::npos);
  EXPECT_NE(err("{% if x %}\n\nno end").find("line 3"), std::string::npos);
  EXPECT_NE(err("x\n{% frob %}").find("unknown tag 'frob'"), std::string::npos);
  EXPECT_NE(err("x\n\n{{ y | nosuch }}").find("line 3: No filter named 'nosuch'"), std::string::npos);
  EXPECT_NE(err("{{ y is nosuch }}").find("No test named 'nosuch'"), std::string::npos);
  EXPECT_NE(err("{# open").find("Missing end of comment tag"), std::string::npos);
  EXPECT_NE(err("{% raw %}x").find("Missing end of raw directive"), std::string::npos);
  EXPECT_NE(err("{{ (1 }}").find("unexpected '}'"), std::string::npos);
  EXPECT_NE(err("{% break %}").find("'break' outside loop"), std::string::npos);
  EXPECT_NE(err("{{ 'a\\N{BULLET}' }}").find("not supported"), std::string::npos);
  EXPECT_NE(err("{{ 99999999999999999999 }}").find("too large"), std::string::npos);
  EXPECT_NE(err("{% macro m(a=1, b) %}{% endmacro %}").find("non-default argument"), std::string::npos);
}

TEST(TemplateErrors, RuntimeErrorsCarryLineNumbers) {
  std::string e = err("one\ntwo\n{{ raise_exception('custom boom') }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("TemplateError: custom boom"), std::string::npos) << e;
  e = err("\n{{ missing.attr }}");
  EXPECT_NE(e.find("line 2: UndefinedError: 'missing' is undefined"), std::string::npos) << e;
  e = err("{% macro m() %}\n\n{{ 1 // 0 }}{% endmacro %}\n{{ m() }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("ZeroDivisionError"), std::string::npos) << e;
  EXPECT_NE(err("{{ 'a' + 1 }}").find("can only concatenate str"), std::string::npos);
  EXPECT_NE(err("{% for x in 3 %}{% endfor %}").find("'int' object is not iterable"), std::string::npos);
  EXPECT_NE(err("{% set l = [] %}{{ l.append(1) }}").find("SecurityError"), std::string::npos);
  EXPECT_NE(err("{{ x() }}", Value(ojson::parse(R"({"x": 1})"))).find("not callable"), std::string::npos);
  // Unknown filters inside {% if %} only fail when executed, like jinja2.
  EXPECT_EQ(ok("{% if false %}{{ x | nosuch }}{% endif %}ok"), "ok");
  EXPECT_NE(err("{% if true %}{{ x | nosuch }}{% endif %}").find("No filter named"), std::string::npos);
}

// ------------------------------------------------------------------ limits

TEST(TemplateLimits, RunawayTemplatesFailCleanly) {
  EXPECT_NE(err("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}").find("RecursionError"), std::string::npos);
  RenderOptions small;
  small.limits.max_output_bytes = 1000;
  EXPECT_NE(err("{% for i in range(1000) %}xxxxxxxx{% endfor %}", Value::object(), small).find("output exceeds"),
            std::string::npos);
  RenderOptions few_steps;
  few_steps.limits.max_steps = 10000;
  EXPECT_NE(err("{% for i in range(100000) %}{% endfor %}", Value::object(), few_steps).find("step limit"),
            std::string::npos);
  EXPECT_NE(err("{{ range(100000000) | length }}").find("limit"), std::string::npos);
  EXPECT_NE(err("{{ 'x' * 100000000 }}").find("MemoryError"), std::string::npos);
  // Deep nesting is rejected by the parser instead of overflowing the stack.
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(err(deep).find("nesting too deep"), std::string::npos);
  std::string deep_if;
  for (int i = 0; i < 2000; ++i) deep_if += "{% if true %}";
  EXPECT_FALSE(render(deep_if).is_ok());
  EXPECT_NE(err("{{ 2 ** 64 }}").find("OverflowError"), std::string::npos);
}

TEST(TemplateLimits, MalformedTemplatesNeverCrash) {
  // Every prefix of every real template, plus byte corruptions: each must
  // either render or return an error Status.
  const char* files[] = {"google-gemma-3-it.jinja", "meta-llama-Llama-3.1-Instruct.jinja",
                         "Qwen-Qwen2.5-Instruct.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"};
  ChatInputs in;
  in.messages = Value(ojson::parse(R"([{"role": "user", "content": "hi"}])"));
  in.tools = Value(ojson::parse(R"([{"type": "function", "function": {"name": "f", "description": "d",
                                      "parameters": {"type": "object", "properties": {}}}}])"));
  int rendered = 0, failed = 0;
  for (const char* f : files) {
    std::string src = read_file(std::string("templates/") + f);
    ASSERT_FALSE(src.empty()) << f;
    for (size_t cut = 0; cut < src.size(); cut += 7) {
      auto r = apply_chat_template(std::string_view(src).substr(0, cut), in);
      (r.is_ok() ? rendered : failed)++;
    }
    uint32_t seed = 12345;
    const char junk[] = "{}%#-+()[]'\".|~\n x";
    for (int k = 0; k < 300; ++k) {
      std::string m = src;
      for (int j = 0; j < 3; ++j) {
        seed = seed * 1664525u + 1013904223u;
        m[seed % m.size()] = junk[(seed >> 16) % (sizeof(junk) - 1)];
      }
      auto r = apply_chat_template(m, in);
      (r.is_ok() ? rendered : failed)++;
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(failed, 0);
}

// ------------------------------------------------------------------ apply_chat_template

TEST(ApplyChatTemplate, JsonOverloadAndNormalisation) {
  const char* tmpl =
      "{% for m in messages %}{{ m.role }}[{{ m | tojson }}]{% endfor %}|{{ tools }}|{{ documents }}|"
      "{{ add_generation_prompt }}|{{ bos_token }}{{ eos_token }}|{{ date_string }}";
  json msgs = json::parse(R"([{"role": "user", "content": "hi", "tool_calls": null},
                              {"role": "assistant", "content": "x", "reasoning": "why"}])");
  auto r = apply_chat_template(tmpl, msgs, nullptr, true, "<s>", "</s>", json{{"date_string", "D"}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(),
            "user[{\"content\": \"hi\", \"role\": \"user\"}]"
            "assistant[{\"thinking\": \"why\", \"content\": \"x\", \"reasoning\": \"why\", \"role\": \"assistant\", "
            "\"reasoning_content\": \"why\"}]|None|None|True|<s></s>|D");
  EXPECT_FALSE(apply_chat_template(tmpl, json::parse("[1]"), nullptr, false, "", "", nullptr).is_ok());
  EXPECT_FALSE(apply_chat_template(tmpl, msgs, json::parse("{}"), false, "", "", nullptr).is_ok());
  EXPECT_FALSE(apply_chat_template(tmpl, msgs, nullptr, false, "", "", json{{"messages", 1}}).is_ok());
}

TEST(ApplyChatTemplate, BuiltinGemmaAndChatml) {
  ChatInputs in;
  in.messages = Value(ojson::parse(R"([{"role": "system", "content": "Be nice."},
                                       {"role": "user", "content": " Hi "}])"));
  in.add_generation_prompt = true;
  in.bos_token = "<bos>";
  auto g = apply_chat_template(builtin_chat_template("gemma"), in);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g.value(), "<bos><start_of_turn>user\nBe nice.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  auto c = apply_chat_template(builtin_chat_template("chatml"), in);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c.value(), "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n");
}

TEST(ApplyChatTemplate, Llama32UsesStrftimeNowWhenNoDateGiven) {
  auto t = Template::parse(read_file("templates/meta-llama-Llama-3.2-3B-Instruct.jinja"));
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ChatInputs in;
  in.messages = Value(ojson::parse(R"([{"role": "user", "content": "Hi"}])"));
  in.bos_token = "<|begin_of_text|>";
  in.options.now = std::time_t{1741176000};  // 2025-03-05 12:00 UTC
  std::tm tm{};
  localtime_r(&*in.options.now, &tm);
  char date[32];
  std::strftime(date, sizeof(date), "%d %b %Y", &tm);
  auto r = apply_chat_template(*t.value(), in);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r.value().find(std::string("Today Date: ") + date + "\n"), std::string::npos) << r.value();
}

TEST(ApplyChatTemplate, ParsedTemplateIsReusableAcrossThreads) {
  auto t = Template::parse(builtin_chat_template("gemma"));
  ASSERT_TRUE(t.is_ok());
  const Template& tpl = *t.value();
  std::vector<std::string> outs(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) {
        ChatInputs in;
        in.messages = Value::array({Value::object()});
        in.messages.arr().items[0].obj().set("role", Value("user"));
        in.messages.arr().items[0].obj().set("content", Value("m" + std::to_string(i)));
        auto r = apply_chat_template(tpl, in);
        outs[static_cast<size_t>(i)] = r.is_ok() ? r.value() : r.status().message();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(outs[static_cast<size_t>(i)], "<start_of_turn>user\nm" + std::to_string(i) + "<end_of_turn>\n");
  }
}

}  // namespace
}  // namespace ember::tmpl
