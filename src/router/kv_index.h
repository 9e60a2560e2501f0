// What one worker's prefix cache holds, as the router sees it for exact
// routing (`--policy exact`): the block hashes the worker publishes at GET
// /kv_events (engine/kv/kv_events.h), kept up to date by polling for
// deltas, plus the blocks of the requests the router has in flight there
// (they are being prefilled and will be cached; Dynamo's "active blocks").
//
// A request's blocks are hashed here with the engine's own function,
// BlockManager::chain_hash, over the token ids the worker itself produced
// (its /tokenize, the same template and tokenizer the generation uses), so a
// hash the router computes is the key the worker's prefix cache stores.
//
// Threading: every method takes the index's mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ember::router {

// Chain hashes of the full blocks of `tokens` (block_size tokens each), as
// the engine's prefix cache keys them (KvCacheManager::cache_blocks).
std::vector<uint64_t> block_hashes(const std::vector<int32_t>& tokens, int block_size);

class KvIndex {
 public:
  using Clock = std::chrono::steady_clock;

  // Applies one GET /kv_events answer (its JSON body). Error: a malformed
  // answer (the index is then cleared and the next poll starts afresh).
  Status apply(const nlohmann::json& answer);
  // The worker does not publish (404, 401, unreachable): forget its hashes.
  void clear(const std::string& why);
  // The query for the next poll: "epoch=E&since=S".
  std::string next_query() const;

  // True once a poll succeeded and until clear().
  bool publishing() const;
  int block_size() const;
  // Leading blocks of `hashes` the worker holds or will hold (published, or
  // of a request in flight there). Matches the engine: at most
  // max_blocks (it leaves the prompt's last token to compute).
  size_t overlap(const std::vector<uint64_t>& hashes, size_t max_blocks) const;
  // Blocks in use by the requests in flight there (distinct hashes) plus
  // one private tail block per request: the decode load.
  int64_t active_blocks() const;

  // A request routed there / ended. Its hashes count as held until `grace`
  // after its end (the worker's next delta then has them).
  void add_active(const std::vector<uint64_t>& hashes);
  void end_active(const std::vector<uint64_t>& hashes, Clock::duration grace);

  size_t n_published() const;
  int64_t n_resets() const;
  int64_t n_events() const;
  std::string last_error() const;

 private:
  struct Pending {
    int count = 0;
    Clock::time_point until{};  // with count 0: held until then
  };
  bool held(uint64_t h, Clock::time_point now) const;

  mutable std::mutex mu_;
  bool publishing_ = false;
  uint64_t epoch_ = 0, seq_ = 0;
  int block_size_ = 0;
  std::unordered_set<uint64_t> cached_;
  std::unordered_map<uint64_t, Pending> pending_;
  int64_t n_active_requests_ = 0, n_active_hashes_ = 0;
  int64_t resets_ = 0, events_ = 0;
  int ends_since_sweep_ = 0;
  std::string last_error_;
};

}  // namespace ember::router
