// Vocabulary organization, per-position verdict precomputation and run-time
// token masks; see token_mask.h.
#include "grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tokenizer/tokenizer.h"

namespace ember::grammar {

namespace {

std::shared_ptr<const TokenVocab> finish_vocab(std::vector<std::string> bytes) {
  auto v = std::make_shared<TokenVocab>();
  v->n_vocab = static_cast<int>(bytes.size());
  v->bytes = std::move(bytes);
  for (int i = 0; i < v->n_vocab; ++i)
    if (!v->bytes[i].empty() && v->bytes[i].size() < 65535) v->sorted.push_back(i);
  std::stable_sort(v->sorted.begin(), v->sorted.end(),
                   [&](int32_t a, int32_t b) { return v->bytes[a] < v->bytes[b]; });
  v->lcp.assign(v->sorted.size(), 0);
  for (size_t i = 1; i < v->sorted.size(); ++i) {
    const std::string& a = v->bytes[v->sorted[i - 1]];
    const std::string& b = v->bytes[v->sorted[i]];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    v->lcp[i] = static_cast<uint16_t>(k);
  }
  return v;
}

enum Verdict : uint8_t { kReject, kAccept, kDependent };

// Verdicts of every token for a stack topped by byte-set position `pos`
// over an unknown rest (the precomputation pool's empty stack stands for
// "the rule ended": what follows depends on the real stack).
void precompute_position(StackPool& pool, StateId start, const TokenVocab& v, size_t max_len, PositionMask* out) {
  const auto& sorted = v.sorted;
  const size_t n = sorted.size();
  std::vector<StateId> st(max_len + 1);
  std::vector<uint8_t> ended(max_len + 1);  // the rule ended at a shorter prefix
  st[0] = start;
  ended[0] = 0;
  size_t depth = 0;
  std::vector<int32_t> acc;
  std::vector<int32_t> dep;
  std::vector<uint16_t> dep_lcp;
  const std::string* prev_dep = nullptr;
  auto record = [&](size_t i, Verdict vd) {
    const int32_t id = sorted[i];
    if (vd == kAccept) {
      acc.push_back(id);
    } else if (vd == kDependent) {
      const std::string& b = v.bytes[id];
      size_t k = 0;
      if (prev_dep)
        while (k < prev_dep->size() && k < b.size() && (*prev_dep)[k] == b[k]) ++k;
      dep.push_back(id);
      dep_lcp.push_back(static_cast<uint16_t>(k));
      prev_dep = &b;
    }
  };
  size_t i = 0;
  while (i < n) {
    const std::string& s = v.bytes[sorted[i]];
    const size_t len = s.size();
    size_t d = std::min<size_t>(v.lcp[i], depth);
    bool stuck = false;
    while (d < len) {
      if (!pool.live(st[d])) {
        stuck = true;
        break;
      }
      st[d + 1] = pool.advance(st[d], static_cast<uint8_t>(s[d]));
      ended[d + 1] = ended[d] | static_cast<uint8_t>(pool.accepting(st[d]));
      ++d;
    }
    depth = d;
    if (!stuck) {
      record(i, st[len] != kDeadState ? kAccept : ended[len] ? kDependent : kReject);
      ++i;
      continue;
    }
    // No stack can take byte d: every token sharing s[0, d) has this verdict.
    const Verdict vd = (ended[d] || pool.accepting(st[d])) ? kDependent : kReject;
    if (vd == kReject) {
      const std::string_view prefix(s.data(), d);
      auto it = std::upper_bound(sorted.begin() + static_cast<std::ptrdiff_t>(i), sorted.end(), prefix,
                                 [&](std::string_view p, int32_t id) {
                                   return p < std::string_view(v.bytes[id]).substr(0, p.size());
                                 });
      i = static_cast<size_t>(it - sorted.begin());
    } else {
      record(i, vd);
      for (++i; i < n && v.lcp[i] >= d; ++i) record(i, vd);
    }
  }
  out->dependent = std::move(dep);
  out->dependent_lcp = std::move(dep_lcp);
  if (acc.size() * 32 > static_cast<size_t>(v.n_vocab)) {
    out->accepted_bits.assign((v.n_vocab + 63) / 64, 0);
    for (int32_t id : acc) out->accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  } else {
    std::sort(acc.begin(), acc.end());
    out->accepted = std::move(acc);
  }
}

}  // namespace

std::shared_ptr<const TokenVocab> TokenVocab::from_pieces(std::vector<std::string> pieces) {
  return finish_vocab(std::move(pieces));
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.n_vocab());
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const TokenType t = tok.token_type(id);
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused) continue;
    bytes[id] = tok.token_to_piece(id, false);
  }
  return finish_vocab(std::move(bytes));
}

constexpr uint32_t kNoPos = 0xFFFFFFFFu;

size_t CompiledGrammar::KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : k) h = (h ^ x) * 1099511628211ull;
  return static_cast<size_t>(h);
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(Grammar g, std::shared_ptr<const TokenVocab> vocab) {
  const auto t0 = std::chrono::steady_clock::now();
  auto c = std::make_shared<CompiledGrammar>();
  c->grammar_ = std::make_shared<const Grammar>(std::move(g));
  c->vocab_ = std::move(vocab);
  for (int32_t id : c->vocab_->sorted) c->max_len_ = std::max(c->max_len_, c->vocab_->bytes[id].size());
  c->scratch_ = std::make_unique<StackPool>(c->grammar_);
  c->scratch_->use_dense_transitions();
  // The contexts of the start state (the first step's mask).
  StackPool pool(c->grammar_);
  std::vector<uint64_t> bits((c->vocab_->n_vocab + 63) / 64);
  c->fill_mask(pool, pool.initial(), bits.data());
  c->compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

size_t CompiledGrammar::n_contexts() const {
  std::lock_guard<std::mutex> lk(mu_);
  return contexts_.size();
}

const PositionMask& CompiledGrammar::context(const Key& k) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto& slot = contexts_[k];
  if (!slot) {
    slot = std::make_unique<PositionMask>();
    int n = 0;
    while (n < kContextDepth && k[n] != kNoPos) ++n;
    const StateId st = scratch_->chain_state(k.data(), n);
    precompute_position(*scratch_, st, *vocab_, max_len_, slot.get());
    // A complete stack: past its end nothing follows, so nothing depends on context.
    if (n < kContextDepth) {
      slot->dependent.clear();
      slot->dependent_lcp.clear();
    }
  }
  return *slot;
}

void CompiledGrammar::fill_mask(StackPool& pool, StateId s, uint64_t* bits) const {
  const size_t words = (vocab_->n_vocab + 63) / 64;
  std::memset(bits, 0, words * sizeof(uint64_t));
  std::vector<StateId> st;
  for (uint32_t t : pool.tops(s)) {
    if (t == 0) continue;
    // The context: the top position and the next return positions.
    Key key;
    key.fill(kNoPos);
    uint32_t node = t;
    for (int d = 0; d < kContextDepth && node != 0; ++d) {
      key[d] = pool.node_pos(node);
      node = pool.node_parent(node);
    }
    const bool complete = node == 0;
    const PositionMask& m = context(key);
    if (!m.accepted_bits.empty()) {
      for (size_t w = 0; w < words; ++w) bits[w] |= m.accepted_bits[w];
    } else {
      for (int32_t id : m.accepted) bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (m.dependent.empty() || complete) continue;
    // Context-dependent tokens against the full stack, sharing prefixes.
    st.resize(1);
    st[0] = pool.singleton(t);
    size_t depth = 0;
    for (size_t k = 0; k < m.dependent.size(); ++k) {
      const int32_t id = m.dependent[k];
      if ((bits[id >> 6] >> (id & 63)) & 1) {
        depth = std::min<size_t>(depth, m.dependent_lcp[k]);  // st stays valid for the common prefix
        continue;
      }
      const std::string& b = vocab_->bytes[id];
      size_t d = std::min<size_t>(m.dependent_lcp[k], depth);
      if (st.size() < b.size() + 1) st.resize(b.size() + 1);
      while (d < b.size() && st[d] != kDeadState) {
        st[d + 1] = pool.advance(st[d], static_cast<uint8_t>(b[d]));
        ++d;
      }
      depth = d;
      if (d == b.size() && st[d] != kDeadState) bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
}

void CompiledGrammar::fill_mask_brute_force(StackPool& pool, StateId s, uint64_t* bits) const {
  std::memset(bits, 0, (vocab_->n_vocab + 63) / 64 * sizeof(uint64_t));
  for (int32_t id = 0; id < vocab_->n_vocab; ++id) {
    const std::string& b = vocab_->bytes[id];
    if (b.empty()) continue;
    if (pool.advance(s, b) != kDeadState) bits[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

}  // namespace ember::grammar
