// Small text helpers shared by the server's incremental parsers (tool
// calls, reasoning, thinking budgets): JSON-style whitespace, stripping, and
// the length of a text's tail that may still grow into a marker.
#pragma once

#include <algorithm>
#include <string_view>

namespace ember::text {

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

inline std::string_view lstrip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

inline std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline std::string_view trim(std::string_view s) { return rstrip(lstrip(s)); }

// Length of the longest suffix of `s` that is a proper prefix of `marker`
// (text that may still become the marker).
inline size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

}  // namespace ember::text
