// Value: the dynamic value type of the chat-template (Jinja2) interpreter.
// Mirrors the Python objects that jinja2 sees when transformers renders a chat
// template: None, bool, int, float, str, list/tuple, dict (insertion ordered),
// plus jinja's Undefined, namespace() objects and callables (macros, builtins,
// bound methods). Lists, dicts and namespaces have reference semantics like in
// Python; strings are immutable UTF-8 and shared.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace ember::tmpl {

class Value;
class Interpreter;

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

using NativeFn = std::function<Result<Value>(Interpreter&, CallArgs&)>;

struct Function {
  std::string name;
  NativeFn fn;
};

struct ArrayData {
  std::vector<Value> items;
  bool is_tuple = false;
};

// Insertion-ordered dict. Keys are Values (almost always strings); string keys
// are indexed for O(1) lookup.
struct ObjectData {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> str_index;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
  void set(const std::string& key, Value v);
  void set(const char* key, Value v);
  const Value* find(const char* key) const { return find(std::string_view(key)); }
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction
  };

  Value() = default;  // undefined
  Value(std::nullptr_t) : kind_(Kind::kNone) {}  // NOLINT
  Value(bool b) : kind_(Kind::kBool), b_(b) {}  // NOLINT
  Value(int i) : kind_(Kind::kInt), i_(i) {}  // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), i_(i) {}  // NOLINT
  Value(double f) : kind_(Kind::kFloat), f_(f) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  Value(std::string s);  // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT
  // Builds from JSON (object key order is preserved for ordered_json).
  Value(const nlohmann::json& j);  // NOLINT
  Value(const nlohmann::ordered_json& j);  // NOLINT

  static Value undefined(std::string hint = {});
  static Value array(std::vector<Value> items = {}, bool is_tuple = false);
  static Value object();
  static Value namespace_object();
  static Value function(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int, float or bool (Python numbers; bool is an int subclass).
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_tuple() const { return is_array() && arr().is_tuple; }
  bool is_object() const { return kind_ == Kind::kObject && !obj().is_namespace; }
  bool is_namespace() const { return kind_ == Kind::kObject && obj().is_namespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const {
    return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int());
  }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  // Hint of an undefined value ("'x' is undefined"), possibly empty.
  const std::string& undefined_hint() const;
  ArrayData& arr() const { return *static_cast<ArrayData*>(p_.get()); }
  ObjectData& obj() const { return *static_cast<ObjectData*>(p_.get()); }
  const Function& fn() const { return *static_cast<const Function*>(p_.get()); }
  const void* identity() const { return p_.get(); }

  // Python truthiness.
  bool truthy() const;
  // Python str() (undefined -> ""), and repr().
  std::string to_str() const;
  std::string repr() const;
  // Python type name for error messages ("int", "str", "dict", ...).
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> p_;
};

// Python == and < semantics. `less` fails for unorderable types.
bool values_equal(const Value& a, const Value& b);
Result<bool> values_less(const Value& a, const Value& b);

// Python float repr (shortest round-trip, '1e+16', '1.5e-07', 'inf').
std::string float_repr(double d);
// Python repr of a str ('abc' or "it's").
std::string string_repr(std::string_view s);

// json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...).
struct JsonOptions {
  bool has_indent = false;
  std::string indent;  // the indent unit (spaces or a custom string)
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
Result<std::string> to_json(const Value& v, const JsonOptions& opts);

// UTF-8 helpers: decode to code points (invalid bytes map to U+FFFD), encode.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);
// Python str.isspace() for one code point.
bool py_isspace(char32_t c);

}  // namespace ember::tmpl
