// The grammar room: GBNF parsing and the byte-level recognizer (UTF-8
// classes, quantifiers, left recursion), regular expressions against
// std::regex (ECMAScript) as the independent reference, JSON Schema
// compilation on valid and invalid documents, rollback, forced bytes.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace ember::grammar {
namespace {

using json = nlohmann::ordered_json;

Grammar must_parse(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g.is_ok()) << g.status().message() << "\n" << text;
  return g.is_ok() ? std::move(g.value()) : Grammar{};
}

// Full match of `s` by a compiled grammar.
class Recognizer {
 public:
  explicit Recognizer(Grammar g) : pool_(std::make_shared<const Grammar>(std::move(g))) {}
  bool full(const std::string& s) { return pool_.accepting(pool_.advance(pool_.initial(), s)); }
  bool prefix(const std::string& s) { return pool_.advance(pool_.initial(), s) != kDeadState; }

 private:
  StackPool pool_;
};

TEST(Gbnf, LiteralsClassesAndQuantifiers) {
  Recognizer r(must_parse(R"(
# a comment
root ::= "ab" [0-9]+ ("x" | "yz")? tail{2,3}
tail ::= [^a-z\n]
)"));
  EXPECT_TRUE(r.full("ab1!!"));
  EXPECT_TRUE(r.full("ab123xAB"));
  EXPECT_TRUE(r.full("ab9yz!!!"));
  EXPECT_FALSE(r.full("ab9yz!!!!"));
  EXPECT_FALSE(r.full("ab!!"));
  EXPECT_FALSE(r.full("ab1xa!"));
  EXPECT_FALSE(r.full("ab1x\n!"));
  EXPECT_TRUE(r.prefix("ab1"));
  EXPECT_FALSE(r.full("ab1"));
}

TEST(Gbnf, MultiLineAlternativesAndEscapes) {
  Recognizer r(must_parse("root ::= \"a\"\n  | \"\\x41\\u00e9\\t\"\n  | [\\u4e00-\\u9fff]{2}\n"));
  EXPECT_TRUE(r.full("a"));
  EXPECT_TRUE(r.full("A\xC3\xA9\t"));
  EXPECT_TRUE(r.full("\xE6\x97\xA5\xE6\x9C\xAC"));  // 日本
  EXPECT_FALSE(r.full("\xE6\x97\xA5"));
}

TEST(Gbnf, Utf8NegatedClassesAreWholeCharacters) {
  Recognizer r(must_parse("root ::= [^\"]*\n"));
  EXPECT_TRUE(r.full("plain"));
  EXPECT_TRUE(r.full("caf\xC3\xA9 \xF0\x9F\x98\x80"));  // é and an emoji
  EXPECT_FALSE(r.full("a\"b"));
  EXPECT_FALSE(r.full("\xC3"));          // an incomplete character
  EXPECT_FALSE(r.full("\xED\xA0\x80"));  // an encoded surrogate
  EXPECT_FALSE(r.full("\xC0\xAF"));      // an overlong encoding
  Recognizer any(must_parse("root ::= .{3}\n"));
  EXPECT_TRUE(any.full("a\xC3\xA9z"));
  EXPECT_FALSE(any.full("ab"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto left = parse_gbnf("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n");
  ASSERT_FALSE(left.is_ok());
  EXPECT_NE(left.status().message().find("left-recursive"), std::string::npos) << left.status().message();
  auto undef = parse_gbnf("root ::= missing\n");
  ASSERT_FALSE(undef.is_ok());
  EXPECT_NE(undef.status().message().find("missing"), std::string::npos);
  EXPECT_FALSE(parse_gbnf("root ::= \"abc\n").is_ok());
  EXPECT_FALSE(parse_gbnf("root ::= [a-\n").is_ok());
  EXPECT_FALSE(parse_gbnf("other ::= \"x\"\n").is_ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"x\"{3,1}\n").is_ok());
}

TEST(Gbnf, NullableRecursionTerminates) {
  // x* where x may be empty: the closure must not loop.
  Recognizer r(must_parse("root ::= item* \"!\"\nitem ::= \"a\"?\n"));
  EXPECT_TRUE(r.full("!"));
  EXPECT_TRUE(r.full("aaa!"));
  EXPECT_FALSE(r.full("b!"));
}

bool regex_full(const std::string& pattern, const std::string& s) {
  auto body = regex_to_gbnf(pattern);
  EXPECT_TRUE(body.is_ok()) << body.status().message();
  Recognizer r(must_parse("root ::= " + *body + "\n"));
  return r.full(s);
}

TEST(Regex, MatchesLikeStdRegexOnRandomStrings) {
  const std::vector<std::string> patterns = {
      "a|b|cd",        "[a-c]+x?",       "(ab|c){2,3}",    "\\d{3}-\\d{2,4}", "[^a]b*",
      "(a|b)*c",       "\\w+@\\w+\\.com", "x{2,}y",         "(?:ab)+|c?",      "[\\d.]+",
      "^a(b|)c$",      "[a\\-c]{1,2}",   "\\s?a\\.b",      "(a*)*b",          "[A-Ca-c0-2]{0,3}"};
  const std::string alphabet = "abcxy0129-.@ A_";
  std::mt19937 rng(7);
  for (const auto& p : patterns) {
    std::regex re(p, std::regex::ECMAScript);
    auto body = regex_to_gbnf(p);
    ASSERT_TRUE(body.is_ok()) << p << ": " << body.status().message();
    Recognizer r(must_parse("root ::= " + *body + "\n"));
    int n_match = 0;
    for (int t = 0; t < 600; ++t) {
      std::string s;
      const int len = static_cast<int>(rng() % 7);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_match(s, re);
      n_match += want;
      ASSERT_EQ(r.full(s), want) << "pattern " << p << " on '" << s << "'";
    }
    (void)n_match;
  }
  EXPECT_TRUE(regex_full("[a-z]{2}\\d", "ab7"));
  EXPECT_TRUE(regex_full("caf\\u00e9", "caf\xC3\xA9"));
}

TEST(Regex, UnsupportedFeaturesAreRejected) {
  for (const char* p : {"(a)\\1", "a(?=b)", "(?<!x)y", "\\bword", "a^b", "a$b", "(ab", "[ab", "*a", "\\p{L}"}) {
    auto r = regex_to_gbnf(p);
    EXPECT_FALSE(r.is_ok()) << p;
  }
}

TEST(Regex, JsonStringModeEscapes) {
  auto body = regex_to_gbnf("a\"b\\\\c[\"x]", RegexMode::kJsonString);
  ASSERT_TRUE(body.is_ok()) << body.status().message();
  Recognizer r(must_parse("root ::= " + *body + "\n"));
  EXPECT_TRUE(r.full("a\\\"b\\\\cx"));
  EXPECT_FALSE(r.full("a\"b\\\\cx"));
  EXPECT_FALSE(r.full("a\\\"b\\\\c\""));  // the class drops the quote (it would need an escape)
}

Recognizer schema_recognizer(const json& schema) {
  auto text = json_schema_to_gbnf(schema);
  EXPECT_TRUE(text.is_ok()) << text.status().message();
  return Recognizer(must_parse(*text));
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  Recognizer r = schema_recognizer(json::parse(R"({
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
    "required": ["b"], "additionalProperties": false})"));
  EXPECT_TRUE(r.full(R"({"b": "x"})"));
  EXPECT_TRUE(r.full(R"({"a": -3, "b": "x", "c": true})"));
  EXPECT_TRUE(r.full(R"({"a":1,"b":"","c":false})"));
  EXPECT_TRUE(r.full("{\n  \"b\": \"q\"\n}"));
  EXPECT_FALSE(r.full(R"({"a": 1})"));               // b is required
  EXPECT_FALSE(r.full(R"({"b": "x",})"));            // trailing comma
  EXPECT_FALSE(r.full(R"({"b": "x", "d": 1})"));     // unknown key
  EXPECT_FALSE(r.full(R"({"b": 1})"));
  EXPECT_FALSE(r.full(R"({"a": 01, "b": "x"})"));
}

TEST(JsonSchema, IntegerRangesAreExact) {
  const std::vector<std::pair<int, int>> ranges = {{0, 9}, {5, 123}, {-20, 7}, {10, 10}, {-300, -12}, {99, 1001}};
  for (auto [lo, hi] : ranges) {
    Recognizer r = schema_recognizer(json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}});
    for (int v = -1100; v <= 1100; ++v) ASSERT_EQ(r.full(std::to_string(v)), v >= lo && v <= hi) << lo << ".." << hi << ": " << v;
    EXPECT_FALSE(r.full("-0"));
    EXPECT_FALSE(r.full("007"));
  }
  Recognizer ex = schema_recognizer(json{{"type", "integer"}, {"exclusiveMinimum", 0}});
  EXPECT_FALSE(ex.full("0"));
  EXPECT_TRUE(ex.full("1"));
  EXPECT_TRUE(ex.full("123456789"));
}

TEST(JsonSchema, NumberBounds) {
  Recognizer r = schema_recognizer(json{{"type", "number"}, {"minimum", 0}, {"maximum", 1}});
  for (const char* ok : {"0", "0.5", "1", "1.000", "0.0001"}) EXPECT_TRUE(r.full(ok)) << ok;
  for (const char* bad : {"-0.1", "1.5", "2", "1.001", "1e3"}) EXPECT_FALSE(r.full(bad)) << bad;
  Recognizer pos = schema_recognizer(json{{"type", "number"}, {"exclusiveMinimum", 0}});
  EXPECT_FALSE(pos.full("0"));
  EXPECT_FALSE(pos.full("0.000"));
  EXPECT_TRUE(pos.full("0.01"));
  EXPECT_TRUE(pos.full("12.5"));
}

TEST(JsonSchema, ArraysEnumsRefsAndFormats) {
  Recognizer r = schema_recognizer(json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"enum": ["x", 2, null]},
                                                      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v"]}},
    "type": "array", "items": {"$ref": "#/$defs/node"}, "minItems": 1, "maxItems": 2})"));
  EXPECT_TRUE(r.full(R"([{"v": "x"}])"));
  EXPECT_TRUE(r.full(R"([{"v": 2, "kids": [{"v": null, "kids": []}]}, {"v": "x"}])"));
  EXPECT_FALSE(r.full("[]"));
  EXPECT_FALSE(r.full(R"([{"v": "x"}, {"v": "x"}, {"v": "x"}])"));
  EXPECT_FALSE(r.full(R"([{"v": "y"}])"));
  Recognizer f = schema_recognizer(json::parse(R"({"type": "object", "properties": {
      "d": {"type": "string", "format": "date"}, "u": {"type": "string", "format": "uuid"},
      "t": {"type": "string", "format": "date-time"}}, "required": ["d", "u", "t"]})"));
  EXPECT_TRUE(f.full(R"({"d": "2024-02-28", "u": "123e4567-e89b-12d3-a456-426614174000", "t": "2024-01-31T23:59:59Z"})"));
  EXPECT_FALSE(f.full(R"({"d": "2024-02-30", "u": "123e4567-e89b-12d3-a456-426614174000", "t": "2024-01-31T23:59:59Z"})"));
  Recognizer p = schema_recognizer(json{{"type", "string"}, {"pattern", "^[A-Z]{2}-\\d+$"}});
  EXPECT_TRUE(p.full("\"AB-12\""));
  EXPECT_FALSE(p.full("\"AB-\""));
  Recognizer len = schema_recognizer(json{{"type", "string"}, {"minLength", 2}, {"maxLength", 3}});
  EXPECT_TRUE(len.full("\"ab\""));
  EXPECT_TRUE(len.full("\"a\\nb\""));
  EXPECT_FALSE(len.full("\"a\""));
  EXPECT_FALSE(len.full("\"abcd\""));
}

TEST(JsonSchema, UnsupportedKeywordsNameThemselves) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "object", "patternProperties": {"^x": {}}})", "patternProperties"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
      {R"({"not": {"type": "string"}})", "not"},
      {R"({"type": "number", "minimum": 0.5})", "minimum"},
      {R"({"type": "integer", "multipleOf": 3})", "multipleOf"},
      {R"({"type": "string", "format": "ipv6"})", "ipv6"},
      {R"({"properties": {"a": {"if": {}}}})", "if"},
      {R"({"$ref": "http://example.com/s.json"})", "$ref"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "allOf"}};
  for (const auto& [schema, word] : cases) {
    SchemaError err;
    auto r = json_schema_to_gbnf(json::parse(schema), &err);
    ASSERT_FALSE(r.is_ok()) << schema;
    EXPECT_NE(err.message.find(word), std::string::npos) << schema << ": " << err.message;
  }
  SchemaError err;
  ASSERT_FALSE(json_schema_to_gbnf(json::parse(R"({"properties": {"a": {"if": {}}}})"), &err).is_ok());
  EXPECT_EQ(err.path, "/properties/a/if");
}

TEST(JsonSchema, JsonObjectAndChoice) {
  Recognizer obj(must_parse(json_object_gbnf()));
  EXPECT_TRUE(obj.full(R"({"a": [1, 2.5e3, "x\u00e9", {"b": null}], "c": true})"));
  EXPECT_FALSE(obj.full("[1]"));
  EXPECT_FALSE(obj.full(R"({"a": 1)"));
  Recognizer ch(must_parse(choice_gbnf({"yes", "no", "maybe \"so\""})));
  EXPECT_TRUE(ch.full("no"));
  EXPECT_TRUE(ch.full("maybe \"so\""));
  EXPECT_FALSE(ch.full("nope"));
}

TEST(Matcher, RollbackRestoresTheState) {
  auto g = std::make_shared<const Grammar>(must_parse("root ::= \"{\" [a-z]* \"}\"\n"));
  auto pool = std::make_shared<StackPool>(g);
  GrammarMatcher m(pool);
  EXPECT_TRUE(m.accept("{ab"));
  const StateId mid = m.state();
  EXPECT_TRUE(m.accept("c}"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.can_continue());
  EXPECT_FALSE(m.accept("x"));
  GrammarMatcher copy = m;
  EXPECT_TRUE(m.rollback(1));
  EXPECT_EQ(m.state(), mid);
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(copy.can_end());  // the copy kept its own history
  EXPECT_FALSE(m.rollback(2));
  EXPECT_TRUE(m.rollback(1));
  EXPECT_EQ(m.n_accepted(), 0);
}

// The forced bytes of a state are those every accepted continuation starts
// with, checked against brute force: all strings of the grammar's language
// (up to a length) that continue the state.
TEST(Matcher, ForcedBytesAreTheCommonPrefixOfEveryContinuation) {
  auto g = std::make_shared<const Grammar>(must_parse(
      "root ::= \"{\\\"name\\\": \" ( \"\\\"ab\\\"\" | \"\\\"ac\\\"\" ) \", \\\"n\\\": \" [0-9] [0-9]? \"}\"\n"));
  StackPool pool(g);
  const StateId s0 = pool.initial();
  EXPECT_EQ(pool.forced_bytes(s0, 100), "{\"name\": \"a");
  EXPECT_EQ(pool.forced_bytes(s0, 3), "{\"n");  // capped
  EXPECT_EQ(pool.forced_bytes(pool.advance(s0, "{\"name\": \"ab"), 100), "\", \"n\": ");
  EXPECT_EQ(pool.forced_bytes(pool.advance(s0, "{\"name\": \"a"), 100), "");  // b or c
  EXPECT_EQ(pool.forced_bytes(pool.advance(s0, "{\"name\": \"ab\", \"n\": 4"), 100), "");  // digit or }
  EXPECT_EQ(pool.forced_bytes(pool.advance(s0, "{\"name\": \"ab\", \"n\": 42"), 100), "}");
  EXPECT_EQ(pool.forced_bytes(pool.advance(s0, "{\"name\": \"ab\", \"n\": 42}"), 100), "");  // complete
  EXPECT_EQ(pool.forced_bytes(kDeadState, 100), "");
  // A grammar that may end or go on forces nothing; JSON keys under the
  // schema grammar's flexible whitespace force the key's bytes.
  StackPool opt(std::make_shared<const Grammar>(must_parse("root ::= \"ab\" \"c\"?\n")));
  EXPECT_EQ(opt.forced_bytes(opt.initial(), 100), "ab");
  EXPECT_EQ(opt.forced_bytes(opt.advance(opt.initial(), "ab"), 100), "");
  auto text = json_schema_to_gbnf(json::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"));
  ASSERT_TRUE(text.is_ok());
  StackPool js(std::make_shared<const Grammar>(must_parse(*text)));
  EXPECT_EQ(js.forced_bytes(js.initial(), 100), "{");
  EXPECT_EQ(js.forced_bytes(js.advance(js.initial(), "{"), 100), "");  // whitespace or the key
  EXPECT_EQ(js.forced_bytes(js.advance(js.initial(), "{\""), 100), "city\"");
  // Brute force over every continuation of up to 2 bytes from a few states:
  // each has the forced bytes as its prefix (or is a prefix of them).
  for (const char* pre : {"", "{\"name\": \"", "{\"name\": \"ac\", \"n\": 1"}) {
    const StateId s = pool.advance(s0, pre);
    const std::string f = pool.forced_bytes(s, 100);
    for (int len = 1; len <= 2; ++len) {
      std::string t(len, '\0');
      for (int c = 0; c < (1 << (8 * len)); ++c) {
        for (int i = 0; i < len; ++i) t[i] = static_cast<char>((c >> (8 * i)) & 0xFF);
        if (pool.advance(s, t) == kDeadState) continue;
        const size_t n = std::min(f.size(), t.size());
        EXPECT_EQ(t.substr(0, n), f.substr(0, n)) << pre;
      }
    }
  }
}

}  // namespace
}  // namespace ember::grammar
