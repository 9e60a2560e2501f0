// JSON Schema -> GBNF (the shape of llama.cpp's json-schema-to-grammar):
// every text the grammar admits is JSON that validates against the schema.
//
// Supported: type (one or a list), properties / required (properties in
// schema order, optional ones may be left out), additionalProperties
// (false / true / a schema; with declared properties no extra keys are
// produced), enum, const, items, prefixItems, minItems / maxItems, anyOf,
// oneOf (alternatives are assumed disjoint), allOf with one member, $ref to
// #/$defs/... #/definitions/... or # (recursion allowed), string pattern,
// minLength / maxLength, format (date, time, date-time, uuid, email, ipv4,
// hostname, uri), integer minimum / maximum / exclusiveMinimum /
// exclusiveMaximum, number bounds when they are integers >= 0. Annotations
// (title, description, default, examples, $schema, $id, $comment, ...) are
// ignored. Anything else is rejected with an error naming the keyword and
// where it is (`path`), never silently dropped.
//
// Properties are produced in the schema's order: pass the schema as an
// nlohmann::ordered_json parsed from the request text.
//
// Whitespace between tokens is bounded (llama.cpp's `space` rule), so a
// model cannot pad forever.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ember::grammar {

struct SchemaError {
  std::string message;
  std::string path;  // JSON pointer-like location in the schema ("" for the root)
};

// GBNF text with root rule `root`, or an error (returned through `err`).
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema, SchemaError* err = nullptr);
// Any JSON value whose top level is an object (OpenAI's json_object mode).
std::string json_object_gbnf();
// The same grammar with the whitespace between JSON tokens (the `j-ws`
// rule of the two above) replaced by `ws_body` (GBNF alternatives, e.g.
// `""` for none: compact JSON, so that keys and punctuation are forced and
// can be jumped over). Grammars without the rule are returned unchanged.
std::string with_json_whitespace(std::string gbnf, std::string_view ws_body);
// Exactly one of these strings.
std::string choice_gbnf(const std::vector<std::string>& choices);

}  // namespace ember::grammar
