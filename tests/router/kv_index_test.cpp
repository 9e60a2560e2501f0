// Exact routing's pieces without a network: the router's block hashes are
// the keys the engine's prefix cache registers and publishes (the same token
// ids through KvCacheManager and block_hashes), the event log's deltas,
// ring overflow and snapshots, their JSON on the wire (kv_events_json) into
// the router's KvIndex, evictions, the in-flight ("active") blocks, and the
// cost choice of WorkerSet::choose_exact with its fallback to cache_aware.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "engine/kv/kv_cache_manager.h"
#include "engine/kv/kv_events.h"
#include "router/kv_index.h"
#include "router/worker_set.h"
#include "server/openai_service.h"

namespace ember::router {
namespace {

std::unique_ptr<Request> request(uint64_t seq, std::vector<int32_t> tokens) {
  auto r = std::make_unique<Request>();
  r->seq_id = seq;
  r->id = "s" + std::to_string(seq);
  r->tokens = std::move(tokens);
  r->n_prompt = r->num_tokens();
  return r;
}

std::vector<int32_t> random_tokens(int n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % 262144);
  return t;
}

// Prefills r's whole prompt and registers its full blocks.
void prefill(KvCacheManager& kv, Request& r) {
  kv.add(r);
  std::vector<KvOp> ops;
  ASSERT_TRUE(kv.allocate_slots(r, r.num_tokens(), 0, &ops));
  r.num_computed_tokens = r.num_tokens();
  kv.cache_blocks(r);
}

// Two layer groups (a global one, group 0, and a sliding one), as Gemma 3.
KvLayout two_groups() { return KvLayout::from_spec(KvSpec{{{0, 2, 2}, {512, 2, 2}}, {}}, true); }

TEST(ExactRouting, RouterHashesAreTheWorkersCacheKeys) {
  for (int bs : {4, 16}) {
    KvEventLog log(bs, 4096);
    KvCacheManager kv(two_groups(), bs, 256, true, 0);
    ASSERT_EQ(kv.n_groups(), 2);
    kv.set_event_log(&log);
    auto r = request(1, random_tokens(10 * bs + 3, 7));
    prefill(kv, *r);
    const std::vector<uint64_t> mine = block_hashes(r->tokens, bs);
    ASSERT_EQ(mine.size(), 10u);
    // In order, one event per full block (group 0 only), stored.
    auto d = log.since(log.epoch(), 0, 1000);
    ASSERT_FALSE(d.reset);
    ASSERT_EQ(d.events.size(), mine.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(d.events[i].stored);
      EXPECT_EQ(d.events[i].hash, mine[i]) << "block " << i << ", block size " << bs;
    }
    // And the engine finds exactly those blocks for a prompt sharing 6 of them.
    std::vector<int32_t> t2(r->tokens.begin(), r->tokens.begin() + 6 * bs + 1);
    auto probe = request(2, random_tokens(5 * bs, 9));
    probe->tokens.insert(probe->tokens.begin(), t2.begin(), t2.end());
    kv.add(*probe);
    EXPECT_EQ(kv.match_prefix(*probe), 6 * bs);
    KvIndex idx;
    ASSERT_TRUE(idx.apply(kv_events_json(log.since(0, 0, 1000), bs)).is_ok());
    EXPECT_EQ(idx.overlap(block_hashes(probe->tokens, bs), (probe->tokens.size() - 1) / bs), 6u);
    kv.remove(*probe);
    kv.remove(*r);
  }
}

TEST(ExactRouting, EvictionsArePublishedAndReachTheIndex) {
  const int bs = 4;
  KvEventLog log(bs, 4096);
  KvCacheManager kv(KvLayout::from_spec(KvSpec{{{0, 2, 2}}, {}}, true), bs, 8, true, 0);
  kv.set_event_log(&log);
  KvIndex idx;
  ASSERT_TRUE(idx.apply(kv_events_json(log.since(0, 0, 100), bs)).is_ok());  // a snapshot: empty
  EXPECT_TRUE(idx.publishing());
  EXPECT_EQ(idx.n_published(), 0u);
  auto a = request(1, random_tokens(6 * bs, 1));
  prefill(kv, *a);
  kv.remove(*a);  // cached, free
  auto poll = [&] {
    const std::string q = idx.next_query();  // "epoch=E&since=S"
    const uint64_t e = std::stoull(q.substr(6, q.find('&') - 6)), s = std::stoull(q.substr(q.find("since=") + 6));
    ASSERT_TRUE(idx.apply(kv_events_json(log.since(e, s, 100), bs)).is_ok());
  };
  poll();
  const auto ha = block_hashes(a->tokens, bs);
  EXPECT_EQ(idx.n_published(), 6u);
  EXPECT_EQ(idx.overlap(ha, 100), 6u);
  // Another prompt takes every page: a's blocks are evicted, tail first... all of them here.
  auto b = request(2, random_tokens(8 * bs, 2));
  prefill(kv, *b);
  poll();
  EXPECT_EQ(idx.overlap(ha, 100), 0u);
  EXPECT_EQ(idx.overlap(block_hashes(b->tokens, bs), 100), 8u);
  EXPECT_EQ(idx.n_published(), 8u);
  EXPECT_EQ(static_cast<size_t>(log.n_cached()), idx.n_published());
  kv.remove(*b);
}

TEST(ExactRouting, EventLogRingSnapshotsAndLimits) {
  KvEventLog log(16, 4);
  for (uint64_t h = 1; h <= 10; ++h) log.stored(h);
  log.removed(3);
  // 11 events; the ring holds the last 4 (seq 8..11).
  auto d = log.since(log.epoch(), 7, 100);
  ASSERT_FALSE(d.reset);
  EXPECT_EQ(d.events.size(), 4u);
  EXPECT_EQ(d.seq, 11u);
  EXPECT_FALSE(d.events.back().stored);
  d = log.since(log.epoch(), 6, 100);  // behind the ring: a snapshot
  ASSERT_TRUE(d.reset);
  EXPECT_EQ(std::set<uint64_t>(d.snapshot.begin(), d.snapshot.end()),
            (std::set<uint64_t>{1, 2, 4, 5, 6, 7, 8, 9, 10}));
  d = log.since(log.epoch() + 1, 11, 100);  // another epoch (a restarted worker)
  EXPECT_TRUE(d.reset);
  d = log.since(log.epoch(), 12, 100);  // ahead of the log
  EXPECT_TRUE(d.reset);
  d = log.since(log.epoch(), 8, 2);  // limited
  ASSERT_FALSE(d.reset);
  EXPECT_EQ(d.events.size(), 2u);
  EXPECT_EQ(d.seq, 10u);
  EXPECT_TRUE(d.more);
}

TEST(ExactRouting, MalformedAnswersClearTheIndex) {
  KvIndex idx;
  EXPECT_FALSE(idx.apply(nlohmann::json::parse(R"({"epoch": 1})")).is_ok());
  EXPECT_FALSE(idx.publishing());
  ASSERT_TRUE(idx.apply(nlohmann::json::parse(R"({"epoch": 5, "seq": 2, "block_size": 16, "reset": true, "hashes": [7, 9]})")).is_ok());
  EXPECT_EQ(idx.n_published(), 2u);
  // A delta of another epoch is refused.
  EXPECT_FALSE(idx.apply(nlohmann::json::parse(R"({"epoch": 6, "seq": 3, "block_size": 16, "reset": false, "events": []})")).is_ok());
  EXPECT_FALSE(idx.publishing());
  EXPECT_EQ(idx.n_published(), 0u);
}

TEST(ExactRouting, ActiveBlocksCountUntilTheirGraceEnds) {
  KvIndex idx;
  const std::vector<uint64_t> h = {11, 12, 13};
  idx.add_active(h);
  idx.add_active({11, 12, 14});
  EXPECT_EQ(idx.active_blocks(), 4 + 2);  // distinct hashes, plus one per request
  EXPECT_EQ(idx.overlap({11, 12, 13, 15}, 10), 3u);
  EXPECT_EQ(idx.overlap({11, 12, 13, 15}, 2), 2u);  // at most max_blocks
  idx.end_active(h, std::chrono::hours(1));
  EXPECT_EQ(idx.active_blocks(), 3 + 1);
  EXPECT_EQ(idx.overlap(h, 10), 3u);  // 13 held for its grace
  idx.end_active({11, 12, 14}, std::chrono::seconds(0));
  EXPECT_EQ(idx.active_blocks(), 0);
  EXPECT_EQ(idx.overlap(h, 10), 0u);  // 11 ended without grace
  EXPECT_EQ(idx.overlap({13}, 10), 1u);  // still in its grace
}

TEST(ExactRouting, ChooseExactWeighsUncachedAgainstActiveBlocks) {
  RoutingConfig cfg;
  cfg.policy = RoutingPolicy::kExact;
  cfg.kv_poll_interval_s = 30;  // ended requests stay held for a minute: no timing in this test
  auto ws = WorkerSet::create({"http://127.0.0.1:1", "http://127.0.0.1:2"}, cfg);
  ASSERT_TRUE(ws.is_ok());
  WorkerSet& s = **ws;
  const int bs = 16;
  const auto tokens = random_tokens(20 * bs + 5, 3);
  const auto hs = block_hashes(tokens, bs);
  // Nobody publishes: cache_aware.
  RouteDecision d = s.choose_exact(tokens, "key", {});
  EXPECT_NE(d.reason, RouteReason::kExact);
  s.end_request(d);
  // Worker 1 holds the first 12 blocks.
  nlohmann::json snap = {{"epoch", 1}, {"seq", 1}, {"block_size", bs}, {"reset", true},
                         {"hashes", std::vector<uint64_t>(hs.begin(), hs.begin() + 12)}};
  ASSERT_TRUE(s.at(1).kv.apply(snap).is_ok());
  snap["hashes"] = nlohmann::json::array();
  ASSERT_TRUE(s.at(0).kv.apply(snap).is_ok());
  for (int rep = 0; rep < 4; ++rep) {
    d = s.choose_exact(tokens, "key", {});
    EXPECT_EQ(d.reason, RouteReason::kExact);
    EXPECT_EQ(d.worker, 1);
    EXPECT_EQ(d.prompt_blocks, 21u);
    EXPECT_EQ(d.cached_blocks, rep == 0 ? 12u : 20u);  // then also its own blocks, in flight there
    s.end_request(d);
  }
  // Worker 1 busy with 40 other blocks: 9 to prefill + 41 active > 21 to prefill on worker 0.
  std::vector<uint64_t> busy;
  for (uint64_t h = 1; h <= 40; ++h) busy.push_back(h);
  s.at(1).kv.add_active(busy);
  d = s.choose_exact(tokens, "key", {});
  EXPECT_EQ(d.worker, 0);
  EXPECT_EQ(d.cached_blocks, 0u);
  s.end_request(d);
  // Excluded (a retry): the other one.
  d = s.choose_exact(tokens, "key", {0});
  EXPECT_EQ(d.worker, 1);
  s.end_request(d);
  // Without token ids (tokenization failed): cache_aware.
  d = s.choose_exact({}, "key", {});
  EXPECT_NE(d.reason, RouteReason::kExact);
  s.end_request(d);
}

}  // namespace
}  // namespace ember::router
