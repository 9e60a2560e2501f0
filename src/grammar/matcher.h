// The recognizer of a Grammar over bytes: a set of parse stacks, advanced
// one byte at a time (top-down, like llama.cpp's grammar sampler, without
// left recursion).
//
// A stack is a chain of interned nodes (element position, parent node):
// the top node's position is a byte-set element, the others are return
// positions. Node 0 is the empty stack: the grammar is complete there.
// References in tail position push no return node, so right recursion
// (repetitions) keeps stacks flat. A parser state is an interned sorted set
// of top nodes (StateId); transitions (state, byte) -> state are cached, so
// a pool is a lazily built DFA over the stacks it has met.
//
// StackPool is not thread-safe; each pool belongs to one thread (a
// request's matchers on the engine thread share one; mask precomputation
// uses its own). GrammarMatcher is one sample's position in the grammar:
// its state after each accepted token, so rollback(k) is exact.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace ember::grammar {

using StateId = int32_t;
constexpr StateId kDeadState = 0;  // the empty set of stacks

class StackPool {
 public:
  explicit StackPool(std::shared_ptr<const Grammar> g);
  const Grammar& grammar() const { return *g_; }
  // Caches transitions in a dense table (256 entries per state) instead of
  // a hash map: several times faster, 1 KiB per state (for the mask
  // precomputation's pool, which walks the whole vocabulary per context).
  void use_dense_transitions() { dense_on_ = true; }

  // The stacks at the start of the root rule.
  StateId initial();
  // The state holding the single stack whose top is `node`, or the stacks
  // of `pos` (a byte-set element) over the empty stack.
  StateId singleton(uint32_t node);
  StateId at_position(uint32_t pos);
  // The state of the single stack pos[0] (top) over pos[1] ... pos[n-1]
  // over the empty stack.
  StateId chain_state(const uint32_t* pos, int n);
  StateId advance(StateId s, uint8_t byte);
  StateId advance(StateId s, std::string_view bytes);
  // The bytes every continuation of `s` starts with (at most max_bytes):
  // taken while the grammar may not end and exactly one byte is admitted
  // (a forced jump: JSON keys, punctuation, closing brackets).
  std::string forced_bytes(StateId s, size_t max_bytes);
  const std::vector<uint32_t>& tops(StateId s) const { return states_[s]; }
  // The grammar may end here (the empty stack is in the set).
  bool accepting(StateId s) const { return !states_[s].empty() && states_[s][0] == 0; }
  // Some stack can still take a byte.
  bool live(StateId s) const { return states_[s].size() > (accepting(s) ? 1u : 0u); }
  uint32_t node_pos(uint32_t node) const { return nodes_[node].pos; }
  uint32_t node_parent(uint32_t node) const { return nodes_[node].parent; }
  size_t n_nodes() const { return nodes_.size(); }
  size_t n_states() const { return states_.size(); }

 private:
  struct Node {
    uint32_t pos, parent;
  };
  uint32_t intern(uint32_t pos, uint32_t parent);
  void closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out);
  StateId intern_state(std::vector<uint32_t>* tops);

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<std::vector<uint32_t>> states_;
  std::unordered_map<uint64_t, std::vector<StateId>> state_ids_;  // hash -> candidates
  std::unordered_map<uint64_t, StateId> trans_;                   // (state << 8 | byte) -> state
  bool dense_on_ = false;
  std::vector<StateId> dense_;                                    // [state * 256 + byte] -> state, -1: not yet
  std::vector<uint64_t> visited_;
  std::vector<uint32_t> scratch_;
  StateId initial_ = -1;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<StackPool> pool);
  StackPool& pool() const { return *pool_; }
  StateId state() const { return history_.back(); }
  // Advances over one token's bytes; false (and no change) if they do not fit.
  bool accept(std::string_view bytes);
  // Records a token that does not move the grammar (an end-of-generation token).
  void accept_nothing() { history_.push_back(history_.back()); }
  bool can_end() const { return pool_->accepting(state()); }
  bool can_continue() const { return pool_->live(state()); }
  // The bytes the grammar forces next (StackPool::forced_bytes).
  std::string forced_bytes(size_t max_bytes) const { return pool_->forced_bytes(state(), max_bytes); }
  // Withdraws the last k accepted tokens; false if fewer were accepted.
  bool rollback(int k);
  int n_accepted() const { return static_cast<int>(history_.size()) - 1; }

 private:
  std::shared_ptr<StackPool> pool_;
  std::vector<StateId> history_;  // state before any token, then after each
};

}  // namespace ember::grammar
