// ConstrainedLogits (server/structured_output.h): logit_bias is added, the
// grammar masks every token it does not admit, end-of-generation tokens are
// admitted only where the grammar may end, clones are independent and
// rollback(k) restores the earlier mask.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grammar/token_mask.h"
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

TEST(ConstrainedLogits, MaskEosCloneAndRollback) {
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
  EXPECT_TRUE(p.rollback(1));
  EXPECT_EQ(admitted(p, 6), (std::vector<int>{2, 4}));
  EXPECT_FALSE(p.rollback(5));
  // Logits beyond the tokenizer's vocabulary are masked too.
  EXPECT_EQ(admitted(p, 8), (std::vector<int>{2, 4}));
}

TEST(ConstrainedLogits, LogitBiasAlone) {
  ConstrainedLogits p(nullptr, {{2, 5.0f}, {3, -100.0f}}, {});
  std::vector<float> lg = {1, 1, 1, 1};
  p.process(nullptr, 0, 0, lg.data(), 4);
  EXPECT_EQ(lg, (std::vector<float>{1, 1, 6, -99}));
  EXPECT_TRUE(p.rollback(3));
}

}  // namespace
}  // namespace ember
