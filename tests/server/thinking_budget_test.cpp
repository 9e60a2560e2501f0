// Thinking budgets (server/thinking_budget.h) driven by a scripted model:
// at every step the "model" prefers the next token of its script (its
// logit is highest, the other tokens' lower in a fixed order), the processor
// edits the row, the highest admitted token is taken and accepted, and the
// processor's forced tokens are appended as the engine appends them (or,
// as when log-probabilities are asked for, not: the mask forces them one by
// one). Checks: the budget cuts at exactly N thinking tokens and the budget
// message, the end of thinking and the answer follow; a minimum masks the
// end of thinking (one token or spelled in several) and the end of
// generation; structured output applies to the answer only and validates;
// harmony's forced end reaches the final channel; clones are independent.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "server/reasoning.h"
#include "server/structured_output.h"
#include "server/thinking_budget.h"

namespace ember {
namespace {

// Synthetic vocabulary: id -> text.
const std::vector<std::string>& pieces() {
  static const std::vector<std::string> p = {
      "",            // 0 end of generation (a control token: no text)
      "<think>",     // 1
      "</think>",    // 2
      " hmm",        // 3
      "\n",          // 4
      "\n\n",        // 5
      "{",           // 6
      "}",           // 7
      "\"a\"",       // 8
      ":",           // 9
      "1",           // 10
      " ",           // 11
      "Done",        // 12
      "</",          // 13
      "think",       // 14
      ">",           // 15
      " Time's up.", // 16
      "<|end|>",     // 17
      "<|start|>",   // 18
      "assistant",   // 19
      "<|channel|>", // 20
      "final",       // 21
      "<|message|>", // 22
      "analysis",    // 23
      "<th",         // 24
      "ink>",        // 25
      "2",           // 26
  };
  return p;
}
constexpr int kEos = 0, kThink = 1, kEndThink = 2, kHmm = 3, kDone = 12, kLt = 13, kThinkWord = 14, kGt = 15,
              kMsg = 16;

std::shared_ptr<const std::vector<std::string>> shared_pieces() {
  static auto p = std::make_shared<const std::vector<std::string>>(pieces());
  return p;
}

std::shared_ptr<ThinkingSpec> tags_spec(bool open, int64_t budget, int64_t min_tokens = 0) {
  auto s = std::make_shared<ThinkingSpec>();
  s->start = "<think>";
  s->end = "</think>";
  s->open = open;
  s->budget = budget;
  s->min_tokens = min_tokens;
  s->close = {kMsg, kEndThink};
  s->stop_ids = {kEos};
  s->pieces = shared_pieces();
  s->space_tokens = std::make_shared<const std::vector<int32_t>>(whitespace_tokens(pieces()));
  s->start_tokens = tag_start_tokens(pieces(), s->start);
  return s;
}

struct Drive {
  std::vector<int32_t> tokens;
  std::string text() const {
    std::string t;
    for (int32_t id : tokens) t += pieces()[id];
    return t;
  }
};

// The scripted model: at step i it prefers script[min(i, size-1)], then the
// tokens in `fallback` order, then everything else.
Drive drive(LogitsProcessor& p, const std::vector<int32_t>& script, int max_steps, bool jumps,
          std::vector<int32_t> fallback = {kDone, kEos}) {
  const int V = static_cast<int>(pieces().size());
  Drive r;
  for (int step = 0; step < max_steps; ++step) {
    std::vector<float> lg(V, -5.0f);
    for (size_t k = 0; k < fallback.size(); ++k) lg[fallback[k]] = 1.0f - static_cast<float>(k) * 0.1f;
    const size_t at = std::min(r.tokens.size(), script.size() - 1);
    lg[script[at]] = 10.0f;
    p.process(r.tokens.data(), static_cast<int64_t>(r.tokens.size()), 0, lg.data(), V);
    int best = -1;
    for (int i = 0; i < V; ++i)
      if (std::isfinite(lg[i]) && (best < 0 || lg[i] > lg[best])) best = i;
    if (best < 0) break;
    r.tokens.push_back(best);
    p.accept(best);
    if (best == kEos) break;
    if (jumps) {
      std::vector<int32_t> f;
      p.forced_tokens(&f);
      for (int32_t t : f) {
        r.tokens.push_back(t);
        p.accept(t);
      }
    }
  }
  return r;
}

TEST(ThinkingBudget, CutsAtExactlyNThinkingTokensThenTheAnswerFollows) {
  for (const bool jumps : {true, false})
    for (const int64_t n : {0, 1, 5, 17}) {
      ThinkingLogits p(tags_spec(/*open=*/true, n), nullptr);
      // The model would think forever; after thinking it would say "Done".
      const Drive r = drive(p, {kHmm}, 40, jumps);
      std::vector<int32_t> want(static_cast<size_t>(n), kHmm);
      want.push_back(kMsg);
      want.push_back(kEndThink);
      ASSERT_GE(r.tokens.size(), want.size() + 1) << n;
      EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + static_cast<std::ptrdiff_t>(want.size())), want)
          << "budget " << n << " jumps " << jumps << ": " << r.text();
      // The answer: the model's own choice once thinking is over (not masked).
      EXPECT_EQ(r.tokens[want.size()], kHmm) << r.text();
      EXPECT_EQ(p.thinking_tokens(), n);
    }
}

TEST(ThinkingBudget, NoBudgetAndAnEndBeforeTheBudgetAreLeftAlone) {
  ThinkingLogits unlimited(tags_spec(true, -1), nullptr);
  EXPECT_EQ(drive(unlimited, {kHmm}, 30, true).tokens, std::vector<int32_t>(30, kHmm));
  ThinkingLogits early(tags_spec(true, 10), nullptr);
  const Drive r = drive(early, {kHmm, kHmm, kEndThink, kDone, kEos}, 30, true);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kHmm, kHmm, kEndThink, kDone, kEos}));
  EXPECT_EQ(early.phase(), ThinkingLogits::Phase::kAnswer);
}

TEST(ThinkingBudget, TheModelOpensThinkingItself) {
  // Qwen3: the prompt does not open it; the count starts after <think>.
  ThinkingLogits p(tags_spec(false, 3), nullptr);
  const Drive r = drive(p, {kThink, kHmm}, 10, true);
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 6),
            (std::vector<int32_t>{kThink, kHmm, kHmm, kHmm, kMsg, kEndThink}))
      << r.text();
  // A model that answers at once is not touched.
  ThinkingLogits q(tags_spec(false, 3), nullptr);
  EXPECT_EQ(drive(q, {kDone, kEos}, 10, true).tokens, (std::vector<int32_t>{kDone, kEos}));
}

TEST(ThinkingBudget, MinimumMasksTheEndOfThinking) {
  // The model wants to stop at once: </think> and the end of generation are
  // masked for 4 tokens (it writes its next choice, "Done"), then allowed.
  ThinkingLogits p(tags_spec(true, -1, 4), nullptr);
  const Drive r = drive(p, {kEndThink}, 8, true, {kEos, kDone});
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 5),
            (std::vector<int32_t>{kDone, kDone, kDone, kDone, kEndThink}))
      << r.text();
  // Spelled in three tokens: after "</" and "think", ">" is what is masked
  // (the model writes " hmm" instead, and the tag is broken: still thinking).
  ThinkingLogits q(tags_spec(true, -1, 3), nullptr);
  const Drive s = drive(q, {kLt, kThinkWord, kGt, kGt, kDone}, 5, true, {kHmm});
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{kLt, kThinkWord, kHmm, kGt, kDone})) << s.text();
  EXPECT_EQ(q.phase(), ThinkingLogits::Phase::kThinking);
}

TEST(ThinkingBudget, EndSpelledInSeveralTokensIsFollowed) {
  ThinkingLogits p(tags_spec(true, 50), nullptr);
  const Drive r = drive(p, {kHmm, kLt, kThinkWord, kGt, kHmm}, 10, true);
  EXPECT_EQ(p.phase(), ThinkingLogits::Phase::kAnswer);
  EXPECT_EQ(p.thinking_tokens(), 4);
  EXPECT_EQ(r.tokens.size(), 10u);
}

std::shared_ptr<const grammar::CompiledGrammar> json_a_grammar() {
  // {"a": integer}: what the answer must be.
  auto gbnf = grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false})"));
  EXPECT_TRUE(gbnf.is_ok());
  auto g = grammar::parse_gbnf(gbnf.value());
  EXPECT_TRUE(g.is_ok());
  return grammar::CompiledGrammar::compile(std::move(g.value()), grammar::TokenVocab::from_pieces(pieces()));
}

TEST(ThinkingBudget, StructuredOutputAppliesToTheAnswerOnlyAndValidates) {
  for (const bool jumps : {true, false}) {
    auto inner = std::make_unique<ConstrainedLogits>(json_a_grammar(), std::vector<std::pair<int32_t, float>>{},
                                                     std::vector<int32_t>{kEos});
    ThinkingLogits p(tags_spec(true, 6), std::move(inner));
    // The model thinks " hmm" (the grammar would never admit it) and after
    // thinking would go on with " hmm": the grammar makes it write JSON.
    const Drive r = drive(p, {kHmm}, 40, jumps, {5, 6, 8, 9, 7, 10, kEos});
    const std::string text = r.text();
    const std::string head = " hmm hmm hmm hmm hmm hmm Time's up.</think>";
    ASSERT_EQ(text.substr(0, head.size()), head) << text;
    ASSERT_EQ(r.tokens.back(), kEos) << text;
    const auto answer = nlohmann::json::parse(text.substr(head.size()), nullptr, false);
    ASSERT_FALSE(answer.is_discarded()) << text;
    EXPECT_TRUE(answer.is_object() && answer.size() == 1 && answer["a"].is_number_integer()) << text;
    // At most two whitespace tokens (the model's "\n\n" twice) between the
    // end of thinking and the answer.
    EXPECT_EQ(text.substr(head.size()), "\n\n\n\n{\"a\":1}") << text;
  }
}

TEST(ThinkingBudget, BeforeThinkingTheModelMayOpenItOrAnswerUnderTheGrammar) {
  // The grammar does not admit "<think>", yet the model may open thinking.
  auto inner = std::make_unique<ConstrainedLogits>(json_a_grammar(), std::vector<std::pair<int32_t, float>>{},
                                                   std::vector<int32_t>{kEos});
  ThinkingLogits direct(tags_spec(false, 2), std::move(inner));
  const Drive r = drive(direct, {kThink, kHmm}, 30, true, {6, 8, 9, 7, 10, kEos});
  EXPECT_EQ(r.text(), "<think> hmm hmm Time's up.</think>{\"a\":1}") << r.text();
  // A model that answers at once gets the grammar from its first token.
  auto inner2 = std::make_unique<ConstrainedLogits>(json_a_grammar(), std::vector<std::pair<int32_t, float>>{},
                                                    std::vector<int32_t>{kEos});
  ThinkingLogits at_once(tags_spec(false, 2), std::move(inner2));
  const Drive a = drive(at_once, {kDone}, 30, true, {6, 8, 9, 7, 10, kEos});
  EXPECT_EQ(a.text(), "{\"a\":1}") << a.text();
}

std::shared_ptr<ThinkingSpec> harmony_spec(int64_t budget) {
  auto s = std::make_shared<ThinkingSpec>();
  s->harmony = true;
  s->start = std::string(kHarmonyAnalysis);
  s->end = std::string(kHarmonyEnd);
  s->budget = budget;
  s->close = {kMsg, 17, 18, 19, 20, 21, 22};  // message <|end|><|start|>assistant<|channel|>final<|message|>
  s->answer_header = {18, 19, 20, 21, 22};
  s->stop_ids = {kEos};
  s->pieces = shared_pieces();
  s->space_tokens = std::make_shared<const std::vector<int32_t>>(whitespace_tokens(pieces()));
  return s;
}

TEST(ThinkingBudget, HarmonyForcedEndReachesTheFinalChannel) {
  ThinkingLogits p(harmony_spec(3), nullptr);
  // The model opens analysis (the header is free), then would think forever.
  const Drive r = drive(p, {20, 23, 22, kHmm}, 20, true);
  const std::string want =
      "<|channel|>analysis<|message|> hmm hmm hmm Time's up.<|end|><|start|>assistant<|channel|>final<|message|>";
  EXPECT_EQ(r.text().substr(0, want.size()), want) << r.text();
  EXPECT_EQ(p.phase(), ThinkingLogits::Phase::kAnswer);
  // With a constraint, a reasoning message the model ends itself is followed
  // by the final header, forced.
  auto inner = std::make_unique<ConstrainedLogits>(json_a_grammar(), std::vector<std::pair<int32_t, float>>{},
                                                   std::vector<int32_t>{kEos});
  ThinkingLogits q(harmony_spec(-1), std::move(inner));
  const Drive t = drive(q, {20, 23, 22, kHmm, 17, kHmm}, 30, true, {6, 8, 9, 7, 10, kEos});
  EXPECT_EQ(t.text(),
            "<|channel|>analysis<|message|> hmm<|end|><|start|>assistant<|channel|>final<|message|>{\"a\":1}")
      << t.text();
}

TEST(ThinkingBudget, ClonesAreIndependent) {
  ThinkingLogits p(tags_spec(true, 4), nullptr);
  p.accept(kHmm);
  p.accept(kHmm);
  auto c = p.clone();
  p.accept(kHmm);
  p.accept(kHmm);
  EXPECT_EQ(p.phase(), ThinkingLogits::Phase::kForcing);
  auto* cc = dynamic_cast<ThinkingLogits*>(c.get());
  ASSERT_NE(cc, nullptr);
  EXPECT_EQ(cc->phase(), ThinkingLogits::Phase::kThinking);
  EXPECT_EQ(cc->thinking_tokens(), 2);
  std::vector<int32_t> f;
  p.forced_tokens(&f);
  EXPECT_EQ(f, (std::vector<int32_t>{kMsg, kEndThink}));
  f.clear();
  c->forced_tokens(&f);
  EXPECT_TRUE(f.empty());
}

}  // namespace
}  // namespace ember
