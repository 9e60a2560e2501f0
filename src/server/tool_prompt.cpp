// The generic tool-calling format for templates without one; see tool_prompt.h.
#include "server/tool_prompt.h"

#include <cctype>

namespace ember {

using nlohmann::json;

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void python_json_to(const json& j, std::string* out) {
  if (j.is_object()) {
    out->push_back('{');
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out->append(", ");
      first = false;
      out->append(json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace));
      out->append(": ");
      python_json_to(it.value(), out);
    }
    out->push_back('}');
  } else if (j.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out->append(", ");
      python_json_to(j[i], out);
    }
    out->push_back(']');
  } else {
    out->append(j.dump(-1, ' ', false, json::error_handler_t::replace));
  }
}

// One call as `format` writes it: the JSON object of a call.
std::string call_object(const json& call, ToolCallFormat format) {
  const json& fn = call.contains("function") ? call["function"] : call;
  const json name = fn.value("name", json(""));
  const json args = fn.contains("arguments") && !fn["arguments"].is_null() ? fn["arguments"] : json::object();
  std::string s = "{\"name\": " + name.dump(-1, ' ', false, json::error_handler_t::replace) + ", \"" +
                  tool_arguments_key(format) + "\": ";
  if (args.is_string()) {
    s += args.get<std::string>();  // arguments that were not JSON, as written
  } else {
    python_json_to(args, &s);
  }
  return s + "}";
}

}  // namespace

std::string python_json(const json& j) {
  std::string s;
  python_json_to(j, &s);
  return s;
}

bool template_renders_tools(std::string_view t) {
  constexpr std::string_view kTools = "tools";
  for (size_t at = t.find(kTools); at != std::string_view::npos; at = t.find(kTools, at + 1)) {
    const bool left = at == 0 || !ident_char(t[at - 1]);
    const bool right = at + kTools.size() >= t.size() || !ident_char(t[at + kTools.size()]);
    // A variable, not a string ('tools' in a message) or an attribute (x.tools).
    if (left && right && (at == 0 || (t[at - 1] != '\'' && t[at - 1] != '"' && t[at - 1] != '.'))) return true;
  }
  return false;
}

std::string generic_tools_text(const json& tools, ToolCallFormat format, bool parallel) {
  std::string s =
      "# Tools\n\nYou may call functions to help with the request. The functions are described by these JSON "
      "objects:\n<tools>\n";
  for (const json& t : tools) s += python_json(t) + "\n";
  s += "</tools>\n\n";
  const std::string obj = std::string("{\"name\": <function name>, \"") + tool_arguments_key(format) +
                          "\": <arguments as a JSON object>}";
  switch (format) {
    case ToolCallFormat::kMistral:
      s += "To call functions, answer with [TOOL_CALLS] followed by a JSON list of calls, each " + obj + ".";
      break;
    case ToolCallFormat::kLlama3Json:
      s += "To call a function, answer with only " + obj + (parallel ? " (several calls separated by ;)." : ".");
      break;
    default:
      s += "To call a function, write\n<tool_call>\n" + obj + "\n</tool_call>\n" +
           (parallel ? "with one such block per call." : "for one call at most.");
      break;
  }
  s += " A function's result comes back inside <tool_response></tool_response> tags.";
  return s;
}

std::string generic_call_text(const std::string& content, const json& tool_calls, ToolCallFormat format) {
  std::string s = content;
  if (!tool_calls.is_array() || tool_calls.empty()) return s;
  switch (format) {
    case ToolCallFormat::kMistral: {
      s += "[TOOL_CALLS][";
      for (size_t i = 0; i < tool_calls.size(); ++i) s += (i ? ", " : "") + call_object(tool_calls[i], format);
      s += "]";
      break;
    }
    case ToolCallFormat::kLlama3Json:
      for (size_t i = 0; i < tool_calls.size(); ++i)
        s += (i ? "; " : s.empty() ? "" : "\n") + call_object(tool_calls[i], format);
      break;
    default:
      for (size_t i = 0; i < tool_calls.size(); ++i) {
        if (!s.empty()) s += "\n";
        s += "<tool_call>\n" + call_object(tool_calls[i], format) + "\n</tool_call>";
      }
      break;
  }
  return s;
}

json generic_tool_messages(const json& messages, const std::string& tools_text, ToolCallFormat format,
                           bool in_user_turn) {
  json out = json::array();
  bool last_from_tool = false;  // out.back() holds tool results
  for (const json& m : messages) {
    const std::string role = m.value("role", "");
    const std::string content = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    if (role == "tool") {
      const std::string block = "<tool_response>\n" + content + "\n</tool_response>";
      if (!out.empty() && out.back()["role"] == "user") {
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + block;
      } else {
        out.push_back(json{{"role", "user"}, {"content", block}});
      }
      last_from_tool = true;
      continue;
    }
    json msg = {{"role", role}, {"content", content}};
    if (role == "assistant") {
      if (m.contains("tool_calls")) msg["content"] = generic_call_text(content, m["tool_calls"], format);
      if (m.contains("reasoning_content")) msg["reasoning_content"] = m["reasoning_content"];
    }
    if (m.contains("name")) msg["name"] = m["name"];
    if (role == "user" && last_from_tool) {  // keep the roles alternating
      out.back()["content"] = out.back()["content"].get<std::string>() + "\n\n" + content;
      continue;
    }
    last_from_tool = false;
    out.push_back(std::move(msg));
  }
  if (!tools_text.empty()) {
    if (in_user_turn) {
      for (json& msg : out)
        if (msg["role"] == "user") {
          msg["content"] = tools_text + "\n\n" + msg["content"].get<std::string>();
          break;
        }
    } else if (!out.empty() && out[0]["role"] == "system") {
      out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + tools_text;
    } else {
      out.insert(out.begin(), json{{"role", "system"}, {"content", tools_text}});
    }
  }
  return out;
}

}  // namespace ember
