// Python str semantics on UTF-8 strings, as needed by the chat-template
// builtins: case mapping, strip/split/replace/find, title/capitalize, and the
// str.format / %-formatting subsets that templates use.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "template/value.h"

namespace ember::tmpl::pystr {

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);        // str.title()
std::string capitalize(std::string_view s);   // str.capitalize()
std::string jinja_title(std::string_view s);  // jinja's |title filter
bool is_upper(std::string_view s);
bool is_lower(std::string_view s);

// chars == nullopt strips Unicode whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// sep == nullopt splits on whitespace runs. maxsplit < 0: unlimited.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// Index in code points, -1 when absent.
int64_t find(std::string_view s, std::string_view sub, bool reverse);
int64_t count(std::string_view s, std::string_view sub);
std::string pad(std::string_view s, int64_t width, std::string_view fill, int align);  // -1 ljust, 0 center, 1 rjust
std::string html_escape(std::string_view s);

// str.format(*args, **kwargs) for {} / {0} / {name} fields (optional !r/!s,
// simple format specs). Python %-formatting for the |format filter.
Result<std::string> format(std::string_view fmt, const CallArgs& args);
Result<std::string> percent_format(std::string_view fmt, const std::vector<Value>& args);

}  // namespace ember::tmpl::pystr
