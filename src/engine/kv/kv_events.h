// KvEventLog: the prefix cache's stored and evicted block hashes, published
// for a data-parallel router that routes by exact cache contents (`ember
// router --policy exact`, docs/parallelism.md). The BlockManager reports
// every layer-group-0 block that enters the prefix cache (its chain hash,
// BlockManager::chain_hash over the tokens of the whole prefix up to the
// block's end) and every one that leaves it (evicted for other content).
// Readers ask for the events after the sequence number they last saw; one
// that fell behind the bounded ring (or is new, or saw another epoch: the
// worker restarted) gets a snapshot of every hash cached now instead.
//
// Memory: the ring holds at most max_events events; the snapshot set at
// most the pool's block count of hashes.
// Threading: stored()/removed() on the engine thread, since() on any thread;
// one mutex, held for O(1) per event and O(answer) per read.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ember {

class KvEventLog {
 public:
  struct Event {
    uint64_t hash = 0;
    bool stored = false;  // false: removed
  };
  struct Delta {
    uint64_t epoch = 0;   // this log's identity (random per process)
    uint64_t seq = 0;     // the reader is up to date to this sequence number
    bool reset = false;   // true: `snapshot` replaces what the reader held
    bool more = false;    // events after `seq` were left out (ask again)
    std::vector<uint64_t> snapshot;  // with reset: every hash cached at `seq`
    std::vector<Event> events;       // without reset: events (seq_in, seq], in order
  };

  KvEventLog(int block_size, size_t max_events);

  int block_size() const { return block_size_; }
  uint64_t epoch() const { return epoch_; }

  // Engine thread: a block hash entered / left the prefix cache.
  void stored(uint64_t hash);
  void removed(uint64_t hash);

  // The events after `seq` (at most max_events) if `epoch` is this log's and
  // the ring still holds them; else a snapshot.
  Delta since(uint64_t epoch, uint64_t seq, size_t max_events) const;
  // Hashes cached now.
  size_t n_cached() const;

 private:
  void push(uint64_t hash, bool stored);

  const int block_size_;
  const size_t max_events_;
  const uint64_t epoch_;
  mutable std::mutex mu_;
  uint64_t seq_ = 0;          // events ever logged
  std::deque<Event> ring_;    // events (seq_ - ring_.size(), seq_]
  std::unordered_set<uint64_t> cached_;
};

}  // namespace ember
