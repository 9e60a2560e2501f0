// Value implementation: construction (incl. from JSON), Python-compatible
// str()/repr(), equality/ordering, float formatting, json.dumps and UTF-8
// helpers used across the template interpreter.
#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace ember::tmpl {

// ---------------------------------------------------------------- ObjectData

const Value* ObjectData::find(std::string_view key) const {
  auto it = str_index.find(std::string(key));
  return it == str_index.end() ? nullptr : &items[it->second].second;
}

const Value* ObjectData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& kv : items) {
    if (!kv.first.is_string() && values_equal(kv.first, key)) return &kv.second;
  }
  return nullptr;
}

void ObjectData::set(const std::string& key, Value v) {
  auto it = str_index.find(key);
  if (it != str_index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  str_index.emplace(key, items.size());
  items.emplace_back(Value(key), std::move(v));
}

void ObjectData::set(const char* key, Value v) { set(std::string(key), std::move(v)); }

void ObjectData::set(const Value& key, Value v) {
  if (key.is_string()) return set(key.str(), std::move(v));
  for (auto& kv : items) {
    if (!kv.first.is_string() && values_equal(kv.first, key)) {
      kv.second = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

// ---------------------------------------------------------------- Value

Value::Value(std::string s) : kind_(Kind::kString), p_(std::make_shared<std::string>(std::move(s))) {}

namespace {
template <typename Json>
Value from_json_impl(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value(nullptr);
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e));
      return Value::array(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value o = Value::object();
      for (auto it = j.begin(); it != j.end(); ++it) o.obj().set(it.key(), from_json_impl(it.value()));
      return o;
    }
    default: return Value(nullptr);  // binary / discarded: not representable
  }
}
}  // namespace

Value::Value(const nlohmann::json& j) : Value(from_json_impl(j)) {}
Value::Value(const nlohmann::ordered_json& j) : Value(from_json_impl(j)) {}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return p_ ? *static_cast<const std::string*>(p_.get()) : kEmpty;
}

Value Value::array(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kArray;
  auto data = std::make_shared<ArrayData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  v.p_ = std::move(data);
  return v;
}

Value Value::object() {
  Value v;
  v.kind_ = Kind::kObject;
  v.p_ = std::make_shared<ObjectData>();
  return v;
}

Value Value::namespace_object() {
  Value v = object();
  v.obj().is_namespace = true;
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.p_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kArray: return !arr().items.empty();
    case Kind::kObject: return obj().is_namespace || !obj().items.empty();
    case Kind::kFunction: return true;
  }
  EMBER_CHECK_MSG(false, "Value::truthy: not a value kind");
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kArray: return arr().is_tuple ? "tuple" : "list";
    case Kind::kObject: return obj().is_namespace ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  EMBER_CHECK_MSG(false, "Value::type_name: not a value kind");
  return "object";
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return str();
    default: return repr();
  }
}

namespace {
void repr_into(const Value& v, std::string& out, int depth) {
  if (depth > 200) {
    out += "...";
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined: break;
    case Value::Kind::kNone: out += "None"; break;
    case Value::Kind::kBool: out += v.as_bool() ? "True" : "False"; break;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); break;
    case Value::Kind::kFloat: out += float_repr(v.as_double()); break;
    case Value::Kind::kString: out += string_repr(v.str()); break;
    case Value::Kind::kArray: {
      const auto& a = v.arr();
      out += a.is_tuple ? '(' : '[';
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) out += ", ";
        repr_into(a.items[i], out, depth + 1);
      }
      if (a.is_tuple && a.items.size() == 1) out += ',';
      out += a.is_tuple ? ')' : ']';
      break;
    }
    case Value::Kind::kObject: {
      const auto& o = v.obj();
      if (o.is_namespace) out += "<Namespace ";
      out += '{';
      for (size_t i = 0; i < o.items.size(); ++i) {
        if (i) out += ", ";
        repr_into(o.items[i].first, out, depth + 1);
        out += ": ";
        repr_into(o.items[i].second, out, depth + 1);
      }
      out += '}';
      if (o.is_namespace) out += '>';
      break;
    }
    case Value::Kind::kFunction: out += "<function " + v.fn().name + ">"; break;
  }
}
}  // namespace

std::string Value::repr() const {
  std::string out;
  repr_into(*this, out, 0);
  return out;
}

// ---------------------------------------------------------------- comparisons

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kArray: {
      const auto& x = a.arr();
      const auto& y = b.arr();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kObject: {
      const auto& x = a.obj();
      const auto& y = b.obj();
      if (x.is_namespace || y.is_namespace) return a.identity() == b.identity();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& kv : x.items) {
        const Value* other = y.find(kv.first);
        if (!other || !values_equal(kv.second, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

Result<bool> values_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.arr().items;
    const auto& y = b.arr().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return values_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return Status::errorf("TypeError: '<' not supported between instances of '{}' and '{}'",
                        a.type_name(), b.type_name());
}

// ---------------------------------------------------------------- formatting

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+16"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += 'e';
    out += exp < 0 ? '-' : '+';
    int ae = exp < 0 ? -exp : exp;
    if (ae < 10) out += '0';
    out += std::to_string(ae);
    return out;
  }
  if (exp < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
    return out;
  }
  size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) {
    out += digits;
    out.append(int_len - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, int_len);
    out += '.';
    out += digits.substr(int_len);
  }
  return out;
}

namespace {
bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c >= 0x80 && c < 0xa0) return false;
  if (c == 0xad) return false;
  if (c == 0x2028 || c == 0x2029) return false;
  if ((c >= 0x200b && c <= 0x200f) || (c >= 0x202a && c <= 0x202e) || (c >= 0x2060 && c <= 0x2064)) return false;
  if (c == 0xfeff) return false;
  if (c >= 0xd800 && c <= 0xdfff) return false;
  if (c >= 0xe000 && c <= 0xf8ff) return false;  // private use
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x202f || c == 0x205f || c == 0x3000 || c == 0xa0) {
    return false;  // separators other than ASCII space are not printable in Python
  }
  return true;
}
}  // namespace

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_isprintable(c)) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += quote;
  return out;
}

// ---------------------------------------------------------------- JSON

namespace {
void json_string(std::string_view s, std::string& out, bool ensure_ascii) {
  out += '"';
  if (ensure_ascii && !is_ascii(s)) {
    for (char32_t c : utf8_decode(s)) {
      char buf[16];
      if (c < 0x80) {
        std::string one(1, static_cast<char>(c));
        std::string tmp;
        json_string(one, tmp, false);
        out += tmp.substr(1, tmp.size() - 2);
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
        out += buf;
      }
    }
    out += '"';
    return;
  }
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

Status json_key(const Value& k, std::string& key) {
  switch (k.kind()) {
    case Value::Kind::kString: key = k.str(); return Status::ok();
    case Value::Kind::kNone: key = "null"; return Status::ok();
    case Value::Kind::kBool: key = k.as_bool() ? "true" : "false"; return Status::ok();
    case Value::Kind::kInt: key = std::to_string(k.as_int()); return Status::ok();
    case Value::Kind::kFloat: key = float_repr(k.as_double()); return Status::ok();
    default:
      return Status::errorf("TypeError: keys must be str, int, float, bool or None, not {}", k.type_name());
  }
}

Status json_into(const Value& v, const JsonOptions& o, std::string& out, int depth) {
  if (depth > 500) return Status::error("ValueError: JSON nesting too deep");
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return Status::ok();
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok();
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return Status::ok();
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(d);
      return Status::ok();
    }
    case Value::Kind::kString: json_string(v.str(), out, o.ensure_ascii); return Status::ok();
    case Value::Kind::kArray: {
      const auto& items = v.arr().items;
      if (items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.has_indent) newline(depth + 1);
        EMBER_RETURN_IF_ERROR(json_into(items[i], o, out, depth + 1));
      }
      if (o.has_indent) newline(depth);
      out += ']';
      return Status::ok();
    }
    case Value::Kind::kObject: {
      if (v.obj().is_namespace) return Status::error("TypeError: Object of type Namespace is not JSON serializable");
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& kv : v.obj().items) {
        std::string key;
        EMBER_RETURN_IF_ERROR(json_key(kv.first, key));
        entries.emplace_back(std::move(key), &kv.second);
      }
      if (entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.has_indent) newline(depth + 1);
        json_string(entries[i].first, out, o.ensure_ascii);
        out += o.key_sep;
        EMBER_RETURN_IF_ERROR(json_into(*entries[i].second, o, out, depth + 1));
      }
      if (o.has_indent) newline(depth);
      out += '}';
      return Status::ok();
    }
    case Value::Kind::kUndefined:
      return Status::error("TypeError: Object of type Undefined is not JSON serializable");
    case Value::Kind::kFunction:
      return Status::error("TypeError: Object of type function is not JSON serializable");
  }
  return Status::ok();
}
}  // namespace

Result<std::string> to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  EMBER_RETURN_IF_ERROR(json_into(v, opts, out, 0));
  return out;
}

// ---------------------------------------------------------------- UTF-8

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    char32_t cp = 0xFFFD;
    size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c >> 5) == 0x6) {
      len = 2;
    } else if ((c >> 4) == 0xE) {
      len = 3;
    } else if ((c >> 3) == 0x1E) {
      len = 4;
    }
    if (len > 1) {
      if (i + len > s.size()) {
        len = 1;
      } else {
        cp = c & (0xFF >> (len + 1));
        for (size_t k = 1; k < len; ++k) {
          auto cc = static_cast<unsigned char>(s[i + k]);
          if ((cc >> 6) != 0x2) {
            cp = 0xFFFD;
            len = 1;
            break;
          }
          cp = (cp << 6) | (cc & 0x3F);
        }
      }
    }
    out += cp;
    i += len;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace ember::tmpl
