// The byte-level grammar recognizer; see matcher.h.
#include "grammar/matcher.h"

#include <algorithm>

#include "core/check.h"

namespace ember::grammar {

StackPool::StackPool(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  nodes_.push_back({0, 0});  // node 0: the empty stack
  states_.emplace_back();    // state 0: dead
}

uint32_t StackPool::intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
  auto [it, fresh] = node_ids_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({pos, parent});
  return it->second;
}

// Adds the tops reachable from "at pos, then return to parent" to *out.
void StackPool::closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out) {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
  if (std::find(visited_.begin(), visited_.end(), key) != visited_.end()) return;
  visited_.push_back(key);
  const Elem& e = g_->elems[pos];
  switch (e.kind) {
    case ElemKind::kEnd:
      if (parent == 0) {
        out->push_back(0);
      } else {
        const Node n = nodes_[parent];
        closure(n.pos, n.parent, out);
      }
      return;
    case ElemKind::kBytes:
      out->push_back(intern(pos, parent));
      return;
    case ElemKind::kRef: {
      // A reference in tail position returns straight to the parent.
      const uint32_t ret = g_->elems[pos + 1].kind == ElemKind::kEnd ? parent : intern(pos + 1, parent);
      for (uint32_t alt : g_->rules[e.arg]) closure(alt, ret, out);
      return;
    }
  }
}

StateId StackPool::intern_state(std::vector<uint32_t>* tops) {
  std::sort(tops->begin(), tops->end());
  tops->erase(std::unique(tops->begin(), tops->end()), tops->end());
  if (tops->empty()) return kDeadState;
  uint64_t h = 1469598103934665603ull;
  for (uint32_t t : *tops) h = (h ^ t) * 1099511628211ull;
  auto& cands = state_ids_[h];
  for (StateId s : cands)
    if (states_[s] == *tops) return s;
  const auto id = static_cast<StateId>(states_.size());
  states_.push_back(*tops);
  cands.push_back(id);
  return id;
}

StateId StackPool::initial() {
  if (initial_ >= 0) return initial_;
  scratch_.clear();
  visited_.clear();
  for (uint32_t alt : g_->rules[g_->root]) closure(alt, 0, &scratch_);
  initial_ = intern_state(&scratch_);
  return initial_;
}

StateId StackPool::singleton(uint32_t node) {
  scratch_.assign(1, node);
  return intern_state(&scratch_);
}

StateId StackPool::at_position(uint32_t pos) {
  EMBER_CHECK(g_->elems[pos].kind == ElemKind::kBytes);
  return singleton(intern(pos, 0));
}

StateId StackPool::chain_state(const uint32_t* pos, int n) {
  uint32_t node = 0;
  for (int i = n; i-- > 0;) node = intern(pos[i], node);
  return singleton(node);
}

StateId StackPool::advance(StateId s, uint8_t byte) {
  if (s == kDeadState) return kDeadState;
  const uint64_t key = (static_cast<uint64_t>(s) << 8) | byte;
  if (dense_on_) {
    if (key < dense_.size() && dense_[key] >= 0) return dense_[key];
  } else if (auto it = trans_.find(key); it != trans_.end()) {
    return it->second;
  }
  std::vector<uint32_t> next;
  visited_.clear();
  for (uint32_t t : states_[s]) {
    if (t == 0) continue;
    const Node n = nodes_[t];
    if (g_->byte_sets[g_->elems[n.pos].arg].test(byte)) closure(n.pos + 1, n.parent, &next);
  }
  const StateId r = intern_state(&next);
  if (dense_on_) {
    if (dense_.size() < states_.size() * 256) dense_.resize(states_.size() * 256 * 2, -1);
    dense_[key] = r;
  } else {
    trans_[key] = r;
  }
  return r;
}

StateId StackPool::advance(StateId s, std::string_view bytes) {
  for (char c : bytes) {
    s = advance(s, static_cast<uint8_t>(c));
    if (s == kDeadState) break;
  }
  return s;
}

std::string StackPool::forced_bytes(StateId s, size_t max_bytes) {
  std::string out;
  while (out.size() < max_bytes && s != kDeadState && !accepting(s)) {
    ByteSet u;
    for (uint32_t t : states_[s]) {
      const ByteSet& b = g_->byte_sets[g_->elems[nodes_[t].pos].arg];
      for (int k = 0; k < 4; ++k) u.w[k] |= b.w[k];
    }
    int n = 0, byte = -1;
    for (int k = 0; k < 4 && n < 2; ++k) {
      n += __builtin_popcountll(u.w[k]);
      if (u.w[k] != 0 && byte < 0) byte = k * 64 + __builtin_ctzll(u.w[k]);
    }
    if (n != 1) break;
    out.push_back(static_cast<char>(byte));
    s = advance(s, static_cast<uint8_t>(byte));
  }
  return out;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<StackPool> pool) : pool_(std::move(pool)) {
  history_.push_back(pool_->initial());
}

bool GrammarMatcher::accept(std::string_view bytes) {
  const StateId s = pool_->advance(state(), bytes);
  if (s == kDeadState) return false;
  history_.push_back(s);
  return true;
}

bool GrammarMatcher::rollback(int k) {
  if (k < 0 || k > n_accepted()) return false;
  history_.resize(history_.size() - k);
  return true;
}

}  // namespace ember::grammar
