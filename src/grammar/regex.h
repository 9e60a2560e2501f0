// Regular expressions (the common ECMAScript subset) translated to GBNF
// expressions: literals and escapes (\d \w \s and their negations, \n \t \r
// \f \v \0 \xHH \uHHHH \u{H..}, escaped punctuation), classes [...] / [^...]
// with ranges, `.`, groups (...) (?:...) (?<name>...), alternation,
// quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same language), and
// ^ / $ at the ends of the pattern. The match is always a full match.
// Backreferences, lookaround, word boundaries and anchors inside the pattern
// are rejected with an error naming them.
//
// In JSON-string mode (a JSON Schema `pattern`) the expression describes the
// string's JSON text: `"` and `\` are written escaped, control characters
// are never produced, so every output parses back to a matching string.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace ember::grammar {

enum class RegexMode { kPlain, kJsonString };

// A GBNF expression (usable as a rule body) for the language of `pattern`.
Result<std::string> regex_to_gbnf(std::string_view pattern, RegexMode mode = RegexMode::kPlain);

// A GBNF literal "..." for these bytes.
std::string gbnf_literal(std::string_view bytes);

}  // namespace ember::grammar
