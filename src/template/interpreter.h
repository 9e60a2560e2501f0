// Tree-walking evaluator for parsed chat templates. Implements jinja2's runtime
// semantics (scoping, Undefined, loops with the `loop` object, macros, call
// blocks, namespaces, loop controls) with resource limits so that untrusted
// templates cannot exhaust memory, stack or time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "template/ast.h"
#include "template/value.h"

namespace ember::tmpl {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;
  int max_call_depth = 200;         // nested macro / call-block invocations
  uint64_t max_steps = 20'000'000;  // statements + loop iterations
  size_t max_range = 10'000'000;    // largest range() a template may build
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Interpreter {
 public:
  explicit Interpreter(RenderLimits limits = {}) : limits_(limits) {}

  // Renders `body`; `globals` and `context` are objects (context wins).
  Result<std::string> render(const Body& body, const Value& globals, const Value& context);

  // Calls a callable value (macro, builtin, bound method).
  Result<Value> call_value(const Value& fn, CallArgs& args);

  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Status exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  Status exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Status exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Status exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Status exec_macro_def(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Status exec_call_block(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Result<std::string> capture(const Body& body, const std::shared_ptr<Scope>& scope);
  // Applies the filters of a {% filter %} block or a {% set %} block to v
  // (filter: the outermost of the chain, args[0] nests the next; null: none).
  Result<Value> apply_filter_chain(const Expr* filter, Value v, const std::shared_ptr<Scope>& scope, int line);
  Status assign(const Target& t, Value v, Scope& scope, int line);
  Status write(std::string_view text);

  Result<Value> eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Result<Value> eval_call(const Expr& e, const std::shared_ptr<Scope>& scope);
  Result<Value> eval_getitem(const Expr& e, const std::shared_ptr<Scope>& scope);
  Result<Value> eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope);
  Status eval_call_args(const Expr& e, size_t first_arg, const std::shared_ptr<Scope>& scope, CallArgs& out);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, const std::string& name);

  RenderLimits limits_;
  std::string* out_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
  uint64_t steps_ = 0;
};

// Error helpers shared by the interpreter and builtins.
Status undefined_error(const Value& v);
// Prefixes "template error at line N: " unless the message already has a line.
Status at_line(const Status& st, int line);

}  // namespace ember::tmpl
