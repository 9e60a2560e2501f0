// KV block pool and block manager: allocation, reference counts, copy-on-
// write, prefix-cache lookup with LRU eviction, and a randomized invariant
// check.
#include "engine/kv/block_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/kv/kv_pool.h"

namespace ember {
namespace {

// Float i of an f32 KV row (bytes).
float& f32_at(uint8_t* row, int i) { return reinterpret_cast<float*>(row)[i]; }
float f32_at(const uint8_t* row, int i) { return reinterpret_cast<const float*>(row)[i]; }

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim = 4;
  c.head_dim_v = 4;
  return c;
}

TEST(KvBlockPool, SizesFromBudget) {
  const ModelConfig c = tiny_config();
  auto p = KvBlockPool::create(c, 16, 100000);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p.value()->bytes_per_block(), 16u * (4 + 4) * 4 * 2);
  EXPECT_EQ(p.value()->n_blocks(), static_cast<int32_t>(100000 / (16 * 8 * 4 * 2)));
  EXPECT_FALSE(KvBlockPool::create(c, 16, 100).is_ok());  // below one block
  EXPECT_FALSE(KvBlockPool::create(c, 0, 100000).is_ok());
  auto q = KvBlockPool::create(c, 4, 0, 7);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q.value()->n_blocks(), 7);
}

TEST(KvBlockPool, BudgetFromFreeMemory) {
  auto b = kv_budget_from_free_memory(0.01);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_GT(b.value(), 0u);
  EXPECT_FALSE(kv_budget_from_free_memory(0.0).is_ok());
  EXPECT_FALSE(kv_budget_from_free_memory(1.5).is_ok());
}

TEST(KvLayout, GroupsByWindow) {
  ModelConfig c = tiny_config();
  c.n_layer = 18;
  c.layers.resize(18);
  for (int il = 0; il < 18; ++il) c.layers[il].sliding_window = (il % 6 == 5) ? 0 : 512;  // Gemma 3 pattern
  KvLayout l = KvLayout::from_config(c, true);
  EXPECT_EQ(l.layers_per_group, 3);
  ASSERT_EQ(l.n_groups, 6);
  EXPECT_EQ(l.group_window, (std::vector<int>{0, 512, 512, 512, 512, 512}));
  EXPECT_EQ(l.group_of_layer[5], 0);
  EXPECT_EQ(l.group_of_layer[11], 0);
  EXPECT_EQ(l.slot_of_layer[17], 2);
  EXPECT_EQ(l.group_of_layer[0], 1);
  EXPECT_EQ(l.group_of_layer[3], 2);  // sliding layers 0,1,2 | 3,4,6 | ...
  std::vector<int> per_group(6, 0);
  for (int il = 0; il < 18; ++il) ++per_group[l.group_of_layer[il]];
  EXPECT_EQ(per_group, std::vector<int>(6, 3));
  KvLayout one = KvLayout::from_config(c, false);
  EXPECT_EQ(one.n_groups, 1);
  EXPECT_EQ(one.layers_per_group, 18);
  c.layers[0].sliding_window = 100;  // a third window: gcd(3, 1, 14) = 1
  KvLayout l3 = KvLayout::from_config(c, true);
  EXPECT_EQ(l3.layers_per_group, 1);
  EXPECT_EQ(l3.n_groups, 18);
}

TEST(KvBlockPool, GroupedPagesAndReleasedEntries) {
  ModelConfig c = tiny_config();
  c.n_layer = 3;
  c.layers.resize(3);
  c.layers[0].sliding_window = 8;
  c.layers[2].sliding_window = 8;
  KvLayout l = KvLayout::from_config(c, true);  // global {1}, sliding {0}, {2}
  ASSERT_EQ(l.n_groups, 3);
  auto p = KvBlockPool::create(c, l, 4, 0, 10);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p.value()->bytes_per_block(), 4u * 8 * 4 * 1);
  std::vector<std::vector<int32_t>> tables = {{0, 1, 2}, {-1, 3, 4}, {-1, 5, 6}};
  PagedKvCache cache(*p.value(), tables);
  cache.sync();
  EXPECT_EQ(cache.capacity(), 12);
  EXPECT_EQ(cache.k_row(1, 5), p.value()->k_block(0, 1) + 4 * 4);  // layer 1: group 0
  EXPECT_EQ(cache.k_row(0, 5), p.value()->k_block(0, 3) + 4 * 4);  // layer 0: first sliding group
  EXPECT_EQ(cache.v_row(2, 9), p.value()->v_block(0, 6) + 4 * 4);
  EXPECT_EQ(cache.view(0).k_blocks[0], nullptr);  // released
  EXPECT_NE(cache.view(1).k_blocks[0], nullptr);
  EXPECT_EQ(cache.memory_bytes(), 7 * p.value()->bytes_per_block());
}

TEST(KvBlockPool, PagedCacheAddressesThroughTable) {
  const ModelConfig c = tiny_config();
  auto p = KvBlockPool::create(c, 4, 0, 8);
  ASSERT_TRUE(p.is_ok());
  KvBlockPool& pool = *p.value();
  std::vector<std::vector<int32_t>> table = {{5, 2, 7}};
  PagedKvCache cache(pool, table);
  cache.sync();
  EXPECT_EQ(cache.capacity(), 12);
  for (int il = 0; il < 2; ++il)
    for (int pos = 0; pos < 12; ++pos)
      for (int i = 0; i < 4; ++i) {
        f32_at(cache.k_row(il, pos), i) = static_cast<float>(il * 1000 + pos * 10 + i);
        f32_at(cache.v_row(il, pos), i) = -static_cast<float>(il * 1000 + pos * 10 + i);
      }
  EXPECT_EQ(cache.k_row(1, 5), pool.k_block(1, 2) + 4 * 4);  // position 5: block 1 of the table, row 1
  for (int il = 0; il < 2; ++il) {
    KvView v = cache.view(il);
    for (int pos = 0; pos < 12; ++pos) {
      EXPECT_EQ(f32_at(v.k_blocks[pos / v.block_size] + (pos % v.block_size) * v.k_row_bytes, 3),
                il * 1000 + pos * 10 + 3);
      EXPECT_EQ(f32_at(v.v_blocks[pos / v.block_size] + (pos % v.block_size) * v.v_row_bytes, 0),
                -(il * 1000 + pos * 10));
    }
  }
  pool.copy_block(2, 0, 3);
  EXPECT_EQ(f32_at(pool.k_block(1, 0), 2 * 4 + 1), f32_at(pool.k_block(1, 2), 2 * 4 + 1));
}

// q4c keys: the f16 tails of token groups through their life in a pool of
// 16-position pages: written rows land in the tail, a full group is encoded
// and its tail stays for the pass; before the next step everything but the
// frontier group's tail of each live sequence goes (release_tails);
// copy-on-write and swap carry only that one.
TEST(KvBlockPool, Q4cTailsLiveUntilTheNextPass) {
  ModelConfig c = tiny_config();
  c.n_layer = 1;
  c.head_dim = c.head_dim_v = 32;
  auto p = KvBlockPool::create(c, 16, 0, 4, {KvType::kQ4C, KvType::kF16});
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  KvBlockPool& pool = *p.value();
  EXPECT_EQ(pool.k_row_bytes(0), 24);  // 32 elements x 3/4 byte
  std::vector<std::vector<int32_t>> table = {{2, 0}};
  PagedKvCache cache(pool, table);
  cache.sync();
  std::vector<float> row(32);
  auto put = [&](int pos) {
    for (int i = 0; i < 32; ++i) row[i] = static_cast<float>(pos) + 0.25f * static_cast<float>(i % 5);
    cache.store_k(0, pos, row.data(), 32);
  };
  const size_t tail = 16 * 64;  // 16 f16 rows of 32
  cache.begin_k_writes(0, 0);
  for (int pos = 0; pos < 20; ++pos) put(pos);
  const KvGroupTails& t = pool.tails(0);
  ASSERT_NE(t.rows(2), nullptr);  // page 2 (positions 0-15): full, kept for this pass
  ASSERT_NE(t.rows(0), nullptr);  // page 0 (16-19): unfinished
  EXPECT_TRUE(t.full(2));
  EXPECT_EQ(pool.tail_bytes(), 2 * tail);
  KvView v = cache.view(0);
  float got[32];
  kv_load_key(v, 18, 19, 0, 32, got);  // a query in the unfinished group: the f16 row
  EXPECT_EQ(got[3], 18.75f);
  kv_load_key(v, 3, 19, 0, 32, got);  // a full group: the encoded key, within a step
  EXPECT_NEAR(got[3], 3.75f, 16.f / 15 / 2 + 1e-2);
  // Copy-on-write of the partial page: the frontier group's tail only.
  pool.copy_block(0, 1, 4);
  ASSERT_NE(t.rows(1), nullptr);
  EXPECT_EQ(std::memcmp(t.rows(1), t.rows(0), tail), 0);
  pool.copy_block(2, 1, 0);
  EXPECT_EQ(t.rows(1), nullptr);
  pool.copy_block(2, 1, 16);  // a full page: nothing to carry
  EXPECT_EQ(t.rows(1), nullptr);
  // Swap to and from a host page: the tail of the group holding the next
  // position travels, none of a page computed to its end.
  EXPECT_EQ(pool.swap_page_bytes(0, 4), pool.bytes_per_block() + 1 + tail);
  EXPECT_EQ(pool.swap_page_bytes(2, 16), pool.bytes_per_block() + 1);
  EXPECT_EQ(pool.swap_page_bytes(3, 4), pool.bytes_per_block() + 1);  // none there
  std::vector<uint8_t> host(pool.swap_page_bytes(0, 4));
  pool.read_page(0, host.data(), 4);
  pool.write_page(3, host.data());
  ASSERT_NE(t.rows(3), nullptr);
  EXPECT_EQ(std::memcmp(t.rows(3), t.rows(0), tail), 0);
  EXPECT_EQ(pool.tail_bytes(), 3 * tail);
  // The next step: the sequence's frontier is 20 (page 0, group 0); the
  // full group's tail and the copy on page 3 (held by no one) go.
  pool.release_tails({{&table, 20}});
  EXPECT_EQ(t.rows(2), nullptr);
  EXPECT_NE(t.rows(0), nullptr);
  EXPECT_EQ(t.rows(3), nullptr);
  EXPECT_EQ(pool.tail_bytes(), tail);
  EXPECT_EQ(pool.tail_peak_bytes(), 3 * tail);
  cache.begin_k_writes(0, 20);
  for (int pos = 20; pos < 32; ++pos) put(pos);
  EXPECT_TRUE(t.full(0));
  // A rollback to 30 reopens the full group: its tail is the frontier's.
  pool.release_tails({{&table, 30}});
  ASSERT_NE(t.rows(0), nullptr);
  pool.release_tails({{&table, 32}}, {0});  // past the page's groups, but a swap-out still reads page 0
  EXPECT_NE(t.rows(0), nullptr);
  pool.release_tails({{&table, 32}});
  EXPECT_EQ(t.rows(0), nullptr);
  EXPECT_EQ(pool.tail_bytes(), 0u);
}

TEST(BlockManager, AllocateFreeAndShare) {
  BlockManager bm(8, 4, false);
  std::vector<int32_t> a, b;
  std::vector<int32_t> holes = {-1, -1};
  bm.share(holes);
  bm.free(holes);  // -1 entries are skipped
  EXPECT_EQ(bm.n_free(), 8);
  EXPECT_TRUE(bm.allocate(a, 5));
  EXPECT_FALSE(bm.allocate(b, 4));  // all or nothing
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.n_free(), 3);
  bm.share(a);
  std::vector<int32_t> fork = a;
  EXPECT_EQ(bm.ref_count(a[0]), 2);
  // Copy-on-write of the shared last block.
  const int32_t old = bm.make_private(fork, 4);
  EXPECT_EQ(old, a[4]);
  EXPECT_NE(fork[4], a[4]);
  EXPECT_EQ(bm.ref_count(a[4]), 1);
  EXPECT_EQ(bm.make_private(fork, 4), -1);  // already private
  EXPECT_TRUE(bm.check({&a, &fork}).is_ok());
  EXPECT_TRUE(bm.allocate(b, 2));
  EXPECT_EQ(bm.make_private(fork, 0), -2);  // no free block
  bm.free(a);
  bm.free(fork);
  bm.free(b);
  EXPECT_EQ(bm.n_free(), 8);
  EXPECT_TRUE(bm.check({}).is_ok());
  // A wrong table is reported.
  std::vector<int32_t> bogus = {1};
  EXPECT_FALSE(bm.check({&bogus}).is_ok());
}

// Longest cached chain of full blocks through the primitives (what
// KvCacheManager::match_prefix does for one group): matched blocks gain a
// reference and are appended to table.
int match_chain(BlockManager& bm, const int32_t* tokens, int max_blocks, std::vector<int32_t>& table) {
  uint64_t parent = 0;
  int n = 0;
  for (; n < max_blocks; ++n) {
    const int32_t* tk = tokens + static_cast<int64_t>(n) * bm.block_size();
    const uint64_t h = BlockManager::chain_hash(parent, tk, bm.block_size());
    const int32_t b = bm.lookup(h, parent, tk);
    if (b < 0) break;
    bm.acquire(b);
    table.push_back(b);
    parent = h;
  }
  return n;
}

TEST(BlockManager, PrefixCacheHitRevivesAndLruEvicts) {
  const int bs = 4;
  BlockManager bm(6, bs, true);
  std::vector<int32_t> toks(16);
  for (int i = 0; i < 16; ++i) toks[i] = 100 + i;
  std::vector<int32_t> a;
  EXPECT_EQ(match_chain(bm, toks.data(), 4, a), 0);
  ASSERT_TRUE(bm.allocate(a, 4));
  uint64_t parent = 0;
  for (int i = 0; i < 4; ++i) {
    const uint64_t h = BlockManager::chain_hash(parent, toks.data() + i * bs, bs);
    bm.register_block(a[i], h, parent, toks.data() + i * bs);
    parent = h;
  }
  EXPECT_EQ(bm.n_cached(), 4u);
  const std::vector<int32_t> a_blocks = a;
  bm.free(a);
  EXPECT_EQ(bm.n_cached_free(), 4);
  EXPECT_EQ(bm.n_free(), 6);

  // Same first 3 blocks, different 4th: 3 hits, revived from the free queue.
  std::vector<int32_t> t2 = toks;
  t2[13] = 7;
  std::vector<int32_t> b;
  EXPECT_EQ(match_chain(bm, t2.data(), 4, b), 3);
  EXPECT_EQ(b, std::vector<int32_t>(a_blocks.begin(), a_blocks.begin() + 3));
  EXPECT_EQ(bm.ref_count(b[0]), 1);
  EXPECT_EQ(bm.n_free(), 3);
  bm.record_query(15, 12);
  EXPECT_EQ(bm.counters().queries, 1);
  EXPECT_EQ(bm.counters().hits, 1);
  EXPECT_EQ(bm.counters().hit_tokens, 12);
  EXPECT_EQ(bm.counters().query_tokens, 15);
  EXPECT_TRUE(bm.check({&b}).is_ok());

  // A different first block breaks the chain even if later blocks match.
  std::vector<int32_t> t3 = toks;
  t3[0] = 1;
  std::vector<int32_t> c;
  EXPECT_EQ(match_chain(bm, t3.data(), 4, c), 0);

  // Allocation uses never-cached blocks first, then evicts the LRU cached one.
  std::vector<int32_t> d;
  ASSERT_TRUE(bm.allocate(d, 2));  // the two never-cached blocks
  EXPECT_EQ(bm.counters().evictions, 0);
  ASSERT_TRUE(bm.allocate(d, 1));  // evicts a_blocks[3] (only cached free block)
  EXPECT_EQ(bm.counters().evictions, 1);
  EXPECT_EQ(d.back(), a_blocks[3]);
  EXPECT_EQ(bm.n_cached(), 3u);
  EXPECT_TRUE(bm.check({&b, &d}).is_ok());
  bm.free(b);
  bm.free(d);
  EXPECT_TRUE(bm.check({}).is_ok());
  EXPECT_EQ(bm.n_free(), 6);
}

TEST(BlockManager, RandomizedInvariants) {
  std::mt19937 rng(99);
  const int bs = 2;
  BlockManager bm(32, bs, true);
  std::vector<std::vector<int32_t>> tables(8);
  std::vector<std::vector<int32_t>> contents(8);
  for (int it = 0; it < 3000; ++it) {
    const int i = static_cast<int>(rng() % tables.size());
    switch (rng() % 5) {
      case 0: bm.free(tables[i]); contents[i].clear(); break;
      case 1: {  // grow and register full blocks
        const int n = 1 + static_cast<int>(rng() % 3);
        if (!bm.allocate(tables[i], n)) break;
        uint64_t parent = 0;
        contents[i].resize(tables[i].size() * bs);
        for (size_t b = 0; b < tables[i].size(); ++b) {
          int32_t* tk = contents[i].data() + b * bs;
          if (b + n >= tables[i].size())
            for (int k = 0; k < bs; ++k) tk[k] = static_cast<int32_t>(rng() % 3);
          const uint64_t h = BlockManager::chain_hash(parent, tk, bs);
          bm.register_block(tables[i][b], h, parent, tk);
          parent = h;
        }
        break;
      }
      case 2:
        if (tables[i].empty()) {
          std::vector<int32_t> tk(6);
          for (auto& t : tk) t = static_cast<int32_t>(rng() % 3);
          if (match_chain(bm, tk.data(), 3, tables[i]) > 0) bm.record_query(6, 1);
          contents[i].assign(tk.begin(), tk.begin() + static_cast<long>(tables[i].size()) * bs);
        }
        break;
      case 3: {
        const int j = static_cast<int>(rng() % tables.size());
        if (j != i && tables[j].empty()) {
          tables[j] = tables[i];
          contents[j] = contents[i];
          bm.share(tables[j]);
        }
        break;
      }
      case 4:
        if (!tables[i].empty()) bm.make_private(tables[i], tables[i].size() - 1);
        break;
    }
    std::vector<const std::vector<int32_t>*> ptrs;
    for (auto& t : tables) ptrs.push_back(&t);
    Status st = bm.check(ptrs);
    ASSERT_TRUE(st.is_ok()) << "iteration " << it << ": " << st.message();
  }
  for (auto& t : tables) bm.free(t);
  EXPECT_EQ(bm.n_free(), 32);
  EXPECT_TRUE(bm.check({}).is_ok());
  EXPECT_GT(bm.counters().hits, 0);
  EXPECT_GT(bm.counters().evictions, 0);
}

}  // namespace
}  // namespace ember
