// GrammarBuilder: assembles a byte-level Grammar from rules of element
// sequences (used by the GBNF parser). Code-point classes become UTF-8 byte
// sequences (RE2's range splitting), quantifiers become right-recursive
// helper rules, and finish() checks that every referenced rule is defined
// and that no rule is left-recursive.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace ember::grammar {

using Seq = std::vector<Elem>;  // a run of elements (no kEnd)

class GrammarBuilder {
 public:
  // The id of a rule by name (created undefined on first mention).
  uint32_t named_rule(const std::string& name);
  bool defined(uint32_t id) const { return defined_[id]; }
  void define(uint32_t id, std::vector<Seq> alts);
  // A new anonymous rule `base_N` with these alternatives; returns a reference to it.
  Seq group(const std::string& base, std::vector<Seq> alts);
  Seq literal(const std::string& bytes);
  // A code-point class: union of [lo, hi] ranges, or its complement.
  Seq char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);
  Seq bytes(const ByteSet& s);
  // item{lo,hi} (hi < 0: unbounded).
  Seq repeat(const std::string& base, Seq item, int lo, int hi);
  bool too_big() const { return n_elems_ > kMaxGrammarElems; }
  Result<Grammar> finish(const std::string& root);

 private:
  uint32_t byte_set(const ByteSet& s);
  uint32_t new_rule(const std::string& base);

  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
  std::vector<bool> defined_;
  std::map<std::string, uint32_t> by_name_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
  std::map<std::pair<std::vector<std::pair<uint32_t, uint32_t>>, bool>, Seq> class_cache_;
  size_t n_elems_ = 0;
  int n_anon_ = 0;
};

}  // namespace ember::grammar
