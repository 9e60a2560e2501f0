// Tests for the router's approximate prefix tree (src/router/prefix_tree.h)
// against a brute-force reference (the longest common prefix with any key
// inserted and not evicted), the routing keys (src/router/request_key.h) and
// the routing decisions of the cache-aware policy (src/router/worker_set.h).
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "router/prefix_tree.h"
#include "router/request_key.h"
#include "router/worker_set.h"

namespace ember::router {
namespace {

size_t lcp(const std::string& a, const std::string& b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return k;
}

TEST(PrefixTree, MatchesTheLongestCommonPrefixOfAnyInsertedKey) {
  std::mt19937 rng(7);
  PrefixTree t(size_t{1} << 30);
  std::vector<std::string> keys;
  auto rand_key = [&] {
    // Small alphabet and shared stems, so edges split often.
    std::string stem = keys.empty() || rng() % 3 == 0 ? "" : keys[rng() % keys.size()].substr(0, rng() % 40);
    const size_t n = rng() % 30;
    for (size_t i = 0; i < n; ++i) stem += static_cast<char>('a' + rng() % 3);
    return stem;
  };
  for (int it = 0; it < 400; ++it) {
    const std::string k = rand_key();
    t.insert(k);
    keys.push_back(k);
    const std::string q = rand_key();
    size_t want = 0;
    for (const auto& x : keys) want = std::max(want, lcp(x, q));
    ASSERT_EQ(t.match(q), want) << "query '" << q << "' after " << keys.size() << " keys";
  }
  // Bytes are the edges' total: at most the sum of the keys, at least the longest.
  size_t total = 0, longest = 0;
  for (const auto& x : keys) {
    total += x.size();
    longest = std::max(longest, x.size());
  }
  EXPECT_LE(t.bytes(), total);
  EXPECT_GE(t.bytes(), longest);
}

TEST(PrefixTree, EvictsLeastRecentlyUsedPromptsUnderItsBudget) {
  PrefixTree t(1000);
  const std::string a(400, 'a'), b(400, 'b'), c(400, 'c');
  t.insert(a);
  t.insert(b);
  EXPECT_EQ(t.match(a), 400u);
  t.insert(a + "x");  // a is now more recent than b
  t.insert(c);        // over 1000 bytes: b (least recently used) goes
  EXPECT_LE(t.bytes(), 1000u);
  EXPECT_EQ(t.match(b), 0u);
  EXPECT_EQ(t.match(a + "x"), 401u);
  EXPECT_EQ(t.match(c), 400u);
  t.clear();
  EXPECT_EQ(t.match(a), 0u);
  EXPECT_EQ(t.bytes(), 0u);
}

TEST(PrefixTree, LongKeysDoNotRecurse) {
  PrefixTree t(size_t{64} << 20);
  std::string k;
  for (int i = 0; i < 20000; ++i) {
    k += static_cast<char>('a' + i % 26);
    if (i % 2 == 0) t.insert(k);  // a chain of 10,000 nodes
  }
  EXPECT_EQ(t.match(k), k.size() - 1);
}

TEST(RequestKey, ANextTurnExtendsThePreviousTurnsKey) {
  using nlohmann::json;
  json turn1 = {{"messages", {{{"role", "system"}, {"content", "You are terse."}},
                              {{"role", "user"}, {"content", "Hello"}}}}};
  json turn2 = turn1;
  turn2["messages"].push_back({{"role", "assistant"}, {"content", "Hi."}});
  turn2["messages"].push_back({{"role", "user"}, {"content", {{{"type", "text"}, {"text", "More"}}}}});
  const std::string k1 = routing_key(turn1, true), k2 = routing_key(turn2, true);
  ASSERT_GT(k2.size(), k1.size());
  EXPECT_EQ(k2.substr(0, k1.size()), k1);
  EXPECT_NE(k1.find("Hello"), std::string::npos);
  // The whole conversation, not the first message: two chats with the same
  // system prompt differ after it.
  json other = turn1;
  other["messages"][1]["content"] = "Goodbye";
  EXPECT_NE(routing_key(other, true), k1);
  EXPECT_EQ(lcp(routing_key(other, true), k1), k1.find("Hello"));
  // Tools come first (templates render them into the system prompt).
  json tools = turn1;
  tools["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  EXPECT_EQ(routing_key(tools, true).rfind("tools", 0), 0u);
}

TEST(RequestKey, CompletionPrompts) {
  using nlohmann::json;
  EXPECT_EQ(routing_key(json{{"prompt", "abc"}}, false), "abc");
  EXPECT_EQ(routing_key(json{{"prompt", {"first", "second"}}}, false), "first");
  EXPECT_EQ(routing_key(json{{"prompt", {1, 2, 3}}}, false), "1,2,3,");
  EXPECT_EQ(routing_key(json{{"prompt", {{4, 5}, {6}}}}, false), "4,5,");
  EXPECT_EQ(routing_key(json{{"messages", "x"}}, false), "");
  EXPECT_EQ(routing_key(json::array(), true), "");
  EXPECT_EQ(routing_key(json{{"messages", 3}}, true), "");
}

std::unique_ptr<WorkerSet> make_set(RoutingConfig rc, int n) {
  std::vector<std::string> urls;
  for (int i = 0; i < n; ++i) urls.push_back("http://127.0.0.1:" + std::to_string(40000 + i));
  auto ws = WorkerSet::create(urls, rc);
  EXPECT_TRUE(ws.is_ok());
  return std::move(ws.value());
}

TEST(WorkerSet, CacheAwareFollowsThePrefixElseTheLoad) {
  RoutingConfig rc;
  rc.balance_abs_threshold = 4;
  auto ws = make_set(rc, 3);
  const std::string p1(200, 'x'), p2(200, 'y');
  RouteDecision d1 = ws->choose(p1 + "a", {});
  EXPECT_EQ(d1.reason, RouteReason::kLoad);
  ws->at(d1.worker).in_flight = 1;  // busy: the next new prefix goes elsewhere
  RouteDecision d2 = ws->choose(p2 + "a", {});
  EXPECT_EQ(d2.reason, RouteReason::kLoad);
  EXPECT_NE(d2.worker, d1.worker);
  // Requests sharing p1 go where p1 went, though that worker is busier.
  for (int i = 0; i < 3; ++i) {
    RouteDecision d = ws->choose(p1 + std::to_string(i), {});
    EXPECT_EQ(d.worker, d1.worker);
    EXPECT_EQ(d.reason, RouteReason::kAffinity);
    EXPECT_EQ(d.matched, 200u);
  }
  // A short match (below the threshold) is routed by load.
  RouteDecision d3 = ws->choose(p1.substr(0, 10) + std::string(100, 'z'), {});
  EXPECT_EQ(d3.reason, RouteReason::kLoad);
  EXPECT_NE(d3.worker, d1.worker);
  // Imbalance beats affinity.
  ws->at(d1.worker).in_flight = 10;
  RouteDecision d4 = ws->choose(p1 + "b", {});
  EXPECT_EQ(d4.reason, RouteReason::kLoad);
  EXPECT_NE(d4.worker, d1.worker);
  // Excluded (already tried) and unhealthy workers are never chosen.
  ws->at(d1.worker).in_flight = 0;
  ws->mark_failed(d2.worker, "test");
  for (int i = 0; i < 5; ++i) {
    RouteDecision d = ws->choose(p2 + "q" + std::to_string(i), {d1.worker});
    EXPECT_NE(d.worker, d1.worker);
    EXPECT_NE(d.worker, d2.worker);
  }
  EXPECT_EQ(ws->choose("k", {0, 1, 2}).worker, -1);
}

TEST(WorkerSet, RejectsBadWorkerLists) {
  EXPECT_FALSE(WorkerSet::create({}, RoutingConfig{}).is_ok());
  EXPECT_FALSE(WorkerSet::create({"https://x:1"}, RoutingConfig{}).is_ok());
  EXPECT_FALSE(WorkerSet::create({"http://x:99999"}, RoutingConfig{}).is_ok());
  EXPECT_FALSE(WorkerSet::create({"http://a:1", "http://a:1"}, RoutingConfig{}).is_ok());
  EXPECT_TRUE(parse_routing_policy("random").is_ok());
  EXPECT_FALSE(parse_routing_policy("best").is_ok());
}

}  // namespace
}  // namespace ember::router
