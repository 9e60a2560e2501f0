// Python object model for the template interpreter: iteration, arithmetic
// operators, attribute lookup with str/dict/list methods (mutating methods are
// refused like in jinja2's ImmutableSandboxedEnvironment), and the globals
// transformers exposes. Filters and tests are in filters.cpp.
#include "template/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "template/interpreter.h"
#include "template/pystr.h"

namespace ember::tmpl {

Status bind_args(std::string_view fname, const CallArgs& a, std::initializer_list<const char*> names,
                 std::vector<Value>& out) {
  out.assign(names.size(), Value::undefined());
  if (a.pos.size() > names.size()) {
    return Status::errorf("TypeError: {}() takes at most {} argument(s) ({} given)", fname, names.size(),
                          a.pos.size());
  }
  for (size_t i = 0; i < a.pos.size(); ++i) out[i] = a.pos[i];
  for (const auto& kv : a.kw) {
    size_t idx = 0;
    for (const char* n : names) {
      if (kv.first == n) break;
      ++idx;
    }
    if (idx == names.size()) {
      return Status::errorf("TypeError: {}() got an unexpected keyword argument '{}'", fname, kv.first);
    }
    if (idx < a.pos.size()) return Status::errorf("TypeError: {}() got multiple values for argument '{}'", fname, kv.first);
    out[idx] = kv.second;
  }
  return Status::ok();
}

// ---------------------------------------------------------------- iteration

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>{};
    case Value::Kind::kArray: return v.arr().items;
    case Value::Kind::kObject: {
      if (v.is_namespace()) return Status::error("TypeError: 'Namespace' object is not iterable");
      std::vector<Value> keys;
      keys.reserve(v.obj().items.size());
      for (const auto& kv : v.obj().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: return Status::errorf("TypeError: '{}' object is not iterable", v.type_name());
  }
}

// ---------------------------------------------------------------- operators

namespace {

Status unsupported(std::string_view op, const Value& a, const Value& b) {
  return Status::errorf("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                        b.type_name());
}

Result<Value> repeat(const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    if (seq.str().size() * static_cast<size_t>(times) > (64u << 20)) return Status::error("MemoryError: string too large");
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const auto& items = seq.arr().items;
  if (items.size() * static_cast<size_t>(times) > (1u << 24)) return Status::error("MemoryError: list too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::array(std::move(out), seq.is_tuple());
}

double py_float_mod(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod;
}

double py_float_floordiv(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div != 0.0) {
    double fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
  }
  return std::copysign(0.0, a / b);
}

}  // namespace

Result<Value> binary_op(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  const bool nums = a.is_number() && b.is_number();
  const bool flt = nums && (a.is_float() || b.is_float());
  if (op == "+") {
    if (nums) {
      if (flt) return Value(a.as_double() + b.as_double());
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return Status::error("OverflowError: integer overflow");
      return Value(r);
    }
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.arr().items;
      items.insert(items.end(), b.arr().items.begin(), b.arr().items.end());
      return Value::array(std::move(items), a.is_tuple());
    }
    if (a.is_string()) return Status::errorf("TypeError: can only concatenate str (not \"{}\") to str", b.type_name());
    if (a.is_array()) {
      return Status::errorf("TypeError: can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(),
                            a.type_name());
    }
    return unsupported("+", a, b);
  }
  if (op == "-") {
    if (!nums) return unsupported("-", a, b);
    if (flt) return Value(a.as_double() - b.as_double());
    int64_t r;
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return Status::error("OverflowError: integer overflow");
    return Value(r);
  }
  if (op == "*") {
    if (nums) {
      if (flt) return Value(a.as_double() * b.as_double());
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return Status::error("OverflowError: integer overflow");
      return Value(r);
    }
    if ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    return unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) return unsupported("/", a, b);
    if (b.as_double() == 0.0) return Status::error("ZeroDivisionError: division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      std::vector<Value> args = b.is_tuple() ? b.arr().items : std::vector<Value>{b};
      auto s = pystr::percent_format(a.str(), args);
      if (!s.is_ok()) return s.status();
      return Value(std::move(s.value()));
    }
    if (!nums) return unsupported(op, a, b);
    if (flt) {
      if (b.as_double() == 0.0) {
        return Status::error(op == "//" ? "ZeroDivisionError: float floor division by zero"
                                        : "ZeroDivisionError: float modulo");
      }
      return Value(op == "//" ? py_float_floordiv(a.as_double(), b.as_double())
                              : py_float_mod(a.as_double(), b.as_double()));
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) return Status::error("ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return Status::error("OverflowError: integer overflow");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q -= 1;
      r += y;
    }
    return Value(op == "//" ? q : r);
  }
  if (op == "**") {
    if (!nums) return unsupported("** or pow()", a, b);
    if (!flt && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(r, base, &r)) return Status::error("OverflowError: integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return Status::error("OverflowError: integer overflow");
      }
      return Value(r);
    }
    if (a.as_double() == 0.0 && b.as_double() < 0) {
      return Status::error("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  return Status::errorf("unknown operator '{}'", op);
}

// ---------------------------------------------------------------- methods

namespace {

std::optional<std::string> opt_str(const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return v.to_str();
}

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.emplace_back(p);
  return Value::array(std::move(items));
}

int64_t opt_int(const Value& v, int64_t dflt) { return (v.is_int() || v.is_bool()) ? v.as_int() : dflt; }

Result<Value> str_method(const Value& self, const std::string& name, CallArgs& a) {
  const std::string& s = self.str();
  std::vector<Value> p;
  auto bind = [&](std::initializer_list<const char*> names) { return bind_args(name, a, names, p); };
  auto need_str = [&](const Value& v, const char* what) -> Status {
    if (!v.is_string()) return Status::errorf("TypeError: {} arg must be str, not {}", what, v.type_name());
    return Status::ok();
  };
  if (name == "startswith" || name == "endswith") {
    EMBER_RETURN_IF_ERROR(bind({"prefix"}));
    std::vector<Value> cands = p[0].is_tuple() ? p[0].arr().items : std::vector<Value>{p[0]};
    for (const auto& c : cands) {
      EMBER_RETURN_IF_ERROR(need_str(c, name.c_str()));
      const std::string& x = c.str();
      bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                      : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    EMBER_RETURN_IF_ERROR(bind({"chars"}));
    return Value(pystr::strip(s, opt_str(p[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    EMBER_RETURN_IF_ERROR(bind({"sep", "maxsplit"}));
    auto sep = opt_str(p[0]);
    if (sep && sep->empty()) return Status::error("ValueError: empty separator");
    int64_t maxsplit = opt_int(p[1], -1);
    return str_list(name == "split" ? pystr::split(s, sep, maxsplit) : pystr::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    EMBER_RETURN_IF_ERROR(bind({"keepends"}));
    return str_list(pystr::splitlines(s, p[0].truthy()));
  }
  if (name == "upper") return Value(pystr::upper(s));
  if (name == "lower" || name == "casefold") return Value(pystr::lower(s));
  if (name == "title") return Value(pystr::title(s));
  if (name == "capitalize") return Value(pystr::capitalize(s));
  if (name == "replace") {
    EMBER_RETURN_IF_ERROR(bind({"old", "new", "count"}));
    EMBER_RETURN_IF_ERROR(need_str(p[0], "replace()"));
    EMBER_RETURN_IF_ERROR(need_str(p[1], "replace()"));
    return Value(pystr::replace(s, p[0].str(), p[1].str(), opt_int(p[2], -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    EMBER_RETURN_IF_ERROR(bind({"sub"}));
    EMBER_RETURN_IF_ERROR(need_str(p[0], name.c_str()));
    int64_t r = pystr::find(s, p[0].str(), name[0] == 'r');
    if (r < 0 && (name == "index" || name == "rindex")) return Status::error("ValueError: substring not found");
    return Value(r);
  }
  if (name == "count") {
    EMBER_RETURN_IF_ERROR(bind({"sub"}));
    EMBER_RETURN_IF_ERROR(need_str(p[0], "count()"));
    return Value(pystr::count(s, p[0].str()));
  }
  if (name == "format") {
    auto r = pystr::format(s, a);
    if (!r.is_ok()) return r.status();
    return Value(std::move(r.value()));
  }
  if (name == "join") {
    EMBER_RETURN_IF_ERROR(bind({"iterable"}));
    auto items = iterate(p[0]);
    if (!items.is_ok()) return items.status();
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      const Value& it = (*items)[i];
      if (!it.is_string()) {
        return Status::errorf("TypeError: sequence item {}: expected str instance, {} found", i, it.type_name());
      }
      if (i) out += s;
      out += it.str();
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isnumeric" ||
      name == "isdecimal") {
    std::u32string cps = utf8_decode(s);
    if (cps.empty()) return Value(false);
    for (char32_t c : cps) {
      bool digit = c >= '0' && c <= '9';
      bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= 0x80 && (pystr::upper(utf8_encode(std::u32string(1, c))) !=
                                      pystr::lower(utf8_encode(std::u32string(1, c)))));
      bool ok = name == "isspace" ? py_isspace(c) : name == "isalpha" ? alpha : name == "isalnum" ? (alpha || digit) : digit;
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "isupper") return Value(pystr::is_upper(s));
  if (name == "islower") return Value(pystr::is_lower(s));
  if (name == "center" || name == "ljust" || name == "rjust") {
    EMBER_RETURN_IF_ERROR(bind({"width", "fillchar"}));
    std::string fill = p[1].is_string() ? p[1].str() : " ";
    return Value(pystr::pad(s, opt_int(p[0], 0), fill, name == "ljust" ? -1 : name == "rjust" ? 1 : 0));
  }
  if (name == "zfill") {
    EMBER_RETURN_IF_ERROR(bind({"width"}));
    std::string body = s, sign;
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
      sign = body.substr(0, 1);
      body = body.substr(1);
    }
    return Value(sign + pystr::pad(body, opt_int(p[0], 0) - static_cast<int64_t>(sign.size()), "0", 1));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    EMBER_RETURN_IF_ERROR(bind({"affix"}));
    EMBER_RETURN_IF_ERROR(need_str(p[0], name.c_str()));
    const std::string& x = p[0].str();
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value(s.substr(0, s.size() - x.size()));
    }
    return self;
  }
  if (name == "partition" || name == "rpartition") {
    EMBER_RETURN_IF_ERROR(bind({"sep"}));
    EMBER_RETURN_IF_ERROR(need_str(p[0], name.c_str()));
    const std::string& sep = p[0].str();
    size_t j = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (j == std::string::npos) {
      return name == "partition" ? Value::array({self, Value(""), Value("")}, true)
                                 : Value::array({Value(""), Value(""), self}, true);
    }
    return Value::array({Value(s.substr(0, j)), p[0], Value(s.substr(j + sep.size()))}, true);
  }
  return Status::errorf("UndefinedError: 'str object' has no attribute '{}'", name);
}

Result<Value> dict_method(const Value& self, const std::string& name, CallArgs& a) {
  std::vector<Value> p;
  const auto& items = self.obj().items;
  if (name == "items" || name == "keys" || name == "values") {
    EMBER_RETURN_IF_ERROR(bind_args(name, a, {}, p));
    std::vector<Value> out;
    out.reserve(items.size());
    for (const auto& kv : items) {
      if (name == "items") out.push_back(Value::array({kv.first, kv.second}, true));
      else out.push_back(name == "keys" ? kv.first : kv.second);
    }
    return Value::array(std::move(out));
  }
  if (name == "get") {
    EMBER_RETURN_IF_ERROR(bind_args(name, a, {"key", "default"}, p));
    if (const Value* v = self.obj().find(p[0])) return *v;
    return p[1].is_undefined() ? Value(nullptr) : p[1];
  }
  if (name == "copy") {
    Value out = Value::object();
    for (const auto& kv : items) out.obj().set(kv.first, kv.second);
    return out;
  }
  return Status::errorf("UndefinedError: 'dict object' has no attribute '{}'", name);
}

Result<Value> list_method(const Value& self, const std::string& name, CallArgs& a) {
  std::vector<Value> p;
  const auto& items = self.arr().items;
  if (name == "count") {
    EMBER_RETURN_IF_ERROR(bind_args(name, a, {"value"}, p));
    int64_t n = 0;
    for (const auto& it : items) n += values_equal(it, p[0]);
    return Value(n);
  }
  if (name == "index") {
    EMBER_RETURN_IF_ERROR(bind_args(name, a, {"value"}, p));
    for (size_t i = 0; i < items.size(); ++i) {
      if (values_equal(items[i], p[0])) return Value(static_cast<int64_t>(i));
    }
    return Status::errorf("ValueError: {} is not in list", p[0].repr());
  }
  if (name == "copy") return Value::array(items, self.is_tuple());
  return Status::errorf("UndefinedError: '{} object' has no attribute '{}'", self.type_name(), name);
}

bool in_list(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value bound(const Value& self, const std::string& name,
            Result<Value> (*impl)(const Value&, const std::string&, CallArgs&)) {
  return Value::function(name, [self, name, impl](Interpreter&, CallArgs& a) { return impl(self, name, a); });
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name,
                                      obj.type_name()));
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  auto missing = [&] {
    return Value::undefined(fmt::format("UndefinedError: '{} object' has no attribute '{}'", obj.type_name(), name));
  };
  if (!name.empty() && name[0] == '_') return missing();
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (in_list(name, {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines",
                         "upper", "lower", "casefold", "title", "capitalize", "replace", "find", "rfind", "index",
                         "rindex", "count", "format", "join", "isdigit", "isalpha", "isalnum", "isspace",
                         "isnumeric", "isdecimal", "isupper", "islower", "center", "ljust", "rjust", "zfill",
                         "removeprefix", "removesuffix", "partition", "rpartition"})) {
        return bound(obj, name, str_method);
      }
      return missing();
    case Value::Kind::kObject:
      if (obj.is_namespace()) {
        if (const Value* v = obj.obj().find(std::string_view(name))) return *v;
        return missing();
      }
      if (in_list(name, {"items", "keys", "values", "get", "copy"})) return bound(obj, name, dict_method);
      if (in_list(name, {"pop", "popitem", "setdefault", "update", "clear"})) return unsafe(obj, name);
      if (const Value* v = obj.obj().find(std::string_view(name))) return *v;
      return missing();
    case Value::Kind::kArray:
      if (in_list(name, {"count", "index"}) || (name == "copy" && !obj.is_tuple())) {
        return bound(obj, name, list_method);
      }
      if (!obj.is_tuple() && in_list(name, {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"})) {
        return unsafe(obj, name);
      }
      return missing();
    default: return missing();
  }
}

// ---------------------------------------------------------------- globals

namespace {

Result<Value> build_dict(const CallArgs& a, Value out, const char* fname) {
  if (a.pos.size() > 1) return Status::errorf("TypeError: {} expected at most 1 argument, got {}", fname, a.pos.size());
  if (a.pos.size() == 1) {
    const Value& src = a.pos[0];
    if (src.is_object()) {
      for (const auto& kv : src.obj().items) out.obj().set(kv.first, kv.second);
    } else {
      auto items = iterate(src);
      if (!items.is_ok()) return items.status();
      for (const auto& it : *items) {
        if (!it.is_array() || it.arr().items.size() != 2) {
          return Status::error("ValueError: dictionary update sequence element has wrong length; 2 is required");
        }
        out.obj().set(it.arr().items[0], it.arr().items[1]);
      }
    }
  }
  for (const auto& kv : a.kw) out.obj().set(kv.first, kv.second);
  return out;
}

}  // namespace

void install_globals(Value& globals, std::optional<std::time_t> now, const RenderLimits* limits) {
  ObjectData& g = globals.obj();
  const size_t max_range = limits ? limits->max_range : 10'000'000;
  g.set("range", Value::function("range", [max_range](Interpreter&, CallArgs& a) -> Result<Value> {
    if (!a.kw.empty()) return Status::error("TypeError: range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) return Status::error("TypeError: range expected 1 to 3 arguments");
    for (const auto& v : a.pos) {
      if (!v.is_int() && !v.is_bool()) {
        return Status::errorf("TypeError: '{}' object cannot be interpreted as an integer", v.type_name());
      }
    }
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = a.pos[0].as_int();
    } else {
      start = a.pos[0].as_int();
      stop = a.pos[1].as_int();
      if (a.pos.size() == 3) step = a.pos[2].as_int();
    }
    if (step == 0) return Status::error("ValueError: range() arg 3 must not be zero");
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 mag = step > 0 ? step : -static_cast<__int128>(step);
    const __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
    if (count > static_cast<__int128>(max_range)) {
      return Status::errorf("range() larger than the limit of {} items", max_range);
    }
    std::vector<Value> out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.emplace_back(start + k * step);
    return Value::array(std::move(out));
  }));
  g.set("dict", Value::function("dict", [](Interpreter&, CallArgs& a) -> Result<Value> {
    return build_dict(a, Value::object(), "dict");
  }));
  g.set("namespace", Value::function("namespace", [](Interpreter&, CallArgs& a) -> Result<Value> {
    auto ns = build_dict(a, Value::namespace_object(), "namespace");
    if (!ns.is_ok()) return ns;
    for (const auto& kv : ns->obj().items) {
      if (kv.first.is_string() && !kv.first.str().empty() && kv.first.str()[0] == '_') {
        return Status::errorf("SecurityError: Chat templates cannot store underscore-prefixed attributes on a "
                              "namespace, but got '{}'.", kv.first.str());
      }
    }
    return ns;
  }));
  g.set("raise_exception", Value::function("raise_exception", [](Interpreter&, CallArgs& a) -> Result<Value> {
    std::string msg = a.pos.empty() ? std::string() : a.pos[0].to_str();
    return Status::errorf("TemplateError: {}", msg);
  }));
  g.set("strftime_now", Value::function("strftime_now", [now](Interpreter&, CallArgs& a) -> Result<Value> {
    std::vector<Value> p;
    EMBER_RETURN_IF_ERROR(bind_args("strftime_now", a, {"format"}, p));
    if (!p[0].is_string()) return Status::error("TypeError: strftime() argument 1 must be str");
    std::time_t t = now ? *now : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    const std::string& f = p[0].str();
    if (f.empty()) return Value("");
    for (size_t cap = 64; cap <= (1u << 20); cap *= 4) {
      std::string buf(cap, '\0');
      size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
      if (n > 0) {
        buf.resize(n);
        return Value(std::move(buf));
      }
    }
    return Value("");
  }));
}

}  // namespace ember::tmpl
