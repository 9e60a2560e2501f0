// GBNF parsing into the byte-level Grammar; see grammar.h.
#include "grammar/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "grammar/grammar_builder.h"
#include "tokenizer/unicode_util.h"

namespace ember::grammar {

namespace {

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view s) : s_(s) {}

  Result<Grammar> run() {
    skip_space(true);
    while (ok_ && i_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    if (!ok_) return Status::error(err_);
    return b_.finish("root");
  }

 private:
  bool at_end() const { return i_ >= s_.size(); }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  int line() const { return 1 + static_cast<int>(std::count(s_.begin(), s_.begin() + std::min(i_, s_.size()), '\n')); }
  void fail(const std::string& what) {
    if (!ok_) return;
    ok_ = false;
    err_ = fmt::format("GBNF line {}: {}", line(), what);
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  // Skips spaces and comments; newlines only if `newline_ok`.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++i_;
      } else {
        break;
      }
    }
  }
  // At a newline outside groups: true if the next line continues the rule with '|'.
  bool continues_with_bar() {
    size_t j = i_;
    while (j < s_.size()) {
      const char c = s_[j];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++j;
      } else if (c == '#') {
        while (j < s_.size() && s_[j] != '\n') ++j;
      } else {
        break;
      }
    }
    if (j < s_.size() && s_[j] == '|') {
      i_ = j;
      return true;
    }
    return false;
  }
  std::string parse_name() {
    const size_t a = i_;
    while (!at_end() && name_char(peek())) ++i_;
    if (i_ == a) fail(fmt::format("expected a rule name at '{}'", std::string(s_.substr(i_, 12))));
    return std::string(s_.substr(a, i_ - a));
  }
  void parse_rule() {
    const std::string name = parse_name();
    if (!ok_) return;
    skip_space(false);
    if (s_.substr(i_, 3) != "::=") return fail(fmt::format("expected '::=' after rule name '{}'", name));
    i_ += 3;
    skip_space(true);
    const uint32_t id = b_.named_rule(name);
    if (b_.defined(id)) return fail(fmt::format("rule '{}' is defined twice", name));
    auto alts = parse_alternates(name, false);
    if (!ok_) return;
    b_.define(id, std::move(alts));
    if (!at_end() && peek() != '\n' && peek() != '\r')
      fail(fmt::format("unexpected '{}' after rule '{}'", peek(), name));
  }
  std::vector<Seq> parse_alternates(const std::string& name, bool nested) {
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(name, nested));
    while (ok_) {
      if (!nested && !at_end() && (peek() == '\n' || peek() == '\r') && continues_with_bar()) {
      }
      if (at_end() || peek() != '|') break;
      ++i_;
      skip_space(true);
      alts.push_back(parse_sequence(name, nested));
    }
    return alts;
  }
  uint32_t parse_escape() {
    // After the backslash.
    if (at_end()) {
      fail("unterminated escape");
      return 0;
    }
    const char c = s_[i_++];
    auto hex = [&](int n) -> uint32_t {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const char h = peek();
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) {
          fail("bad hex escape");
          return 0;
        }
        v = v * 16 + static_cast<uint32_t>(d);
        ++i_;
      }
      return v;
    };
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case '\\': return '\\';
      case '"': return '"';
      case '[': return '[';
      case ']': return ']';
      case '-': return '-';
      case '^': return '^';
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      default: fail(fmt::format("unknown escape '\\{}'", c)); return 0;
    }
  }
  // One UTF-8 character (or escape) of a literal or class.
  uint32_t parse_char() {
    if (peek() == '\\') {
      ++i_;
      return parse_escape();
    }
    const auto c0 = static_cast<unsigned char>(s_[i_]);
    int n = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) {
      fail("invalid UTF-8 in grammar");
      ++i_;
      return 0;
    }
    uint32_t cp = n == 1 ? c0 : n == 2 ? c0 & 0x1F : n == 3 ? c0 & 0x0F : c0 & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s_[i_ + k]) & 0x3F);
    i_ += n;
    return cp;
  }
  int parse_int() {
    const size_t a = i_;
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) {
        fail(fmt::format("repetition count above {}", kMaxRepeat));
        return 0;
      }
      ++i_;
    }
    if (i_ == a) fail("expected a number in '{m,n}'");
    return static_cast<int>(v);
  }
  Seq parse_sequence(const std::string& name, bool nested) {
    Seq seq;
    while (ok_ && !at_end()) {
      const char c = peek();
      Seq item;
      if (c == '"') {
        ++i_;
        std::string bytes;
        while (ok_ && !at_end() && peek() != '"') tok::utf8_append(parse_char(), &bytes);
        if (at_end()) return fail("unterminated string literal"), seq;
        ++i_;
        item = b_.literal(bytes);
        if (bytes.empty()) {
          skip_space(nested);
          continue;
        }
      } else if (c == '[') {
        ++i_;
        bool neg = false;
        if (peek() == '^') {
          neg = true;
          ++i_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (ok_ && !at_end() && peek() != ']') {
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
            ++i_;
            hi = parse_char();
          }
          if (hi < lo) return fail("class range out of order"), seq;
          ranges.push_back({lo, hi});
        }
        if (at_end()) return fail("unterminated character class"), seq;
        ++i_;
        item = b_.char_class(std::move(ranges), neg);
      } else if (c == '.') {
        ++i_;
        item = b_.char_class({}, true);
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        auto alts = parse_alternates(name, true);
        if (!ok_) return seq;
        if (peek() != ')') return fail("expected ')'"), seq;
        ++i_;
        item = b_.group(name, std::move(alts));
      } else if (name_char(c)) {
        const std::string ref = parse_name();
        item = {Elem{ElemKind::kRef, b_.named_rule(ref)}};
      } else {
        break;
      }
      skip_space(nested);
      // Quantifiers.
      while (ok_ && !at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
        const char q = s_[i_++];
        int lo = 0, hi = -1;
        if (q == '*') {
          lo = 0;
        } else if (q == '+') {
          lo = 1;
        } else if (q == '?') {
          hi = 1;
        } else {
          skip_space(true);
          lo = parse_int();
          skip_space(true);
          hi = lo;
          if (peek() == ',') {
            ++i_;
            skip_space(true);
            hi = peek() == '}' ? -1 : parse_int();
            skip_space(true);
          }
          if (peek() != '}') return fail("expected '}'"), seq;
          ++i_;
          if (hi >= 0 && hi < lo) return fail("repetition {m,n} with n < m"), seq;
        }
        item = b_.repeat(name, std::move(item), lo, hi);
        skip_space(nested);
      }
      if (b_.too_big()) return fail("grammar too large"), seq;
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  std::string_view s_;
  size_t i_ = 0;
  bool ok_ = true;
  std::string err_;
  GrammarBuilder b_;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text) { return GbnfParser(text).run(); }

}  // namespace ember::grammar
