// Grammar: a context-free grammar over bytes, the one form every structured
// output constraint compiles to (GBNF, regular expressions, JSON Schema,
// choice lists). Rules are lists of alternatives; an alternative is a run of
// elements in `elems` ending with kEnd; an element is a byte set (one byte
// from a 256-bit set) or a reference to a rule. Characters of the source
// languages (Unicode code points) are compiled to UTF-8 byte sequences, so
// the recognizer (grammar/matcher.h) only ever sees bytes.
//
// parse_gbnf() reads llama.cpp's GBNF: `name ::= alternatives` rules, string
// literals "..." with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes, classes
// [a-z] / [^...], `.` (any character), groups ( ), rule references,
// quantifiers * + ? {m} {m,} {m,n}, # comments; the start rule is `root`.
// Left recursion is rejected (the recognizer is top-down).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ember::grammar {

struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool test(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

enum class ElemKind : uint8_t { kEnd, kBytes, kRef };

struct Elem {
  ElemKind kind = ElemKind::kEnd;
  uint32_t arg = 0;  // kBytes: index into byte_sets; kRef: rule id
};

struct Grammar {
  std::vector<Elem> elems;                  // alternatives back to back, each ending with kEnd
  std::vector<std::vector<uint32_t>> rules; // rule id -> start positions of its alternatives in elems
  std::vector<std::string> rule_names;      // for messages
  std::vector<ByteSet> byte_sets;
  uint32_t root = 0;
};

// Limits on what a request may compile (a hostile grammar must not exhaust memory).
constexpr size_t kMaxGrammarElems = size_t{1} << 20;
constexpr int kMaxRepeat = 4096;  // largest m or n in {m,n}

// Parses GBNF text (the start rule is `root`). Errors name the line and what is wrong.
Result<Grammar> parse_gbnf(std::string_view text);


}  // namespace ember::grammar
