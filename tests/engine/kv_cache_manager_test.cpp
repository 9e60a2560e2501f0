// KvCacheManager on its own: slots with lookahead, rollback of speculative
// slots, prefix registration of final tokens only, group-aware matching,
// copy-on-write ops for forks, sliding-window release, swap-slot
// accounting (also when a swapped-out request is removed).
#include "engine/kv/kv_cache_manager.h"

#include <gtest/gtest.h>

namespace ember {
namespace {

KvLayout one_group() { return KvLayout::from_spec(KvSpec{{{0, 2, 2}}, {}}, true); }

std::unique_ptr<Request> request(uint64_t seq, std::vector<int32_t> tokens) {
  auto r = std::make_unique<Request>();
  r->seq_id = seq;
  r->id = "s" + std::to_string(seq);
  r->tokens = std::move(tokens);
  r->n_prompt = r->num_tokens();
  return r;
}

std::vector<int32_t> iota_tokens(int n, int first = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

TEST(KvCacheManager, LookaheadSlotsAndRollback) {
  KvCacheManager kv(one_group(), 4, 16, true, 0);
  auto r = request(1, iota_tokens(6));
  kv.add(*r);
  std::vector<KvOp> ops;
  // Prefill 6 tokens with 5 lookahead slots (speculative tokens): 11 positions, 3 blocks.
  ASSERT_TRUE(kv.allocate_slots(*r, 6, 5, &ops));
  EXPECT_TRUE(ops.empty());
  EXPECT_EQ(kv.capacity(*r), 12);
  EXPECT_EQ(kv.n_used_blocks(), 3);
  // The forward pass computed prompt + 5 speculative tokens; 4 of them are rejected.
  r->num_computed_tokens = 11;
  kv.rollback(*r, 4);
  r->num_computed_tokens = 7;
  EXPECT_EQ(kv.capacity(*r), 8);  // the third block held only rejected positions
  EXPECT_EQ(kv.n_used_blocks(), 2);
  EXPECT_TRUE(kv.check({r.get()}).is_ok());
  // Registration covers final tokens only: 6 tokens are final (7 computed,
  // one of them speculative and accepted but not yet appended).
  kv.cache_blocks(*r);
  auto probe = request(2, iota_tokens(9));
  kv.add(*probe);
  EXPECT_EQ(kv.match_prefix(*probe), 4);  // one full block of final tokens
  kv.remove(*probe);
  r->tokens.push_back(6);
  r->tokens.push_back(7);  // two more final tokens: positions 0..7 final and 7 computed
  kv.cache_blocks(*r);
  auto probe2 = request(3, iota_tokens(9));
  kv.add(*probe2);
  EXPECT_EQ(kv.match_prefix(*probe2), 4);  // block 1 still has an uncomputed position
  kv.remove(*probe2);
  r->num_computed_tokens = 8;
  kv.cache_blocks(*r);
  auto probe3 = request(4, iota_tokens(9));
  kv.add(*probe3);
  EXPECT_EQ(kv.match_prefix(*probe3), 8);
  EXPECT_TRUE(kv.check({r.get(), probe3.get()}).is_ok());
  kv.remove(*probe3);
  kv.remove(*r);
  EXPECT_EQ(kv.n_used_blocks(), 0);
  EXPECT_TRUE(kv.check({}).is_ok());
}

TEST(KvCacheManager, ForkSharesBlocksAndCopiesOnWrite) {
  KvCacheManager kv(one_group(), 4, 16, true, 0);
  auto p = request(1, iota_tokens(6));
  kv.add(*p);
  std::vector<KvOp> ops;
  ASSERT_TRUE(kv.allocate_slots(*p, 6, 0, &ops));
  p->num_computed_tokens = 6;
  kv.cache_blocks(*p);
  auto c = request(2, p->tokens);
  c->num_computed_tokens = 6;
  kv.add(*c);
  kv.fork(*p, *c);
  EXPECT_EQ(kv.tables(*c), kv.tables(*p));
  EXPECT_EQ(kv.n_used_blocks(), 2);
  // Both append a token at position 6, inside the shared partial block 1.
  p->tokens.push_back(40);
  c->tokens.push_back(41);
  ASSERT_TRUE(kv.allocate_slots(*c, 1, 0, &ops));
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].kind, KvOp::Kind::kCopy);
  EXPECT_EQ(ops[0].src, kv.tables(*p)[0][1]);
  EXPECT_EQ(ops[0].dst, kv.tables(*c)[0][1]);
  EXPECT_EQ(ops[0].n_rows, 2);
  EXPECT_EQ(kv.tables(*c)[0][0], kv.tables(*p)[0][0]);  // the full block stays shared
  ops.clear();
  ASSERT_TRUE(kv.allocate_slots(*p, 1, 0, &ops));
  EXPECT_TRUE(ops.empty());  // the last owner writes in place
  EXPECT_EQ(kv.counters().n_cow_copies, 1);
  EXPECT_TRUE(kv.check({p.get(), c.get()}).is_ok());
}

TEST(KvCacheManager, SlidingGroupsMatchAndReleaseOnlyTheWindow) {
  // Layer 0 global, layer 1 sliding window 4: two groups of one layer.
  KvCacheManager kv(KvLayout::from_spec(KvSpec{{{0, 2, 2}, {4, 2, 2}}, {}}, true), 2, 40, true, 0);
  ASSERT_EQ(kv.n_groups(), 2);
  auto a = request(1, iota_tokens(12));
  kv.add(*a);
  std::vector<KvOp> ops;
  ASSERT_TRUE(kv.allocate_slots(*a, 12, 0, &ops));
  a->num_computed_tokens = 12;
  kv.cache_blocks(*a);
  kv.release_out_of_window(*a);
  // Queries at positions >= 12 see keys >= 9: sliding blocks 0..3 (positions 0..7) are released.
  const BlockTables& t = kv.tables(*a);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t[1][i], -1) << i;
  EXPECT_GE(t[1][4], 0);
  for (int i = 0; i < 6; ++i) EXPECT_GE(t[0][i], 0);
  EXPECT_EQ(kv.n_used_blocks(), 6 + 2);
  // A request with the same 11-token prefix (and one more) reuses 5 blocks:
  // the global group has them all, the sliding group only needs the window.
  auto b = request(2, iota_tokens(12));
  b->tokens[11] = 99;
  kv.add(*b);
  EXPECT_EQ(kv.match_prefix(*b), 10);
  const BlockTables& tb = kv.tables(*b);
  EXPECT_EQ(tb[1][0], -1);
  EXPECT_EQ(tb[1][2], -1);  // positions 4..5 are outside the window of position 10: not needed
  EXPECT_GE(tb[1][3], 0);   // position 7 is inside: revived from the cache (a released it)
  EXPECT_EQ(tb[1][4], t[1][4]);
  EXPECT_TRUE(kv.check({a.get(), b.get()}).is_ok());
}

TEST(KvCacheManager, SwapSlotsAccountedAndReturnedOnRemove) {
  KvCacheManager kv(one_group(), 4, 8, false, 3);
  auto a = request(1, iota_tokens(10));
  kv.add(*a);
  std::vector<KvOp> ops;
  ASSERT_TRUE(kv.allocate_slots(*a, 10, 0, &ops));
  a->num_computed_tokens = 10;
  ASSERT_TRUE(kv.swap_out(*a, &ops));
  EXPECT_EQ(ops.size(), 3u);
  for (const KvOp& op : ops) EXPECT_EQ(op.kind, KvOp::Kind::kSwapOut);
  EXPECT_TRUE(kv.swapped(*a));
  EXPECT_FALSE(kv.holds_blocks(*a));
  EXPECT_EQ(kv.n_swap_pages_used(), 3);
  EXPECT_EQ(kv.n_used_blocks(), 0);
  // No room for another request's pages in swap space.
  auto b = request(2, iota_tokens(5));
  kv.add(*b);
  ASSERT_TRUE(kv.allocate_slots(*b, 5, 0, &ops));
  b->num_computed_tokens = 5;
  EXPECT_FALSE(kv.swap_out(*b, &ops));
  EXPECT_TRUE(kv.check({a.get(), b.get()}).is_ok());
  // Removing a swapped-out request (an abort) gives its slots back.
  kv.remove(*a);
  EXPECT_EQ(kv.n_swap_pages_used(), 0);
  EXPECT_TRUE(kv.check({b.get()}).is_ok());
  ops.clear();
  ASSERT_TRUE(kv.swap_out(*b, &ops));
  ops.clear();
  ASSERT_TRUE(kv.swap_in(*b, 1, &ops));
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].kind, KvOp::Kind::kSwapIn);
  EXPECT_EQ(kv.capacity(*b), 8);
  EXPECT_EQ(kv.n_swap_pages_used(), 0);
  EXPECT_TRUE(kv.check({b.get()}).is_ok());
}

}  // namespace
}  // namespace ember
