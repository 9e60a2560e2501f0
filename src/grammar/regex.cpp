// Regular expression -> GBNF translation; see regex.h.
#include "grammar/regex.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace ember::grammar {

namespace {

using Range = std::pair<uint32_t, uint32_t>;
using Ranges = std::vector<Range>;
constexpr uint32_t kMaxCp = 0x10FFFF;

Ranges merged(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const Range& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

Ranges complement(const Ranges& in) {
  Ranges r = merged(in), out;
  uint32_t next = 0;
  for (const Range& x : r) {
    if (x.first > next) out.push_back({next, x.first - 1});
    next = x.second + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

Ranges subtract(const Ranges& a, const Ranges& b) {
  Ranges nb = complement(b), out;
  for (const Range& x : merged(a))
    for (const Range& y : nb) {
      const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
      if (lo <= hi) out.push_back({lo, hi});
    }
  return merged(out);
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
// What a JSON string holds unescaped: no controls, quote or backslash.
const Ranges kJsonNeedsEscape = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};

std::string class_char(uint32_t c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return std::string(1, static_cast<char>(c));
  if (c <= 0xFFFF) return fmt::format("\\u{:04X}", c);
  return fmt::format("\\U{:08X}", c);
}

class RegexParser {
 public:
  RegexParser(std::string_view p, RegexMode mode) : p_(p), json_(mode == RegexMode::kJsonString) {}

  Result<std::string> run() {
    std::string out = parse_alt(true);
    if (ok_ && i_ < p_.size()) fail(fmt::format("unexpected '{}' at offset {}", p_[i_], i_));
    if (!ok_) return Status::errorf("regex '{}': {}", std::string(p_), err_);
    return out;
  }

 private:
  void fail(std::string m) {
    if (!ok_) return;
    ok_ = false;
    err_ = std::move(m);
  }
  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return i_ < p_.size() ? p_[i_] : '\0'; }

  uint32_t next_cp() {
    const auto c0 = static_cast<unsigned char>(p_[i_]);
    const int n = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) {
      fail("invalid UTF-8");
      ++i_;
      return 0;
    }
    uint32_t cp = n == 1 ? c0 : n == 2 ? c0 & 0x1F : n == 3 ? c0 & 0x0F : c0 & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(p_[i_ + k]) & 0x3F);
    i_ += n;
    return cp;
  }
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const char h = peek();
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) {
        fail("bad hexadecimal escape");
        return 0;
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }
  // After a backslash: a class escape (\d ...) into *cls, or one code point.
  bool escape(Ranges* cls, uint32_t* cp, bool in_class) {
    if (at_end()) {
      fail("pattern ends with a backslash");
      return false;
    }
    const char c = p_[i_++];
    switch (c) {
      case 'd': *cls = kDigit; return true;
      case 'D': *cls = complement(kDigit); return true;
      case 'w': *cls = kWord; return true;
      case 'W': *cls = complement(kWord); return true;
      case 's': *cls = kSpace; return true;
      case 'S': *cls = complement(kSpace); return true;
      case 'n': *cp = '\n'; return false;
      case 't': *cp = '\t'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case '0': *cp = 0; return false;
      case 'x': *cp = hex(2); return false;
      case 'u':
        if (peek() == '{') {
          ++i_;
          uint32_t v = 0;
          while (ok_ && !at_end() && peek() != '}') v = v * 16 + hex(1);
          if (peek() != '}' || v > kMaxCp) fail("bad \\u{...} escape");
          ++i_;
          *cp = v;
        } else {
          *cp = hex(4);
        }
        return false;
      case 'b':
        if (in_class) {
          *cp = '\b';
          return false;
        }
        fail("word boundaries (\\b) are not supported");
        return false;
      case 'B': fail("word boundaries (\\B) are not supported"); return false;
      case 'k': fail("named backreferences (\\k) are not supported"); return false;
      case 'p': case 'P': fail("Unicode property escapes (\\p) are not supported"); return false;
      default:
        if (c >= '1' && c <= '9') {
          fail("backreferences are not supported");
          return false;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          fail(fmt::format("unknown escape '\\{}'", c));
          return false;
        }
        --i_;
        *cp = next_cp();
        return false;
    }
  }
  // A set of code points as a GBNF expression (JSON mode: only those a
  // JSON string may hold unescaped).
  std::string emit_class(Ranges r) {
    r = merged(std::move(r));
    if (json_) r = subtract(r, kJsonNeedsEscape);
    // Surrogates cannot be encoded.
    r = subtract(r, {{0xD800, 0xDFFF}});
    if (r.empty()) {
      fail("a character class matches nothing that can be produced");
      return "";
    }
    std::string s = "[";
    for (auto [lo, hi] : r) {
      s += class_char(lo);
      if (hi > lo) s += "-" + class_char(hi);
    }
    return s + "]";
  }
  std::string emit_char(uint32_t cp) {
    std::string bytes;
    if (json_ && (cp < 0x20 || cp == '"' || cp == '\\')) {
      // The JSON escape of the character.
      switch (cp) {
        case '"': bytes = "\\\""; break;
        case '\\': bytes = "\\\\"; break;
        case '\n': bytes = "\\n"; break;
        case '\t': bytes = "\\t"; break;
        case '\r': bytes = "\\r"; break;
        case '\b': bytes = "\\b"; break;
        case '\f': bytes = "\\f"; break;
        default: bytes = fmt::format("\\u{:04x}", cp);
      }
      return gbnf_literal(bytes);
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      fail("surrogate code points cannot be matched");
      return "";
    }
    std::string u;
    if (cp < 0x80) {
      u.push_back(static_cast<char>(cp));
    } else {
      return "[" + class_char(cp) + "]";
    }
    return gbnf_literal(u);
  }
  std::string parse_class() {
    // After '['.
    bool neg = false;
    if (peek() == '^') {
      neg = true;
      ++i_;
    }
    Ranges r;
    bool first = true;
    while (ok_ && !at_end() && (peek() != ']' || first)) {
      first = false;
      Ranges cls;
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++i_;
        if (escape(&cls, &lo, true)) {
          r.insert(r.end(), cls.begin(), cls.end());
          continue;
        }
      } else {
        lo = next_cp();
      }
      uint32_t hi = lo;
      if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          if (escape(&cls, &hi, true)) {
            fail("a class escape cannot end a range");
            return "";
          }
        } else {
          hi = next_cp();
        }
        if (hi < lo) {
          fail("class range out of order");
          return "";
        }
      }
      r.push_back({lo, hi});
    }
    if (at_end()) {
      fail("unterminated character class");
      return "";
    }
    ++i_;
    return emit_class(neg ? complement(r) : r);
  }
  std::string parse_alt(bool top) {
    std::string out = parse_concat(top);
    bool multi = false;
    while (ok_ && peek() == '|') {
      ++i_;
      out += " | " + parse_concat(top);
      multi = true;
    }
    return multi ? "(" + out + ")" : out;
  }
  std::string parse_concat(bool top) {
    std::string out;
    while (ok_ && !at_end() && peek() != '|' && peek() != ')') {
      const char c = peek();
      std::string atom;
      if (c == '^') {
        ++i_;
        if (!top || i_ != 1) fail("'^' is supported only at the start of the pattern");
        continue;
      }
      if (c == '$') {
        ++i_;
        if (!top || i_ != p_.size()) fail("'$' is supported only at the end of the pattern");
        continue;
      }
      if (c == '(') {
        ++i_;
        if (peek() == '?') {
          ++i_;
          if (peek() == ':') {
            ++i_;
          } else if (peek() == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
            while (!at_end() && peek() != '>') ++i_;
            ++i_;
          } else {
            fail("lookahead and lookbehind groups are not supported");
            return out;
          }
        }
        atom = "(" + parse_alt(false) + ")";
        if (peek() != ')') {
          fail("missing ')'");
          return out;
        }
        ++i_;
      } else if (c == '[') {
        ++i_;
        atom = parse_class();
      } else if (c == '.') {
        ++i_;
        atom = emit_class(complement(kLineTerminators));
      } else if (c == '\\') {
        ++i_;
        Ranges cls;
        uint32_t cp = 0;
        atom = escape(&cls, &cp, false) ? emit_class(cls) : emit_char(cp);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (c == '{' && !quantifier_follows()) {
          ++i_;
          atom = emit_char('{');
        } else {
          fail(fmt::format("quantifier '{}' with nothing to repeat", c));
          return out;
        }
      } else {
        atom = emit_char(next_cp());
      }
      atom = quantified(std::move(atom));
      if (!out.empty()) out += " ";
      out += atom;
    }
    if (out.empty()) out = "\"\"";
    return out;
  }
  bool quantifier_follows() const {
    // '{' starts a quantifier only as {m}, {m,} or {m,n}.
    size_t j = i_ + 1;
    size_t d = 0;
    while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') ++j, ++d;
    if (d == 0) return false;
    if (j < p_.size() && p_[j] == '}') return true;
    if (j >= p_.size() || p_[j] != ',') return false;
    ++j;
    while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') ++j;
    return j < p_.size() && p_[j] == '}';
  }
  std::string quantified(std::string atom) {
    while (ok_ && !at_end()) {
      const char q = peek();
      std::string suffix;
      if (q == '*' || q == '+' || q == '?') {
        ++i_;
        suffix = std::string(1, q);
      } else if (q == '{' && quantifier_follows()) {
        const size_t j = p_.find('}', i_);
        suffix = std::string(p_.substr(i_, j - i_ + 1));
        i_ = j + 1;
      } else {
        break;
      }
      if (peek() == '?') ++i_;  // lazy: the same language
      atom = "(" + atom + ")" + suffix;
    }
    return atom;
  }

  std::string_view p_;
  bool json_;
  size_t i_ = 0;
  bool ok_ = true;
  std::string err_;
};

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
  std::string s = "\"";
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      s += '\\';
      s += ch;
    } else if (c == '\n') {
      s += "\\n";
    } else if (c == '\r') {
      s += "\\r";
    } else if (c == '\t') {
      s += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      s += fmt::format("\\x{:02X}", c);
    } else {
      s += ch;  // UTF-8 passes through
    }
  }
  return s + "\"";
}

Result<std::string> regex_to_gbnf(std::string_view pattern, RegexMode mode) { return RegexParser(pattern, mode).run(); }

}  // namespace ember::grammar
