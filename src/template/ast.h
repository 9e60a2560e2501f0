// Syntax tree of a parsed chat template (Jinja2 subset used by real chat
// templates). Expressions and statements are plain tagged structs owned by
// unique_ptr; the interpreter walks them directly.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ember::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kConst,      // value
  kName,       // name
  kList,       // args
  kTuple,      // args
  kDict,       // args = k0, v0, k1, v1, ...
  kGetAttr,    // args[0] . name
  kGetItem,    // args[0] [ args[1] ]
  kSlice,      // args = start, stop, step (null entries allowed)
  kCall,       // args[0] = callee, args[1..] positional; kwargs; dyn_args/dyn_kwargs
  kFilter,     // args[0] = input (null for filter blocks); name; args[1..]; kwargs
  kTest,       // args[0] = input; name; args[1..]; kwargs
  kUnary,      // op ("-", "+", "not"); args[0]
  kBinary,     // op; args[0], args[1]   (+ - * / // % ** and or)
  kConcat,     // args joined with ~
  kCompare,    // args[0] first; ops[i] applies to args[i+1]
  kCondExpr,   // args = test, then, else (else may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                  // kConst
  std::string name;             // kName / kGetAttr / kFilter / kTest / kUnary+kBinary op
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;  // *args / **kwargs of calls
  std::vector<std::string> ops;  // kCompare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind : uint8_t {
  kData,        // text
  kPrint,       // expr
  kIf,          // conds[i] -> bodies[i]; else_body
  kFor,         // target, expr (iterable), cond (filter), bodies[0], else_body, recursive
  kSet,         // target = expr
  kSetBlock,    // target, filter (kFilter chain with null input, may be null), bodies[0]
  kMacro,       // name, params, defaults, bodies[0]
  kCallBlock,   // expr (call), params, defaults, bodies[0]
  kFilterBlock, // filter, bodies[0]
  kWith,        // targets (as params), defaults (values), bodies[0]
  kBreak,
  kContinue,
};

// Assignment target: a name, a tuple of names, or namespace attribute.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNsAttr } kind = Kind::kName;
  std::string name;               // kName / namespace variable
  std::string attr;               // kNsAttr
  std::vector<Target> elements;   // kTuple
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;               // kData text, kMacro name
  ExprPtr expr;                   // print / set value / for iterable / call-block call
  ExprPtr cond;                   // for-loop filter
  ExprPtr filter;                 // set-block / filter-block filter chain
  Target target;
  std::vector<ExprPtr> conds;     // if / elif conditions
  std::vector<Body> bodies;       // if branches, loop body, macro body, ...
  Body else_body;
  std::vector<std::string> params;   // macro / call-block / with
  std::vector<ExprPtr> defaults;     // trailing defaults (macro) or with values
  bool recursive = false;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  // macros
};

}  // namespace ember::tmpl
