// ConstrainedLogits (server/structured_output.h): logit_bias is added, the
// grammar masks every token it does not admit, end-of-generation tokens are
// admitted only where the grammar may end, clones are independent; a triggered grammar is off until
// the trigger text and then applies from it on; forced-token jumps on the default
// model's tokenizer are admitted by the mask, tokenized canonically, and
// save tokens on a schema with fixed keys.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "model/io/model_file.h"
#include "server/structured_output.h"

namespace ember {
namespace {

std::vector<int> admitted(LogitsProcessor& p, int V) {
  std::vector<float> lg(V, 0.0f);
  p.process(nullptr, 0, 0, lg.data(), V);
  std::vector<int> out;
  for (int i = 0; i < V; ++i)
    if (std::isfinite(lg[i])) out.push_back(i);
  return out;
}

TEST(ConstrainedLogits, MaskEosAndClone) {
  // ids: 0 eos (no bytes), 1 "a", 2 "b", 3 "ab", 4 "!", 5 "a!"
  auto vocab = grammar::TokenVocab::from_pieces({"", "a", "b", "ab", "!", "a!"});
  auto g = grammar::parse_gbnf("root ::= \"a\" \"b\"? \"!\"\n");
  ASSERT_TRUE(g.is_ok());
  auto cg = grammar::CompiledGrammar::compile(std::move(g.value()), vocab);
  ConstrainedLogits p(cg, {}, {0});
  EXPECT_EQ(admitted(p, 6), (std::vector<int>{1, 3, 5}));
  p.accept(1);
  EXPECT_EQ(admitted(p, 6), (std::vector<int>{2, 4}));
  auto copy = p.clone();
  p.accept(4);
  EXPECT_EQ(admitted(p, 6), (std::vector<int>{0}));  // complete: only end of generation
  EXPECT_EQ(admitted(*copy, 6), (std::vector<int>{2, 4}));
  // Logits beyond the tokenizer's vocabulary are masked too.
  EXPECT_EQ(admitted(*copy, 8), (std::vector<int>{2, 4}));
}

TEST(ConstrainedLogits, TriggeredGrammarAppliesFromTheTriggerOn) {
  // tool_choice "auto": free text until the model writes "<tool_call>", then the call's grammar.
  // ids: 0 eos, 1 "Hi", 2 " <tool", 3 "_call>", 4 "\n", 5 "{}", 6 "\n</tool_call>", 7 "x", 8 "_call>\n"
  auto vocab = grammar::TokenVocab::from_pieces({"", "Hi", " <tool", "_call>", "\n", "{}", "\n</tool_call>", "x",
                                                 "_call>\n"});
  auto g = grammar::parse_gbnf("root ::= \"<tool_call>\\n\" \"{}\" \"\\n</tool_call>\"\n");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto cg = grammar::CompiledGrammar::compile(std::move(g.value()), vocab);
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  for (const int split : {3, 8}) {
    ConstrainedLogits p(cg, {}, {0}, nullptr, nullptr, "<tool_call>");
    EXPECT_EQ(admitted(p, 9), all);  // off: text, the end, anything
    p.accept(1);
    EXPECT_EQ(admitted(p, 9), all);
    p.accept(2);
    auto before = p.clone();
    p.accept(split);  // the trigger is complete: the grammar has taken it
    if (split == 3) {
      EXPECT_EQ(admitted(p, 9), (std::vector<int>{4}));
      p.accept(4);
    }
    EXPECT_EQ(admitted(p, 9), (std::vector<int>{5}));
    p.accept(5);
    EXPECT_EQ(admitted(p, 9), (std::vector<int>{4, 6}));  // "\n" starts "\n</tool_call>"
    p.accept(6);
    EXPECT_EQ(admitted(p, 9), (std::vector<int>{0}));  // one call, then only the end
    EXPECT_EQ(admitted(*before, 9), all);               // a clone from before the trigger is still off
  }
}

TEST(ConstrainedLogits, LogitBiasAlone) {
  ConstrainedLogits p(nullptr, {{2, 5.0f}, {3, -100.0f}}, {});
  std::vector<float> lg = {1, 1, 1, 1};
  p.process(nullptr, 0, 0, lg.data(), 4);
  EXPECT_EQ(lg, (std::vector<float>{1, 1, 6, -99}));
}

// A walk through a schema's grammar: at each step either the forced tokens
// (each must be admitted by the mask where it is appended) or a random
// admitted token; returns the text and the number of forced tokens.
struct Walk {
  std::string text;
  int n_forced = 0, n_sampled = 0;
  bool complete = false;
};

Walk walk(ConstrainedLogits& p, const Tokenizer& tok, int V, uint32_t seed, bool jumps) {
  std::mt19937 rng(seed);
  Walk w;
  for (int step = 0; step < 80 && !w.complete; ++step) {
    std::vector<int32_t> forced;
    if (jumps) p.forced_tokens(&forced);
    for (int32_t t : forced) {
      const std::vector<int> ok = admitted(p, V);
      EXPECT_TRUE(std::binary_search(ok.begin(), ok.end(), t)) << tok.token_to_piece(t) << " in " << w.text;
      p.accept(t);
      w.text += tok.token_to_piece(t, false);
      ++w.n_forced;
    }
    std::vector<int> ok = admitted(p, V);
    if (ok.empty()) break;
    // End as soon as the grammar allows (eos is admitted), else prefer short
    // tokens so strings stay short: pick among the admitted ones at random.
    if (std::find(ok.begin(), ok.end(), tok.eos_id()) != ok.end()) {
      w.complete = true;
      break;
    }
    std::vector<int> short_ok;
    for (int t : ok)
      if (tok.token_to_piece(t, false).size() <= 2) short_ok.push_back(t);
    const std::vector<int>& from = short_ok.empty() ? ok : short_ok;
    const int t = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    p.accept(t);
    w.text += tok.token_to_piece(t, false);
    ++w.n_sampled;
  }
  return w;
}

TEST(ConstrainedLogits, ForcedTokensOnFixedKeysAreAdmittedAndCanonical) {
  const char* model = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "default model not installed";
  auto f = open_model_file(model);
  ASSERT_TRUE(f.is_ok());
  auto tok = Tokenizer::from_metadata((*f)->metadata);
  ASSERT_TRUE(tok.is_ok());
  const Tokenizer& tk = **tok;
  auto vocab = grammar::TokenVocab::from_tokenizer(tk);
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
          "is_active": {"type": "boolean"}, "level": {"enum": ["low", "high"]}},
          "required": ["name", "is_active", "level"], "additionalProperties": false})");
  auto text = grammar::json_schema_to_gbnf(schema);
  ASSERT_TRUE(text.is_ok());
  const int V = vocab->n_vocab;
  for (const bool compact : {false, true}) {
    auto g = grammar::parse_gbnf(compact ? grammar::with_json_whitespace(*text, "\"\"") : *text);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    auto cg = grammar::CompiledGrammar::compile(std::move(g.value()), vocab);
    int forced_total = 0, sampled_with = 0, sampled_without = 0;
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      ConstrainedLogits with(cg, {}, {tk.eos_id()}, &tk);
      const Walk w = walk(with, tk, V, seed, true);
      EXPECT_TRUE(w.complete) << w.text;
      const auto parsed = nlohmann::json::parse(w.text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << w.text;
      EXPECT_TRUE(parsed["name"].is_string() && parsed["is_active"].is_boolean() && parsed["level"].is_string())
          << w.text;
      forced_total += w.n_forced;
      sampled_with += w.n_sampled;
      // Without a tokenizer there are no jumps.
      ConstrainedLogits without(cg, {}, {tk.eos_id()});
      const Walk w0 = walk(without, tk, V, seed, true);
      EXPECT_EQ(w0.n_forced, 0);
      sampled_without += w0.n_sampled;
    }
    EXPECT_GT(forced_total, compact ? 12 : 3) << "compact " << compact;
    EXPECT_LT(sampled_with, sampled_without) << "compact " << compact;
  }
  // Canonical: a forced run is the tokenizer's own encoding of its bytes
  // (less the last token, which may merge with what follows).
  auto g = grammar::parse_gbnf(grammar::with_json_whitespace(*text, "\"\""));
  ASSERT_TRUE(g.is_ok());
  auto cg = grammar::CompiledGrammar::compile(std::move(g.value()), vocab);
  ConstrainedLogits p(cg, {}, {tk.eos_id()}, &tk);
  const std::vector<int32_t> brace = tk.encode("{", {.add_bos = false});
  ASSERT_EQ(brace.size(), 1u);
  p.accept(brace[0]);
  std::vector<int32_t> forced;
  p.forced_tokens(&forced);
  std::vector<int32_t> want = tk.encode("\"name\":\"", {.add_bos = false});
  want.pop_back();
  EXPECT_EQ(forced, want);
}

}  // namespace
}  // namespace ember
