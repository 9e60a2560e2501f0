// Byte-for-byte comparison of ember's chat-template interpreter against Python
// jinja2 as configured by transformers. Expected outputs are produced by
// tools/gen_template_fixtures.py from tests/data/template/{conversations,features}.json
// and the real templates under tests/data/template/templates/.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"

namespace ember::tmpl {
namespace {

using ojson = nlohmann::ordered_json;

std::string data_path(const std::string& rel) { return std::string(EMBER_SOURCE_DIR) + "/tests/data/template/" + rel; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ojson read_json(const std::string& rel) {
  std::string text = read_file(data_path(rel));
  return ojson::parse(text);
}

std::string template_text(const std::string& file) {
  if (file.rfind("builtin:", 0) == 0) {
    const char* t = builtin_chat_template(file.substr(8));
    return t ? t : "";
  }
  return read_file(data_path("templates/" + file));
}

// Checks an expected error record against our Status.
void expect_error(const ojson& rec, const Status& st, const std::string& label) {
  std::string err = rec["error"].get<std::string>();
  const std::string kUser = "TemplateError: ";
  if (err.rfind(kUser, 0) == 0) {
    // raise_exception: the template's own message must come through.
    EXPECT_NE(st.message().find(err.substr(kUser.size())), std::string::npos) << label << ": " << st.message();
  }
  EXPECT_NE(st.message().find("line "), std::string::npos) << label << ": no line number in '" << st.message() << "'";
}

TEST(TemplateFixtures, RealChatTemplatesMatchJinja2) {
  ojson spec = read_json("conversations.json");
  ojson expected = read_json("expected_chat.json");
  ASSERT_GT(expected.size(), 100u);
  std::map<std::string, ojson> templates;
  for (const auto& t : spec["templates"]) templates[t["file"].get<std::string>()] = t;
  std::map<std::string, ojson> cases;
  for (const auto& c : spec["cases"]) cases[c["name"].get<std::string>()] = c;

  std::map<std::string, std::unique_ptr<Template>> parsed;
  int compared = 0;
  for (const auto& rec : expected) {
    const std::string file = rec["template"].get<std::string>();
    const std::string name = rec["case"].get<std::string>();
    const bool agp = rec["add_generation_prompt"].get<bool>();
    const std::string label = file + " / " + name + (agp ? " (gen)" : "");
    if (!parsed.count(file)) {
      auto t = Template::parse(template_text(file));
      ASSERT_TRUE(t.is_ok()) << file << ": " << t.status().message();
      parsed[file] = std::move(t.value());
    }
    const ojson& tspec = templates.at(file);
    const ojson& cspec = cases.at(name);
    ChatInputs in;
    in.messages = Value(cspec["messages"]);
    in.tools = cspec.contains("tools") ? Value(spec["tools"][cspec["tools"].get<std::string>()]) : Value(nullptr);
    in.add_generation_prompt = agp;
    in.bos_token = tspec["bos_token"].get<std::string>();
    in.eos_token = tspec["eos_token"].get<std::string>();
    ojson extra = tspec["extra"];
    if (cspec.contains("extra")) {
      for (auto it = cspec["extra"].begin(); it != cspec["extra"].end(); ++it) extra[it.key()] = it.value();
    }
    in.extra_context = Value(extra);
    if (tspec.contains("now")) in.options.now = static_cast<std::time_t>(tspec["now"].get<int64_t>());
    auto out = apply_chat_template(*parsed[file], in);
    if (rec.contains("output")) {
      ASSERT_TRUE(out.is_ok()) << label << ": " << out.status().message();
      EXPECT_EQ(out.value(), rec["output"].get<std::string>()) << label;
    } else {
      ASSERT_FALSE(out.is_ok()) << label << " should fail with " << rec["error"] << " but rendered:\n" << out.value();
      expect_error(rec, out.status(), label);
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(expected.size()));
}

TEST(TemplateFixtures, FeatureCasesMatchJinja2) {
  ojson spec = read_json("features.json");
  ojson expected = read_json("expected_features.json");
  ASSERT_EQ(spec.size(), expected.size());
  RenderOptions opts;
  for (size_t i = 0; i < spec.size(); ++i) {
    const auto& s = spec[i];
    const auto& rec = expected[i];
    const std::string label = s["name"].get<std::string>();
    ASSERT_EQ(label, rec["name"].get<std::string>());
    auto t = Template::parse(s["template"].get<std::string>());
    Result<std::string> out = t.is_ok() ? t.value()->render(Value(s["context"]), opts) : Result<std::string>(t.status());
    if (rec.contains("output")) {
      EXPECT_TRUE(out.is_ok()) << label << ": " << out.status().message();
      if (out.is_ok()) {
        EXPECT_EQ(out.value(), rec["output"].get<std::string>()) << label;
      }
    } else {
      EXPECT_FALSE(out.is_ok()) << label << " should fail with " << rec["error"] << " but rendered: " << out.value();
      if (!out.is_ok()) {
        expect_error(rec, out.status(), label);
        if (rec.contains("lineno") && label.rfind("err_syntax", 0) == 0) {
          std::string want = "line " + std::to_string(rec["lineno"].get<int>()) + ":";
          EXPECT_NE(out.status().message().find(want), std::string::npos)
              << label << ": expected " << want << " in '" << out.status().message() << "'";
        }
      }
    }
  }
}

TEST(TemplateFixtures, BuiltinTemplatesMatchCommittedFiles) {
  EXPECT_EQ(std::string(builtin_chat_template("gemma")), read_file(data_path("templates/google-gemma-3-it.jinja")));
  EXPECT_EQ(std::string(builtin_chat_template("chatml")), read_file(data_path("templates/builtin-chatml.jinja")));
  EXPECT_EQ(std::string(builtin_chat_template("gpt-oss")),
            read_file(data_path("templates/openai-gpt-oss-120b.jinja")));
  EXPECT_EQ(builtin_chat_template("gpt_oss"), builtin_chat_template("gpt-oss"));
  EXPECT_EQ(builtin_chat_template("nope"), nullptr);
}

}  // namespace
}  // namespace ember::tmpl
