// Routing keys of OpenAI requests; see request_key.h.
#include "router/request_key.h"

namespace ember::router {

namespace {

// Separators that do not occur in normal text (ASCII unit / record separators).
constexpr char kField = '\x1f';
constexpr char kRecord = '\x1e';

void append_content(const nlohmann::json& content, std::string* out) {
  if (content.is_string()) {
    *out += content.get_ref<const std::string&>();
  } else if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        *out += part["text"].get_ref<const std::string&>();
      } else if (!part.is_null()) {
        *out += part.dump();
      }
    }
  } else if (!content.is_null()) {
    *out += content.dump();
  }
}

void append_tokens(const nlohmann::json& ids, std::string* out) {
  for (const auto& t : ids) {
    *out += t.is_number_integer() ? std::to_string(t.get<int64_t>()) : t.dump();
    *out += ',';
  }
}

}  // namespace

std::string routing_key(const nlohmann::json& body, bool chat) {
  std::string key;
  if (!body.is_object()) return key;
  if (chat) {
    if (body.contains("tools") && !body["tools"].is_null()) {
      key += "tools";
      key += kField;
      key += body["tools"].dump();
      key += kRecord;
    }
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array()) return key;
    for (const auto& m : *it) {
      if (!m.is_object()) continue;
      if (auto r = m.find("role"); r != m.end() && r->is_string()) key += r->get_ref<const std::string&>();
      key += kField;
      if (auto c = m.find("content"); c != m.end()) append_content(*c, &key);
      if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
        key += kField;
        key += tc->dump();
      }
      if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string()) {
        key += kField;
        key += id->get_ref<const std::string&>();
      }
      key += kRecord;
    }
    return key;
  }
  auto it = body.find("prompt");
  if (it == body.end()) return key;
  const nlohmann::json& p = *it;
  if (p.is_string()) return p.get<std::string>();
  if (p.is_array() && !p.empty()) {
    // One prompt: a string or token ids; a batch: route on its first prompt.
    const nlohmann::json& first = p[0];
    if (first.is_string()) return first.get<std::string>();
    if (first.is_number()) {
      append_tokens(p, &key);
    } else if (first.is_array()) {
      append_tokens(first, &key);
    }
  }
  return key;
}

}  // namespace ember::router
