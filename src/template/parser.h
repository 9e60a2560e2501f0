// Parser: turns the token stream of lexer.h into the syntax tree of ast.h,
// following jinja2's grammar and operator precedence exactly (including its
// quirks, e.g. left-associative ** and tests binding tighter than + or ~).
#pragma once

#include <string_view>

#include "core/status.h"
#include "template/ast.h"

namespace ember::tmpl {

// Parses a whole template. Errors read "template syntax error at line N: ...".
Result<Body> parse_template(std::string_view source);

}  // namespace ember::tmpl
