// Python str semantics for the template builtins (see pystr.h).
#include "template/pystr.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cstdio>

namespace ember::tmpl::pystr {
namespace {

// A UTF-8 C locale for Unicode case mapping; created once (thread-safe static).
locale_t utf8_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (!l) l = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", static_cast<locale_t>(nullptr));
    return l;
  }();
  return loc;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), l)) : c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t l = utf8_locale();
  return l ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), l)) : c;
}

bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }

template <typename F>
std::string map_cps(std::string_view s, F f) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(f(static_cast<char32_t>(c)));
    return out;
  }
  std::u32string cps = utf8_decode(s);
  for (char32_t& c : cps) c = f(c);
  return utf8_encode(cps);
}

}  // namespace

std::string upper(std::string_view s) { return map_cps(s, to_upper); }
std::string lower(std::string_view s) { return map_cps(s, to_lower); }

std::string title(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  bool prev_cased = false;
  for (char32_t& c : cps) {
    c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = is_cased(c);
  }
  return utf8_encode(cps);
}

std::string capitalize(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_upper(cps[i]) : to_lower(cps[i]);
  return utf8_encode(cps);
}

std::string jinja_title(std::string_view s) {
  // "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s({\[<]+)", s) if w)
  std::u32string cps = utf8_decode(s);
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::u32string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) out += k == i ? to_upper(cps[k]) : to_lower(cps[k]);
    i = j;
  }
  return utf8_encode(out);
}

bool is_upper(std::string_view s) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (to_lower(c) != c) any = true;
    else if (to_upper(c) != c) return false;
  }
  return any;
}

bool is_lower(std::string_view s) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (to_upper(c) != c) any = true;
    else if (to_lower(c) != c) return false;
  }
  return any;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string cps = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_me = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    std::u32string cps = utf8_decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py_isspace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_isspace(cps[e - 1])) --e;
        out.push_back(utf8_encode(std::u32string_view(cps).substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_isspace(cps[j])) ++j;
      out.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    size_t j = s.find(*sep, pos);
    if (j == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, j - pos));
    pos = j + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    std::u32string cps = utf8_decode(s);
    size_t e = cps.size();
    while (true) {
      while (e > 0 && py_isspace(cps[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(cps[b])) ++b;
        out.push_back(utf8_encode(std::u32string_view(cps).substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(cps[b - 1])) --b;
      out.push_back(utf8_encode(std::u32string_view(cps).substr(b, e - b)));
      e = b;
    }
  } else {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t j = s.rfind(*sep, end - sep->size());
      if (j == std::string_view::npos) break;
      out.emplace_back(s.substr(j + sep->size(), end - j - sep->size()));
      end = j;
    }
    out.emplace_back(s.substr(0, end));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string cps = utf8_decode(s);
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + ((c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1);
    out.push_back(utf8_encode(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement between every code point.
    std::u32string cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t j = s.find(old, pos);
    if (j == std::string_view::npos) break;
    out.append(s.substr(pos, j - pos));
    out.append(repl);
    pos = j + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  size_t j = reverse ? s.rfind(sub) : s.find(sub);
  if (j == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, j)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::string pad(std::string_view s, int64_t width, std::string_view fill, int align) {
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  int64_t marg = width - len;
  int64_t left = align < 0 ? 0 : align > 0 ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// Applies a Python format spec [[fill]align][sign][0][width][.precision][type].
Result<std::string> apply_spec(const Value& v, std::string_view spec) {
  if (spec.empty()) return v.to_str();
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = std::string(1, spec[0]);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (!align) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') width = width * 10 + (spec[i++] - '0');
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') precision = precision * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) return Status::errorf("ValueError: Invalid format specifier '{}'", spec);
  std::string body;
  if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%' ||
      (type == 0 && v.is_float() && precision >= 0)) {
    if (!v.is_number()) return Status::errorf("ValueError: Unknown format code '{}' for object of type '{}'",
                                              type, v.type_name());
    double d = v.as_double() * (type == '%' ? 100.0 : 1.0);
    char buf[512];
    char t = (type == 0 || type == '%') ? 'f' : type;
    std::snprintf(buf, sizeof(buf), std::string("%.*").append(1, t).c_str(), precision < 0 ? 6 : precision, d);
    body = buf;
    if (type == '%') body += '%';
  } else if (type == 'd') {
    if (!v.is_int() && !v.is_bool()) return Status::errorf("ValueError: Unknown format code 'd' for object of type '{}'",
                                                           v.type_name());
    body = std::to_string(v.as_int());
  } else if (type == 0 || type == 's') {
    body = v.to_str();
    if (precision >= 0 && v.is_string()) body = utf8_encode(utf8_decode(body).substr(0, static_cast<size_t>(precision)));
  } else {
    return Status::errorf("ValueError: unsupported format code '{}'", type);
  }
  if (sign == '+' && v.is_number() && !body.empty() && body[0] != '-') body = "+" + body;
  if (sign == ' ' && v.is_number() && !body.empty() && body[0] != '-') body = " " + body;
  if (!align) align = v.is_number() ? '>' : '<';
  if (align == '=') {
    std::string prefix;
    if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
      prefix = body.substr(0, 1);
      body = body.substr(1);
    }
    return prefix + pad(body, width - static_cast<int64_t>(prefix.size()), fill, 1);
  }
  return pad(body, width, fill, align == '<' ? -1 : align == '>' ? 1 : 0);
}

}  // namespace

Result<std::string> format(std::string_view f, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return Status::error("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string_view::npos) return Status::error("ValueError: Single '{' encountered in format string");
    std::string_view field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    size_t colon = field.find(':');
    if (colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conv = 0;
    size_t bang = field.find('!');
    if (bang != std::string_view::npos) {
      if (bang + 1 < field.size()) conv = field[bang + 1];
      field = field.substr(0, bang);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_idx >= args.pos.size()) return Status::errorf("IndexError: Replacement index {} out of range", auto_idx);
      v = &args.pos[auto_idx++];
    } else if (field[0] >= '0' && field[0] <= '9') {
      size_t idx = static_cast<size_t>(std::stoul(std::string(field)));
      if (idx >= args.pos.size()) return Status::errorf("IndexError: Replacement index {} out of range", idx);
      v = &args.pos[idx];
    } else {
      for (const auto& kv : args.kw) {
        if (kv.first == field) v = &kv.second;
      }
      if (!v) return Status::errorf("KeyError: '{}'", field);
    }
    auto s = conv == 'r' ? apply_spec(Value(v->repr()), spec) : apply_spec(*v, spec);
    if (!s.is_ok()) return s;
    out += s.value();
  }
  return out;
}

Result<std::string> percent_format(std::string_view f, const std::vector<Value>& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) return Status::error("ValueError: incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    std::string spec;
    while (i < f.size() && std::string_view("-+ #0123456789.").find(f[i]) != std::string_view::npos) spec += f[i++];
    if (i >= f.size()) return Status::error("ValueError: incomplete format");
    char t = f[i];
    if (next >= args.size()) return Status::error("TypeError: not enough arguments for format string");
    const Value& v = args[next++];
    char buf[512];
    if (t == 's' || t == 'r') {
      std::string s = t == 's' ? v.to_str() : v.repr();
      std::snprintf(buf, sizeof(buf), ("%" + spec + "s").c_str(), s.c_str());
      out += (spec.empty() ? s : std::string(buf));
    } else if (t == 'd' || t == 'i') {
      if (!v.is_number()) return Status::errorf("TypeError: %{} format: a real number is required, not {}", t, v.type_name());
      std::snprintf(buf, sizeof(buf), ("%" + spec + "lld").c_str(), static_cast<long long>(v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int()));
      out += buf;
    } else if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G' || t == 'x' || t == 'X' || t == 'o') {
      if (!v.is_number()) return Status::errorf("TypeError: must be real number, not {}", v.type_name());
      if (t == 'x' || t == 'X' || t == 'o') {
        std::snprintf(buf, sizeof(buf), ("%" + spec + "ll" + t).c_str(), static_cast<long long>(v.as_int()));
      } else {
        std::snprintf(buf, sizeof(buf), ("%" + spec + t).c_str(), v.as_double());
      }
      out += buf;
    } else {
      return Status::errorf("ValueError: unsupported format character '{}'", t);
    }
  }
  if (next < args.size()) return Status::error("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace ember::tmpl::pystr
