// Token masks: which vocabulary tokens a grammar state admits next, fast
// enough for every decode step over a 262k-token vocabulary (xgrammar's
// design, on the recognizer of grammar/matcher.h).
//
// TokenVocab holds each token's bytes, sorted, once per tokenizer (shared by
// every request): walking the sorted list with common prefixes is a walk of
// the vocabulary's byte trie, so a shared prefix is matched once.
//
// CompiledGrammar precomputes, for every byte-set element position p of the
// grammar, the verdict on every token for a stack whose top is p with the
// rest of the stack unknown: accepted (the token's bytes fit inside p's
// rule, whatever the stack below), rejected (they fail inside it), or
// context-dependent (the rule ends before the token does: it depends on the
// stack below). At run time a state's mask is the union over its stacks of
// the accepted sets plus those context-dependent tokens that the full stack
// admits (checked by running the recognizer over their bytes), so only the
// few tokens that cross a rule boundary are checked per step.
//
// Thread safety: TokenVocab and CompiledGrammar are immutable after
// construction; fill_mask uses the caller's StackPool (one thread).
#pragma once

#include <cstdint>
#include <memory>
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

class CompiledGrammar {
 public:
  static std::shared_ptr<const CompiledGrammar> compile(Grammar g, std::shared_ptr<const TokenVocab> vocab);

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  const PositionMask& position(uint32_t pos) const { return masks_[pos]; }
  // A new pool for one request's matchers.
  std::shared_ptr<StackPool> new_pool() const { return std::make_shared<StackPool>(grammar_); }
  size_t n_positions() const { return n_positions_; }
  double compile_seconds() const { return compile_seconds_; }

  // Sets bit t of bits[(n_vocab + 63) / 64] for every token t that state `s`
  // of `pool` admits next (end-of-generation tokens are the caller's).
  void fill_mask(StackPool& pool, StateId s, uint64_t* bits) const;
  // The same, by running the recognizer over every token (the reference the tests compare with).
  void fill_mask_brute_force(StackPool& pool, StateId s, uint64_t* bits) const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<PositionMask> masks_;  // [elems.size()], filled for byte-set positions
  size_t n_positions_ = 0;
  double compile_seconds_ = 0;
};

}  // namespace ember::grammar
