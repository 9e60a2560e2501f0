// Harmony (gpt-oss) chat history and tools for its template; see harmony_prompt.h.
#include "server/harmony_prompt.h"

#include <string>
#include <vector>

namespace ember {

namespace {

using json = nlohmann::json;

std::string str_of(const json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool is_role(const json& m, const char* role) { return m.is_object() && str_of(m, "role") == role; }

// An assistant message with calls: content and reasoning both set -> one reasoning.
json merge_content_into_reasoning(json m) {
  const std::string content = str_of(m, "content"), reasoning = str_of(m, "reasoning_content");
  if (!content.empty() && !reasoning.empty()) {
    m["reasoning_content"] = reasoning + "\n\n" + content;
    m["content"] = "";
  }
  return m;
}

// Appends `m` (an assistant message with several calls) and the tool results
// results[0..] after it, one call per message, each followed by its result.
void split_calls(const json& m, const std::vector<json>& results, json* out) {
  const json& calls = m["tool_calls"];
  const size_t n = calls.size();
  std::vector<int> result_of(n, -1);
  std::vector<bool> used(results.size(), false);
  for (size_t k = 0; k < n; ++k) {  // by id
    const std::string id = str_of(calls[k], "id");
    if (id.empty()) continue;
    for (size_t r = 0; r < results.size(); ++r)
      if (!used[r] && str_of(results[r], "tool_call_id") == id) {
        result_of[k] = static_cast<int>(r), used[r] = true;
        break;
      }
  }
  size_t next = 0;  // the rest in order
  for (size_t k = 0; k < n; ++k) {
    if (result_of[k] >= 0) continue;
    while (next < results.size() && used[next]) ++next;
    if (next == results.size()) break;
    result_of[k] = static_cast<int>(next), used[next] = true;
  }
  for (size_t k = 0; k < n; ++k) {
    json a = m;
    a["tool_calls"] = json::array({calls[k]});
    if (k > 0) {
      a["content"] = "";
      a.erase("reasoning_content");
    }
    out->push_back(std::move(a));
    if (result_of[k] >= 0) out->push_back(results[static_cast<size_t>(result_of[k])]);
  }
  for (size_t r = 0; r < results.size(); ++r)  // more results than calls: kept, in order
    if (!used[r]) out->push_back(results[r]);
}

}  // namespace

json harmony_messages(const json& messages) {
  if (!messages.is_array()) return messages;
  json out = json::array();
  std::string instructions;
  size_t n_system = 0;
  for (const json& m : messages)
    if (is_role(m, "system")) {
      if (n_system++ > 0) instructions += "\n\n";
      instructions += str_of(m, "content");
    }
  if (n_system > 0) {
    json sys = {{"role", "system"}, {"content", instructions}};
    if (n_system == 1)
      for (const json& m : messages)
        if (is_role(m, "system")) sys = m;
    out.push_back(std::move(sys));
  }
  for (size_t i = 0; i < messages.size();) {
    const json& m = messages[i];
    if (is_role(m, "system")) {
      ++i;
      continue;
    }
    auto calls = m.is_object() ? m.find("tool_calls") : m.end();
    const bool with_calls = is_role(m, "assistant") && calls != m.end() && calls->is_array() && !calls->empty();
    if (!with_calls) {
      out.push_back(m);
      ++i;
      continue;
    }
    const json a = merge_content_into_reasoning(m);
    if (calls->size() == 1) {
      out.push_back(a);
      ++i;
      continue;
    }
    std::vector<json> results;
    size_t j = i + 1;
    for (; j < messages.size() && is_role(messages[j], "tool"); ++j) results.push_back(messages[j]);
    split_calls(a, results, &out);
    i = j;
  }
  return out;
}

json harmony_tools(const json& tools) {
  if (!tools.is_array()) return tools;
  json out = tools;
  for (json& t : out) {
    if (!t.is_object()) continue;
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) continue;
    auto d = fn->find("description");
    if (d == fn->end() || d->is_null()) (*fn)["description"] = "";
  }
  return out;
}

}  // namespace ember
