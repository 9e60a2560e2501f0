// Lexer for the chat-template (Jinja2) interpreter. Reproduces jinja2's lexer
// with the settings transformers uses (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False): newline normalisation, whitespace control
// ({%- -%} {{- -}} {#- -#}, '+' modifiers), comments and raw blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ember::tmpl {

enum class Tok : uint8_t {
  kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd,
  kName, kString, kInt, kFloat, kOp, kEof
};

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // data text, name, decoded string literal, or operator
  int line = 1;
  int64_t ival = 0;
  double fval = 0.0;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Tokenizes `source`. Errors carry the template line number.
Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& opts = {});

}  // namespace ember::tmpl
