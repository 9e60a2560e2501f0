// Jinja2 filters and tests for the chat-template interpreter. Argument names
// and defaults follow jinja2.filters / jinja2.tests; `tojson` is the
// transformers override (ensure_ascii=False, no HTML escaping, indent,
// separators and sort_keys supported).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "template/builtins.h"
#include "template/interpreter.h"
#include "template/pystr.h"

namespace ember::tmpl {
namespace {

using FilterFn = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);

Result<int64_t> py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return int64_t{0};
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kArray: return static_cast<int64_t>(v.arr().items.size());
    case Value::Kind::kObject:
      if (!v.is_namespace()) return static_cast<int64_t>(v.obj().items.size());
      [[fallthrough]];
    default: return Status::errorf("TypeError: object of type '{}' has no len()", v.type_name());
  }
}

// jinja's make_attrgetter: dotted path, integer parts index sequences.
Value get_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is_undefined()) return cur;
    if (numeric && cur.is_array()) {
      size_t idx = std::strtoull(part.c_str(), nullptr, 10);
      cur = idx < cur.arr().items.size() ? cur.arr().items[idx] : Value::undefined();
    } else if ((cur.is_object() || cur.is_namespace()) && cur.obj().find(std::string_view(part))) {
      cur = *cur.obj().find(std::string_view(part));
    } else {
      cur = get_attribute(cur, part);
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key transform for case-insensitive comparisons.
Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(pystr::lower(v.str()));
  return v;
}

Status sort_values(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status err;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (!err.is_ok()) return false;
    auto lt = reverse ? values_less(keys[y], keys[x]) : values_less(keys[x], keys[y]);
    if (!lt.is_ok()) {
      err = lt.status();
      return false;
    }
    return *lt;
  });
  if (!err.is_ok()) return err;
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
  return Status::ok();
}

// ---------------------------------------------------------------- filters

Result<Value> f_trim(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("trim", a, {"chars"}, p));
  std::optional<std::string> chars;
  if (p[0].is_string()) chars = p[0].str();
  return Value(pystr::strip(v.to_str(), chars, true, true));
}

Result<Value> f_length(Interpreter&, const Value& v, CallArgs&) {
  auto n = py_len(v);
  if (!n.is_ok()) return n.status();
  return Value(*n);
}

Result<Value> f_upper(Interpreter&, const Value& v, CallArgs&) { return Value(pystr::upper(v.to_str())); }
Result<Value> f_lower(Interpreter&, const Value& v, CallArgs&) { return Value(pystr::lower(v.to_str())); }
Result<Value> f_title(Interpreter&, const Value& v, CallArgs&) { return Value(pystr::jinja_title(v.to_str())); }
Result<Value> f_capitalize(Interpreter&, const Value& v, CallArgs&) { return Value(pystr::capitalize(v.to_str())); }
Result<Value> f_string(Interpreter&, const Value& v, CallArgs&) { return Value(v.to_str()); }
Result<Value> f_safe(Interpreter&, const Value& v, CallArgs&) { return Value(v.to_str()); }
Result<Value> f_escape(Interpreter&, const Value& v, CallArgs&) { return Value(pystr::html_escape(v.to_str())); }

Result<Value> f_replace(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("replace", a, {"old", "new", "count"}, p));
  return Value(pystr::replace(v.to_str(), p[0].to_str(), p[1].to_str(),
                              (p[2].is_int() || p[2].is_bool()) ? p[2].as_int() : -1));
}

Result<Value> f_tojson(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}, p));
  JsonOptions o;
  o.ensure_ascii = p[0].truthy();
  if (p[1].is_int()) {
    o.has_indent = true;
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, p[1].as_int())), ' ');
  } else if (p[1].is_string()) {
    o.has_indent = true;
    o.indent = p[1].str();
  } else if (!p[1].is_undefined() && !p[1].is_none()) {
    return Status::errorf("TypeError: indent must be int or str, not {}", p[1].type_name());
  }
  if (o.has_indent) o.item_sep = ",";
  if (p[2].is_array() && p[2].arr().items.size() == 2) {
    o.item_sep = p[2].arr().items[0].to_str();
    o.key_sep = p[2].arr().items[1].to_str();
  }
  o.sort_keys = p[3].truthy();
  auto s = to_json(v, o);
  if (!s.is_ok()) return s.status();
  return Value(std::move(s.value()));
}

Result<Value> f_first(Interpreter&, const Value& v, CallArgs&) {
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  if (items->empty()) return Value::undefined("UndefinedError: No first item, sequence was empty.");
  return items->front();
}

Result<Value> f_last(Interpreter&, const Value& v, CallArgs&) {
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  if (items->empty()) return Value::undefined("UndefinedError: No last item, sequence was empty.");
  return items->back();
}

Result<Value> f_join(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("join", a, {"d", "attribute"}, p));
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  std::string sep = p[0].is_undefined() ? "" : p[0].to_str();
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    if (i) out += sep;
    const Value& it = (*items)[i];
    out += p[1].is_undefined() ? it.to_str() : get_path(it, p[1].to_str()).to_str();
  }
  return Value(std::move(out));
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("default", a, {"default_value", "boolean"}, p));
  Value dflt = p[0].is_undefined() ? Value("") : p[0];
  if (v.is_undefined() || (p[1].truthy() && !v.truthy())) return dflt;
  return v;
}

Result<Value> f_list(Interpreter&, const Value& v, CallArgs&) {
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  return Value::array(std::move(items.value()));
}

Result<Value> f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::array();
  if (!v.is_object()) return Status::error("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& kv : v.obj().items) out.push_back(Value::array({kv.first, kv.second}, true));
  return Value::array(std::move(out));
}

Result<Value> f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("dictsort", a, {"case_sensitive", "by", "reverse"}, p));
  if (!v.is_object()) return Status::error("TypeError: dictsort expects a mapping");
  bool by_value = p[1].is_string() && p[1].str() == "value";
  if (p[1].is_string() && !by_value && p[1].str() != "key") {
    return Status::error("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items, keys;
  for (const auto& kv : v.obj().items) {
    items.push_back(Value::array({kv.first, kv.second}, true));
    keys.push_back(fold_case(by_value ? kv.second : kv.first, p[0].truthy()));
  }
  EMBER_RETURN_IF_ERROR(sort_values(items, keys, p[2].truthy()));
  return Value::array(std::move(items));
}

Result<Value> f_sort(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("sort", a, {"reverse", "case_sensitive", "attribute"}, p));
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  std::vector<Value> keys;
  for (const auto& it : *items) {
    keys.push_back(fold_case(p[2].is_undefined() ? it : get_path(it, p[2].to_str()), p[1].truthy()));
  }
  EMBER_RETURN_IF_ERROR(sort_values(*items, keys, p[0].truthy()));
  return Value::array(std::move(items.value()));
}

Result<Value> f_unique(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("unique", a, {"case_sensitive", "attribute"}, p));
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  std::vector<Value> out, seen;
  for (const auto& it : *items) {
    Value key = fold_case(p[1].is_undefined() ? it : get_path(it, p[1].to_str()), p[0].truthy());
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); });
    if (!dup) {
      seen.push_back(key);
      out.push_back(it);
    }
  }
  return Value::array(std::move(out));
}

Result<Value> min_max(const Value& v, CallArgs& a, bool want_max) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("min", a, {"case_sensitive", "attribute"}, p));
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  if (items->empty()) return Value::undefined(std::string("UndefinedError: No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items->size(); ++i) {
    const Value& it = (*items)[i];
    Value key = fold_case(p[1].is_undefined() ? it : get_path(it, p[1].to_str()), p[0].truthy());
    if (i == 0) {
      best_key = key;
      continue;
    }
    auto lt = want_max ? values_less(best_key, key) : values_less(key, best_key);
    if (!lt.is_ok()) return lt.status();
    if (*lt) {
      best = i;
      best_key = key;
    }
  }
  return (*items)[best];
}
Result<Value> f_min(Interpreter&, const Value& v, CallArgs& a) { return min_max(v, a, false); }
Result<Value> f_max(Interpreter&, const Value& v, CallArgs& a) { return min_max(v, a, true); }

// The text int() / float() convert: surrounding white space stripped and
// '_' digit separators dropped (Python accepts "1_000").
std::string number_text(const std::string& s) {
  std::string digits;
  for (char c : pystr::strip(s, std::nullopt, true, true)) {
    if (c != '_') digits += c;
  }
  return digits;
}

Result<Value> f_int(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("int", a, {"default", "base"}, p));
  Value dflt = p[0].is_undefined() ? Value(0) : p[0];
  int base = p[1].is_int() ? static_cast<int>(p[1].as_int()) : 10;
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    const std::string digits = number_text(v.str());
    if (!digits.empty()) {
      errno = 0;
      char* end = nullptr;
      long long r = std::strtoll(digits.c_str(), &end, base);
      if (errno == 0 && end && *end == '\0') return Value(static_cast<int64_t>(r));
      end = nullptr;
      double d = std::strtod(digits.c_str(), &end);
      if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
    }
  }
  return dflt;
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("float", a, {"default"}, p));
  Value dflt = p[0].is_undefined() ? Value(0.0) : p[0];
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string digits = number_text(v.str());
    if (!digits.empty()) {
      char* end = nullptr;
      double d = std::strtod(digits.c_str(), &end);
      if (end && *end == '\0') return Value(d);
    }
  }
  return dflt;
}

Result<Value> f_indent(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("indent", a, {"width", "first", "blank"}, p));
  std::string ind = p[0].is_string() ? p[0].str()
                                     : std::string(static_cast<size_t>(std::max<int64_t>(0, p[0].is_undefined() ? 4 : p[0].as_int())), ' ');
  std::vector<std::string> lines = pystr::splitlines(v.to_str() + "\n", false);
  std::string rv;
  if (p[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  if (p[1].truthy()) rv = ind + rv;
  return Value(std::move(rv));
}

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  return Status::errorf("TypeError: bad operand type for abs(): '{}'", v.type_name());
}

Result<Value> f_round(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("round", a, {"precision", "method"}, p));
  int64_t prec = p[0].is_undefined() ? 0 : p[0].as_int();
  std::string method = p[1].is_string() ? p[1].str() : "common";
  if (!v.is_number()) return Status::errorf("TypeError: type {} doesn't define __round__ method", v.type_name());
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)), v.as_double());
    return Value(std::strtod(buf, nullptr));
  }
  if (method != "ceil" && method != "floor") {
    return Status::error("FilterArgumentError: method must be common, ceil or floor");
  }
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Result<Value> f_reverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value(utf8_encode(cps));
  }
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  std::reverse(items->begin(), items->end());
  return Value::array(std::move(items.value()));
}

Result<Value> f_center(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("center", a, {"width"}, p));
  return Value(pystr::pad(v.to_str(), p[0].is_undefined() ? 80 : p[0].as_int(), " ", 0));
}

Result<Value> f_format(Interpreter&, const Value& v, CallArgs& a) {
  auto s = a.kw.empty() ? pystr::percent_format(v.to_str(), a.pos) : pystr::format(v.to_str(), a);
  if (!s.is_ok()) return s.status();
  return Value(std::move(s.value()));
}

Result<Value> f_sum(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("sum", a, {"attribute", "start"}, p));
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  Value acc = p[1].is_undefined() ? Value(0) : p[1];
  for (const auto& it : *items) {
    auto r = binary_op("+", acc, p[0].is_undefined() ? it : get_path(it, p[0].to_str()));
    if (!r.is_ok()) return r;
    acc = std::move(r.value());
  }
  return acc;
}

Result<Value> f_attr(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> p;
  EMBER_RETURN_IF_ERROR(bind_args("attr", a, {"name"}, p));
  std::string name = p[0].to_str();
  // Python getattr only: dict items are not attributes.
  if (v.is_object() && v.obj().find(std::string_view(name)) &&
      !(name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy")) {
    return Value::undefined(fmt::format("UndefinedError: 'dict object' has no attribute '{}'", name));
  }
  return get_attribute(v, name);
}

Result<Value> select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool select) {
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) return Status::error("TypeError: Missing parameter for attribute name");
    attr = a.pos[0].to_str();
    k = 1;
  }
  std::string test;
  if (k < a.pos.size()) test = a.pos[k++].to_str();
  CallArgs targs;
  targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
  targs.kw = a.kw;
  std::vector<Value> out;
  for (const auto& it : *items) {
    Value subject = by_attr ? get_path(it, attr) : it;
    bool ok;
    if (test.empty()) {
      ok = subject.truthy();
    } else {
      CallArgs copy = targs;
      auto r = apply_test(in, test, subject, copy);
      if (!r.is_ok()) return r.status();
      ok = *r;
    }
    if (ok == select) out.push_back(it);
  }
  return Value::array(std::move(out));
}
Result<Value> f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Result<Value> f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Result<Value> f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Result<Value> f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Result<Value> f_map(Interpreter& in, const Value& v, CallArgs& a) {
  auto items = iterate(v);
  if (!items.is_ok()) return items.status();
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& kv : a.kw) {
    if (kv.first == "attribute") attribute = &kv.second;
    else if (kv.first == "default") dflt = &kv.second;
  }
  if (a.pos.empty() && attribute) {
    for (const auto& it : *items) {
      Value r = get_path(it, attribute->to_str());
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return Value::array(std::move(out));
  }
  if (a.pos.empty()) return Status::error("FilterArgumentError: map requires a filter argument");
  std::string filter = a.pos[0].to_str();
  for (const auto& it : *items) {
    CallArgs fa;
    fa.pos.assign(a.pos.begin() + 1, a.pos.end());
    fa.kw = a.kw;
    auto r = apply_filter(in, filter, it, fa);
    if (!r.is_ok()) return r;
    out.push_back(std::move(r.value()));
  }
  return Value::array(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"trim", f_trim},         {"length", f_length},       {"count", f_length},
      {"upper", f_upper},       {"lower", f_lower},         {"title", f_title},
      {"capitalize", f_capitalize}, {"string", f_string},   {"safe", f_safe},
      {"escape", f_escape},     {"e", f_escape},            {"forceescape", f_escape},
      {"replace", f_replace},   {"tojson", f_tojson},       {"first", f_first},
      {"last", f_last},         {"join", f_join},           {"default", f_default},
      {"d", f_default},         {"list", f_list},           {"items", f_items},
      {"dictsort", f_dictsort}, {"sort", f_sort},           {"unique", f_unique},
      {"min", f_min},           {"max", f_max},             {"int", f_int},
      {"float", f_float},       {"indent", f_indent},       {"abs", f_abs},
      {"round", f_round},       {"reverse", f_reverse},     {"center", f_center},
      {"format", f_format},     {"sum", f_sum},             {"attr", f_attr},
      {"select", f_select},     {"reject", f_reject},       {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr}, {"map", f_map},
  };
  return table;
}

// ---------------------------------------------------------------- tests

Result<bool> arg0(const CallArgs& a, const char* name, Value& out) {
  if (a.pos.empty()) return Status::errorf("TypeError: test '{}' requires an argument", name);
  out = a.pos[0];
  return true;
}

Result<bool> t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
Result<bool> t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
Result<bool> t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
Result<bool> t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
Result<bool> t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
Result<bool> t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
Result<bool> t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
Result<bool> t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
Result<bool> t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
Result<bool> t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
Result<bool> t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_object(); }
Result<bool> t_iterable(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_array() || v.is_object(); }
Result<bool> t_sequence(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_array() || v.is_object(); }
Result<bool> t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_function(); }
Result<bool> t_escaped(Interpreter&, const Value& v, CallArgs&) { return false; }
Result<bool> t_upper(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && pystr::is_upper(v.str()); }
Result<bool> t_lower(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && pystr::is_lower(v.str()); }
Result<bool> t_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && has_filter(v.str()); }
Result<bool> t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && has_test(v.str()); }

Result<bool> t_odd(Interpreter&, const Value& v, CallArgs&) {
  auto r = binary_op("%", v, Value(2));
  if (!r.is_ok()) return r.status();
  return values_equal(*r, Value(1));
}
Result<bool> t_even(Interpreter&, const Value& v, CallArgs&) {
  auto r = binary_op("%", v, Value(2));
  if (!r.is_ok()) return r.status();
  return values_equal(*r, Value(0));
}
Result<bool> t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  Value n;
  EMBER_RETURN_IF_ERROR(arg0(a, "divisibleby", n).status());
  auto r = binary_op("%", v, n);
  if (!r.is_ok()) return r.status();
  return values_equal(*r, Value(0));
}
Result<bool> t_eq(Interpreter&, const Value& v, CallArgs& a) {
  Value o;
  if (!arg0(a, "eq", o).is_ok()) return Status::error("TypeError: test 'eq' requires an argument");
  return values_equal(v, o);
}
Result<bool> t_ne(Interpreter& in, const Value& v, CallArgs& a) {
  auto r = t_eq(in, v, a);
  if (!r.is_ok()) return r;
  return !*r;
}
Result<bool> cmp_test(const Value& v, CallArgs& a, bool swap, bool negate) {
  if (a.pos.empty()) return Status::error("TypeError: comparison test requires an argument");
  auto lt = swap ? values_less(a.pos[0], v) : values_less(v, a.pos[0]);
  if (!lt.is_ok()) return lt.status();
  return negate ? !*lt : *lt;
}
Result<bool> t_lt(Interpreter&, const Value& v, CallArgs& a) { return cmp_test(v, a, false, false); }
Result<bool> t_gt(Interpreter&, const Value& v, CallArgs& a) { return cmp_test(v, a, true, false); }
Result<bool> t_le(Interpreter&, const Value& v, CallArgs& a) { return cmp_test(v, a, true, true); }
Result<bool> t_ge(Interpreter&, const Value& v, CallArgs& a) { return cmp_test(v, a, false, true); }
Result<bool> t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  if (a.pos.empty()) return Status::error("TypeError: test 'sameas' requires an argument");
  const Value& o = a.pos[0];
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool() || v.is_int() || v.is_float()) return values_equal(v, o);
  return v.identity() == o.identity();
}
Result<bool> t_in(Interpreter&, const Value& v, CallArgs& a) {
  if (a.pos.empty()) return Status::error("TypeError: test 'in' requires an argument");
  const Value& seq = a.pos[0];
  if (seq.is_string()) {
    if (!v.is_string()) {
      return Status::errorf("TypeError: 'in <string>' requires string as left operand, not {}", v.type_name());
    }
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_array()) {
    for (const auto& it : seq.arr().items) {
      if (values_equal(it, v)) return true;
    }
    return false;
  }
  if (seq.is_object()) return seq.obj().find(v) != nullptr;
  if (seq.is_undefined()) return false;
  return Status::errorf("TypeError: argument of type '{}' is not iterable", seq.type_name());
}

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
      {"string", t_string},     {"number", t_number},       {"integer", t_integer},
      {"float", t_float},       {"mapping", t_mapping},     {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"escaped", t_escaped},
      {"upper", t_upper},       {"lower", t_lower},         {"filter", t_filter},
      {"test", t_test},         {"odd", t_odd},             {"even", t_even},
      {"divisibleby", t_divisibleby}, {"eq", t_eq},         {"equalto", t_eq},
      {"==", t_eq},             {"ne", t_ne},               {"!=", t_ne},
      {"lt", t_lt},             {"lessthan", t_lt},         {"<", t_lt},
      {"gt", t_gt},             {"greaterthan", t_gt},      {">", t_gt},
      {"le", t_le},             {"<=", t_le},               {"ge", t_ge},
      {">=", t_ge},             {"sameas", t_sameas},       {"in", t_in},
  };
  return table;
}

}  // namespace

bool has_filter(std::string_view name) { return filter_table().count(name) != 0; }
bool has_test(std::string_view name) { return test_table().count(name) != 0; }

Result<Value> apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  auto it = filter_table().find(name);
  if (it == filter_table().end()) return Status::errorf("TemplateAssertionError: No filter named '{}'.", name);
  return it->second(in, input, args);
}

Result<bool> apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  auto it = test_table().find(name);
  if (it == test_table().end()) return Status::errorf("TemplateAssertionError: No test named '{}'.", name);
  return it->second(in, input, args);
}

}  // namespace ember::tmpl
