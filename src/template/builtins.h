// Built-in filters, tests, Python object methods (str / dict / list) and
// global functions of the chat-template interpreter, matching jinja2 and the
// globals transformers installs (raise_exception, strftime_now, namespace,
// dict, and the ensure_ascii=False tojson filter).
#pragma once

#include <ctime>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "template/value.h"

namespace ember::tmpl {

struct RenderLimits;

// Binds call arguments to named parameters like Python does; parameters not
// given are left Undefined. Fails on too many or unknown arguments.
Status bind_args(std::string_view fname, const CallArgs& a, std::initializer_list<const char*> names,
                 std::vector<Value>& out);

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

Result<Value> apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);
Result<bool> apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);

// Python/jinja getattr: methods of str/dict/list (as bound callables), dict
// items, namespace attributes; Undefined (with a hint) when missing.
Value get_attribute(const Value& obj, const std::string& name);

// Iterates like Python's iter(): list/tuple items, dict keys, string code
// points, nothing for Undefined; error for non-iterables.
Result<std::vector<Value>> iterate(const Value& v);

// Binary operators (+ - * / // % **) with Python semantics.
Result<Value> binary_op(std::string_view op, const Value& a, const Value& b);

// Fills `globals` with the functions transformers exposes. `now` overrides the
// clock used by strftime_now (for reproducible output); nullopt = real time.
void install_globals(Value& globals, std::optional<std::time_t> now, const RenderLimits* limits);

}  // namespace ember::tmpl
