// Token masks: which vocabulary tokens a grammar state admits next, fast
// enough for every decode step over a 262k-token vocabulary (xgrammar's
// design, on the recognizer of grammar/matcher.h).
//
// TokenVocab holds each token's bytes, sorted, once per tokenizer (shared by
// every request): walking the sorted list with common prefixes is a walk of
// the vocabulary's byte trie, so a shared prefix is matched once.
//
// CompiledGrammar caches, per stack context (the top byte-set position and
// the return positions of the next kContextDepth - 1 stack levels), the
// verdict on every token for a stack that looks like that context with the
// rest of the stack unknown: accepted (the token's bytes fit inside the
// context, whatever lies below), rejected (they fail inside it), or
// context-dependent (the context is popped before the token ends: it
// depends on the stack below). At run time a state's mask is the union over
// its stacks of the accepted sets plus those context-dependent tokens that
// the full stack admits (checked by running the recognizer over their
// bytes), so only the few tokens that cross the context's boundary are
// checked per step. A context is computed the first time a stack shows it
// (one walk of the vocabulary trie) and shared by every request on the
// grammar; precompute() fills the contexts of the start state.
//
// Thread safety: TokenVocab is immutable; CompiledGrammar's cache is filled
// under a mutex; fill_mask uses the caller's StackPool (one thread).
#pragma once

#include <cstdint>
#include <array>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ember {
class Tokenizer;
}

namespace ember::grammar {

struct TokenVocab {
  int n_vocab = 0;
  std::vector<std::string> bytes;  // [n_vocab] a token's bytes ("" for tokens a grammar never admits: control, unused)
  std::vector<int32_t> sorted;     // ids with non-empty bytes, by bytes
  std::vector<uint16_t> lcp;       // [sorted.size()] common prefix length with the previous sorted entry

  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tok);
  // bytes[id] = pieces[id] (tests).
  static std::shared_ptr<const TokenVocab> from_pieces(std::vector<std::string> pieces);
};

// One position's verdicts: accepted tokens as a list or, when many, a bitset
// over [n_vocab]; context-dependent tokens as a list.
struct PositionMask {
  std::vector<int32_t> accepted;
  std::vector<uint64_t> accepted_bits;  // non-empty: used instead of `accepted`
  std::vector<int32_t> dependent;        // in vocabulary byte order
  std::vector<uint16_t> dependent_lcp;   // common prefix with the previous dependent token
};

constexpr int kContextDepth = 3;

class CompiledGrammar {
 public:
  static std::shared_ptr<const CompiledGrammar> compile(Grammar g, std::shared_ptr<const TokenVocab> vocab);

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // A new pool for one request's matchers.
  std::shared_ptr<StackPool> new_pool() const { return std::make_shared<StackPool>(grammar_); }
  size_t n_contexts() const;
  double compile_seconds() const { return compile_seconds_; }

  // Sets bit t of bits[(n_vocab + 63) / 64] for every token t that state `s`
  // of `pool` admits next (end-of-generation tokens are the caller's).
  void fill_mask(StackPool& pool, StateId s, uint64_t* bits) const;
  // The same, by running the recognizer over every token (the reference the tests compare with).
  void fill_mask_brute_force(StackPool& pool, StateId s, uint64_t* bits) const;

 private:
  using Key = std::array<uint32_t, kContextDepth>;  // positions, kNoPos past a complete stack
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  const PositionMask& context(const Key& k) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  size_t max_len_ = 0;
  mutable std::mutex mu_;
  mutable std::unordered_map<Key, std::unique_ptr<PositionMask>, KeyHash> contexts_;
  mutable std::unique_ptr<StackPool> scratch_;  // for the precomputation (under mu_)
  double compile_seconds_ = 0;
};

}  // namespace ember::grammar
