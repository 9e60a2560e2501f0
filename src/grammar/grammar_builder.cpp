// Builds byte-level grammars; see grammar_builder.h.
#include "grammar/grammar_builder.h"

#include "tokenizer/unicode_util.h"

#include <fmt/format.h>

#include <algorithm>

namespace ember::grammar {

namespace {

using Range = std::pair<uint32_t, uint32_t>;
constexpr uint32_t kMaxCp = 0x10FFFF;

// Sorted, merged ranges with the surrogates (not encodable) removed.
std::vector<Range> normalize(std::vector<Range> r) {
  std::sort(r.begin(), r.end());
  std::vector<Range> out;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCp);
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  std::vector<Range> cut;
  for (auto [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      cut.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) cut.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) cut.push_back({0xE000, hi});
  }
  return cut;
}

std::vector<Range> complement(const std::vector<Range>& r) {
  std::vector<Range> out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// RE2's UTF-8 range splitting: [lo, hi] (same encoded length) as a union of
// products of byte ranges. Each result is one byte range per encoded byte.
void split_utf8(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  const int n = utf8_len(lo);
  if (n != utf8_len(hi)) {
    const uint32_t bound = n == 1 ? 0x7F : n == 2 ? 0x7FF : 0xFFFF;
    split_utf8(lo, bound, out);
    split_utf8(bound + 1, hi, out);
    return;
  }
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  tok::utf8_append(lo, &a);
  tok::utf8_append(hi, &b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
  out->push_back(std::move(seq));
}

}  // namespace

uint32_t GrammarBuilder::named_rule(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.push_back(name);
  alts_.emplace_back();
  defined_.push_back(false);
  by_name_[name] = id;
  return id;
}

uint32_t GrammarBuilder::new_rule(const std::string& base) {
  std::string name;
  do {
    name = fmt::format("{}_{}", base, ++n_anon_);
  } while (by_name_.count(name));
  return named_rule(name);
}

void GrammarBuilder::define(uint32_t id, std::vector<Seq> alts) {
  for (const Seq& s : alts) n_elems_ += s.size() + 1;
  alts_[id] = std::move(alts);
  defined_[id] = true;
}

Seq GrammarBuilder::group(const std::string& base, std::vector<Seq> alts) {
  if (alts.size() == 1) return std::move(alts[0]);
  const uint32_t id = new_rule(base);
  define(id, std::move(alts));
  return {Elem{ElemKind::kRef, id}};
}

uint32_t GrammarBuilder::byte_set(const ByteSet& s) {
  auto it = set_ids_.find(s.w);
  if (it != set_ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(sets_.size());
  sets_.push_back(s);
  set_ids_[s.w] = id;
  return id;
}

Seq GrammarBuilder::bytes(const ByteSet& s) { return {Elem{ElemKind::kBytes, byte_set(s)}}; }

Seq GrammarBuilder::literal(const std::string& b) {
  Seq out;
  for (char c : b) {
    ByteSet s;
    s.set(static_cast<uint8_t>(c));
    out.push_back({ElemKind::kBytes, byte_set(s)});
  }
  return out;
}

Seq GrammarBuilder::char_class(std::vector<Range> ranges, bool negated) {
  auto key = std::make_pair(ranges, negated);
  if (auto it = class_cache_.find(key); it != class_cache_.end()) return it->second;
  std::vector<Range> r = normalize(std::move(ranges));
  if (negated) r = normalize(complement(r));
  std::vector<Seq> alts;
  ByteSet ascii;
  bool any_ascii = false;
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (auto [lo, hi] : r) {
    if (lo < 0x80) {
      ascii.set_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
      any_ascii = true;
      if (hi < 0x80) continue;
      lo = 0x80;
    }
    split_utf8(lo, hi, &seqs);
  }
  if (any_ascii) alts.push_back(bytes(ascii));
  for (const auto& sq : seqs) {
    Seq alt;
    for (auto [a, b] : sq) {
      ByteSet s;
      s.set_range(a, b);
      alt.push_back({ElemKind::kBytes, byte_set(s)});
    }
    alts.push_back(std::move(alt));
  }
  Seq out;
  if (alts.empty()) {
    // An empty class matches nothing: a rule with no alternatives.
    const uint32_t id = new_rule("empty_class");
    define(id, {});
    out = {Elem{ElemKind::kRef, id}};
  } else {
    out = group("class", std::move(alts));
  }
  class_cache_[key] = out;
  return out;
}

Seq GrammarBuilder::repeat(const std::string& base, Seq item, int lo, int hi) {
  if (item.size() != 1) item = group(base, {std::move(item)});
  Seq out;
  for (int k = 0; k < lo; ++k) out.insert(out.end(), item.begin(), item.end());
  if (hi < 0) {
    const uint32_t star = new_rule(base + "_star");
    Seq again = item;
    again.push_back({ElemKind::kRef, star});
    define(star, {std::move(again), Seq{}});
    out.push_back({ElemKind::kRef, star});
  } else if (hi > lo) {
    // Nested optionals: opt_1 ::= item | ""; opt_k ::= item opt_{k-1} | "".
    uint32_t prev = 0;
    for (int k = 1; k <= hi - lo; ++k) {
      const uint32_t opt = new_rule(base + "_opt");
      Seq a = item;
      if (k > 1) a.push_back({ElemKind::kRef, prev});
      define(opt, {std::move(a), Seq{}});
      prev = opt;
    }
    out.push_back({ElemKind::kRef, prev});
  }
  n_elems_ += out.size();
  return out;
}

Result<Grammar> GrammarBuilder::finish(const std::string& root) {
  auto it = by_name_.find(root);
  if (it == by_name_.end() || !defined_[it->second]) return Status::errorf("grammar has no '{}' rule", root);
  for (size_t r = 0; r < names_.size(); ++r)
    if (!defined_[r]) return Status::errorf("grammar rule '{}' is used but not defined", names_[r]);
  const size_t n = names_.size();
  // Nullable rules (fixed point), then left-recursion: a rule reachable from
  // itself through leftmost references behind nullable prefixes.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : alts_[r]) {
        bool all = true;
        for (const Elem& e : s) all = all && e.kind == ElemKind::kRef && nullable[e.arg];
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Leftmost references behind nullable prefixes. A cycle of them loops
  // forever in a top-down recognizer when one of its references is not in
  // tail position (each turn pushes a return node); cycles of tail
  // references (x ::= y? x | "") revisit the same stack and are harmless.
  std::vector<std::vector<uint32_t>> left(n);
  std::vector<std::pair<uint32_t, uint32_t>> growing;
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : alts_[r])
      for (size_t k = 0; k < s.size(); ++k) {
        const Elem& e = s[k];
        if (e.kind != ElemKind::kRef) break;
        left[r].push_back(e.arg);
        if (k + 1 < s.size()) growing.push_back({static_cast<uint32_t>(r), e.arg});
        if (!nullable[e.arg]) break;
      }
  for (auto [r, s] : growing) {
    // Is r reachable from s?
    std::vector<bool> seen(n, false);
    std::vector<uint32_t> todo = {s};
    seen[s] = true;
    while (!todo.empty()) {
      const uint32_t x = todo.back();
      todo.pop_back();
      if (x == r)
        return Status::errorf("grammar rule '{}' is left-recursive (not supported; rewrite it right-recursively)",
                              names_[r]);
      for (uint32_t y : left[x])
        if (!seen[y]) {
          seen[y] = true;
          todo.push_back(y);
        }
    }
  }
  Grammar g;
  g.rule_names = names_;
  g.byte_sets = sets_;
  g.root = it->second;
  g.rules.resize(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : alts_[r]) {
      g.rules[r].push_back(static_cast<uint32_t>(g.elems.size()));
      g.elems.insert(g.elems.end(), s.begin(), s.end());
      g.elems.push_back({ElemKind::kEnd, 0});
    }
  if (g.elems.size() > kMaxGrammarElems) return Status::error("grammar too large");
  return g;
}

}  // namespace ember::grammar
