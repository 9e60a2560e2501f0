// Jinja2-compatible lexer (see lexer.h). The structure follows jinja2's
// regex-driven state machine: a root state that finds the next tag start and
// applies lstrip/'-' stripping to the preceding data, and tag states that emit
// expression tokens until the matching end delimiter (only when brackets are
// balanced, like jinja2).
#include "template/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "template/value.h"

namespace ember::tmpl {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += (c == '\n');
  return n;
}

// Python str.rstrip() (Unicode whitespace).
std::string_view py_rstrip(std::string_view s) {
  if (is_ascii(s)) {
    size_t e = s.size();
    while (e > 0 && (is_ws(s[e - 1]) || (s[e - 1] >= 0x1c && s[e - 1] <= 0x1f))) --e;
    return s.substr(0, e);
  }
  std::u32string cps = utf8_decode(s);
  size_t e = cps.size();
  while (e > 0 && py_isspace(cps[e - 1])) --e;
  // Re-measure the byte length of the kept prefix.
  return s.substr(0, utf8_encode(std::u32string_view(cps).substr(0, e)).size());
}

bool all_py_space(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t c : utf8_decode(s)) {
    if (!py_isspace(c)) return false;
  }
  return true;
}

Status lex_error(int line, const std::string& msg) {
  return Status::errorf("template syntax error at line {}: {}", line, msg);
}

// Matches jinja's D = (\d+_)*\d+ at i; returns end or npos.
size_t match_digits(std::string_view s, size_t i) {
  if (i >= s.size() || !is_digit(s[i])) return std::string_view::npos;
  size_t j = i;
  while (true) {
    while (j < s.size() && is_digit(s[j])) ++j;
    if (j + 1 < s.size() && s[j] == '_' && is_digit(s[j + 1])) {
      ++j;
      continue;
    }
    return j;
  }
}

size_t match_exponent(std::string_view s, size_t j) {
  if (j >= s.size() || (s[j] != 'e' && s[j] != 'E')) return std::string_view::npos;
  size_t k = j + 1;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
  return match_digits(s, k);
}

size_t match_float(std::string_view s, size_t i) {
  if (i > 0 && s[i - 1] == '.') return std::string_view::npos;
  size_t j = match_digits(s, i);
  if (j == std::string_view::npos) return j;
  if (j < s.size() && s[j] == '.') {
    size_t k = match_digits(s, j + 1);
    if (k != std::string_view::npos) {
      size_t e = match_exponent(s, k);
      return e != std::string_view::npos ? e : k;
    }
  }
  return match_exponent(s, j);
}

size_t match_int(std::string_view s, size_t i, int* base) {
  auto prefixed = [&](char p, auto ok) -> size_t {
    if (i + 1 >= s.size() || s[i] != '0' || (s[i + 1] != p && s[i + 1] != (p - 32))) return std::string_view::npos;
    size_t j = i + 2;
    size_t last = std::string_view::npos;
    while (true) {
      size_t k = j;
      if (k < s.size() && s[k] == '_') ++k;
      if (k < s.size() && ok(s[k])) {
        j = k + 1;
        last = j;
      } else {
        return last;
      }
    }
  };
  size_t e;
  if ((e = prefixed('b', [](char c) { return c == '0' || c == '1'; })) != std::string_view::npos) {
    *base = 2;
    return e;
  }
  if ((e = prefixed('o', [](char c) { return c >= '0' && c <= '7'; })) != std::string_view::npos) {
    *base = 8;
    return e;
  }
  if ((e = prefixed('x', [](char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); })) !=
      std::string_view::npos) {
    *base = 16;
    return e;
  }
  *base = 10;
  if (i < s.size() && s[i] >= '1' && s[i] <= '9') {
    size_t j = i + 1;
    while (true) {
      size_t k = j;
      if (k < s.size() && s[k] == '_') ++k;
      if (k < s.size() && is_digit(s[k])) j = k + 1;
      else return j;
    }
  }
  if (i < s.size() && s[i] == '0') {
    size_t j = i + 1;
    while (true) {
      size_t k = j;
      if (k < s.size() && s[k] == '_') ++k;
      if (k < s.size() && s[k] == '0') j = k + 1;
      else return j;
    }
  }
  return std::string_view::npos;
}

int hex_val(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python "unicode-escape" decoding of a string literal body.
Result<std::string> unescape(std::string_view s, int line) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c != '\\' || i + 1 >= s.size()) {
      out += c;
      continue;
    }
    char e = s[++i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'N':
        return lex_error(line, "\\N{...} escapes in string literals are not supported");
      case 'x':
      case 'u':
      case 'U': {
        int len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        char32_t cp = 0;
        for (int k = 0; k < len; ++k) {
          int h = i + 1 + k < s.size() ? hex_val(s[i + 1 + k]) : -1;
          if (h < 0) {
            return lex_error(line, fmt::format("(unicode error) 'unicodeescape' codec can't decode bytes: "
                                               "truncated \\{}XX escape", e));
          }
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) return lex_error(line, "(unicode error) illegal Unicode character");
        i += static_cast<size_t>(len);
        utf8_append(out, cp);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) {
            cp = cp * 8 + static_cast<char32_t>(s[++i] - '0');
          }
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

const char* const kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
const char kOps1[] = "+-/*%~[](){}><=.:|,;";

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source_in, const LexOptions& opts) {
  // Newline normalisation, as jinja2 does before lexing.
  std::string src;
  src.reserve(source_in.size());
  for (size_t i = 0; i < source_in.size(); ++i) {
    char c = source_in[i];
    if (c == '\r') {
      src += '\n';
      if (i + 1 < source_in.size() && source_in[i + 1] == '\n') ++i;
    } else {
      src += c;
    }
  }
  if (!opts.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  const std::string_view s = src;
  const size_t n = s.size();

  std::vector<Token> toks;
  int line = 1;
  bool line_starting = true;
  size_t pos = 0;

  auto emit = [&](Tok t, std::string text, int at_line) {
    Token tk;
    tk.type = t;
    tk.text = std::move(text);
    tk.line = at_line;
    toks.push_back(std::move(tk));
  };
  // Applies '-' / lstrip_blocks handling to data preceding a tag.
  auto strip_data = [&](std::string_view text, char sign, bool lstrip_allowed) -> std::string_view {
    if (sign == '-') return py_rstrip(text);
    if (sign != '+' && opts.lstrip_blocks && lstrip_allowed) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && all_py_space(text.substr(l_pos))) return text.substr(0, l_pos);
    }
    return text;
  };
  auto skip_ws = [&](size_t i) {
    while (i < n && is_ws(s[i])) ++i;
    return i;
  };

  while (pos < n) {
    // ---- root state: find the next tag start.
    size_t p = pos;
    while (true) {
      p = s.find('{', p);
      if (p == std::string_view::npos || p + 1 >= n) {
        p = std::string_view::npos;
        break;
      }
      char c = s[p + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++p;
    }
    if (p == std::string_view::npos) {
      emit(Tok::kData, std::string(s.substr(pos)), line);
      line += count_newlines(s.substr(pos));
      break;
    }
    const char kind = s[p + 1];
    char sign = (p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+')) ? s[p + 2] : 0;
    size_t after_open = p + 2 + (sign ? 1 : 0);

    // Raw block start: {%[-+]?\s*raw\s*(-%}\s*|%})
    size_t raw_end = std::string_view::npos;
    if (kind == '%') {
      size_t q = skip_ws(after_open);
      if (s.compare(q, 3, "raw") == 0) {
        size_t r = skip_ws(q + 3);
        if (s.compare(r, 3, "-%}") == 0) raw_end = skip_ws(r + 3);
        else if (s.compare(r, 2, "%}") == 0) raw_end = r + 2;
      }
    }

    std::string_view text = s.substr(pos, p - pos);
    std::string_view kept = strip_data(text, sign, kind != '{');
    if (!kept.empty()) emit(Tok::kData, std::string(kept), line);
    line += count_newlines(text);
    line_starting = false;

    if (raw_end != std::string_view::npos) {
      line += count_newlines(s.substr(p, raw_end - p));
      line_starting = raw_end > 0 && s[raw_end - 1] == '\n';
      // Find {%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)
      size_t q = raw_end;
      size_t body_end = std::string_view::npos, end = 0;
      char esign = 0;
      while ((q = s.find("{%", q)) != std::string_view::npos) {
        size_t r = q + 2;
        char sg = (r < n && (s[r] == '-' || s[r] == '+')) ? s[r] : 0;
        if (sg) ++r;
        r = skip_ws(r);
        if (s.compare(r, 6, "endraw") == 0) {
          size_t t = skip_ws(r + 6);
          if (s.compare(t, 3, "+%}") == 0) end = t + 3;
          else if (s.compare(t, 3, "-%}") == 0) end = skip_ws(t + 3);
          else if (s.compare(t, 2, "%}") == 0) end = t + 2 + ((opts.trim_blocks && t + 2 < n && s[t + 2] == '\n') ? 1 : 0);
          if (end) {
            body_end = q;
            esign = sg;
            break;
          }
        }
        q += 2;
      }
      if (body_end == std::string_view::npos) return lex_error(line, "Missing end of raw directive");
      std::string_view body = s.substr(raw_end, body_end - raw_end);
      std::string_view body_kept = strip_data(body, esign, true);
      if (!body_kept.empty()) emit(Tok::kData, std::string(body_kept), line);
      line += count_newlines(s.substr(raw_end, end - raw_end));
      line_starting = s[end - 1] == '\n';
      pos = end;
      continue;
    }

    if (kind == '#') {
      size_t j = s.find("#}", after_open);
      if (j == std::string_view::npos) return lex_error(line, "Missing end of comment tag");
      size_t end = j + 2;
      if (j > after_open && s[j - 1] == '-') {
        end = skip_ws(end);
      } else if (j > after_open && s[j - 1] == '+') {
        // no trimming
      } else if (opts.trim_blocks && end < n && s[end] == '\n') {
        ++end;
      }
      line += count_newlines(s.substr(p, end - p));
      line_starting = s[end - 1] == '\n';
      pos = end;
      continue;
    }

    // ---- block / variable state.
    const bool is_block = kind == '%';
    emit(is_block ? Tok::kBlockBegin : Tok::kVarBegin, "", line);
    size_t i = after_open;
    std::string balance;
    bool closed = false;
    while (i < n) {
      if (balance.empty()) {
        size_t end = 0;
        if (is_block) {
          if (s.compare(i, 3, "+%}") == 0) end = i + 3;
          else if (s.compare(i, 3, "-%}") == 0) end = skip_ws(i + 3);
          else if (s.compare(i, 2, "%}") == 0) end = i + 2 + ((opts.trim_blocks && i + 2 < n && s[i + 2] == '\n') ? 1 : 0);
        } else {
          if (s.compare(i, 3, "-}}") == 0) end = skip_ws(i + 3);
          else if (s.compare(i, 2, "}}") == 0) end = i + 2;
        }
        if (end) {
          emit(is_block ? Tok::kBlockEnd : Tok::kVarEnd, "", line);
          line += count_newlines(s.substr(i, end - i));
          line_starting = s[end - 1] == '\n';
          i = end;
          closed = true;
          break;
        }
      }
      char c = s[i];
      if (is_ws(c)) {
        if (c == '\n') ++line;
        ++i;
        continue;
      }
      size_t e = match_float(s, i);
      if (e != std::string_view::npos) {
        std::string digits;
        for (size_t k = i; k < e; ++k) {
          if (s[k] != '_') digits += s[k];
        }
        Token tk;
        tk.type = Tok::kFloat;
        tk.text = digits;
        tk.line = line;
        tk.fval = std::strtod(digits.c_str(), nullptr);
        toks.push_back(std::move(tk));
        i = e;
        continue;
      }
      int base = 10;
      e = match_int(s, i, &base);
      if (e != std::string_view::npos) {
        std::string digits;
        for (size_t k = (base == 10 ? i : i + 2); k < e; ++k) {
          if (s[k] != '_') digits += s[k];
        }
        errno = 0;
        char* endp = nullptr;
        unsigned long long v = std::strtoull(digits.c_str(), &endp, base);
        if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
          return lex_error(line, "integer literal too large");
        }
        Token tk;
        tk.type = Tok::kInt;
        tk.text = std::string(s.substr(i, e - i));
        tk.line = line;
        tk.ival = static_cast<int64_t>(v);
        toks.push_back(std::move(tk));
        i = e;
        continue;
      }
      if (is_name_start(c)) {
        size_t j = i + 1;
        while (j < n && is_name_char(s[j])) ++j;
        emit(Tok::kName, std::string(s.substr(i, j - i)), line);
        i = j;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t j = i + 1;
        while (j < n && s[j] != c) j += (s[j] == '\\' && j + 1 < n) ? 2 : 1;
        if (j < n) {
          std::string_view body = s.substr(i + 1, j - i - 1);
          auto dec = unescape(body, line);
          if (!dec.is_ok()) return dec.status();
          emit(Tok::kString, std::move(dec.value()), line);
          line += count_newlines(body);
          i = j + 1;
          continue;
        }
        // Unterminated: falls through to the "unexpected char" error.
      }
      std::string op;
      for (const char* o2 : kOps2) {
        if (s.compare(i, 2, o2) == 0) {
          op = o2;
          break;
        }
      }
      if (op.empty() && std::strchr(kOps1, c) != nullptr) op = std::string(1, c);
      if (op.empty()) {
        std::string ch = utf8_encode(utf8_decode(s.substr(i, 4)).substr(0, 1));
        return lex_error(line, fmt::format("unexpected char {} at {}", string_repr(ch), i));
      }
      if (op == "(" || op == "[" || op == "{") {
        balance += op == "(" ? ')' : (op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) return lex_error(line, fmt::format("unexpected '{}'", op));
        char expected = balance.back();
        balance.pop_back();
        if (expected != op[0]) return lex_error(line, fmt::format("unexpected '{}', expected '{}'", op, expected));
      }
      emit(Tok::kOp, op, line);
      i += op.size();
    }
    pos = i;
    if (!closed) break;  // the parser reports the unexpected end
  }
  emit(Tok::kEof, "", line);
  return toks;
}

}  // namespace ember::tmpl
