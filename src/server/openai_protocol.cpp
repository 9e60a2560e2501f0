// OpenAI request parsing and validation; see openai_protocol.h.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace ember {

using nlohmann::json;

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::optional<json> parse_json_object(const std::string& body, ApiError* err) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *err = bad_request("request body is not valid JSON", "", "invalid_json");
    return std::nullopt;
  }
  if (!j.is_object()) {
    *err = bad_request(fmt::format("request body must be a JSON object, not {}", j.type_name()), "", "invalid_json");
    return std::nullopt;
  }
  return j;
}

namespace {

const char* type_of(const json& v) { return v.type_name(); }

// Typed, range-checked access to optional fields of a JSON object. The first
// failure is kept; later reads are no-ops.
class Fields {
 public:
  Fields(const json& obj, ApiError* err) : obj_(obj), err_(err) {}
  bool ok() const { return ok_; }
  void fail(std::string message, const std::string& param) {
    if (!ok_) return;
    ok_ = false;
    *err_ = bad_request(std::move(message), param);
  }
  // Present and not null.
  const json* get(const std::string& name) const {
    auto it = obj_.find(name);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  void boolean(const std::string& name, bool* out) {
    const json* v = get(name);
    if (!v || !ok_) return;
    if (!v->is_boolean()) return fail(fmt::format("'{}' must be a boolean, not {}", name, type_of(*v)), name);
    *out = v->get<bool>();
  }
  void number(const std::string& name, double* out, double lo, double hi) {
    const json* v = get(name);
    if (!v || !ok_) return;
    if (!v->is_number()) return fail(fmt::format("'{}' must be a number, not {}", name, type_of(*v)), name);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      return fail(fmt::format("'{}' must be in [{}, {}] (got {})", name, lo, hi, v->dump()), name);
    *out = x;
  }
  void integer(const std::string& name, int64_t* out, int64_t lo, int64_t hi) {
    const json* v = get(name);
    if (!v || !ok_) return;
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(fmt::format("'{}' must be in [{}, {}] (got {})", name, lo, hi, v->dump()), name);
      x = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      x = static_cast<int64_t>(v->get<double>());  // 16.0 is accepted as 16
    } else {
      return fail(fmt::format("'{}' must be an integer, not {}", name, v->is_number() ? v->dump() : type_of(*v)),
                  name);
    }
    if (x < lo || x > hi) return fail(fmt::format("'{}' must be in [{}, {}] (got {})", name, lo, hi, x), name);
    *out = x;
  }
  void string(const std::string& name, std::string* out) {
    const json* v = get(name);
    if (!v || !ok_) return;
    if (!v->is_string()) return fail(fmt::format("'{}' must be a string, not {}", name, type_of(*v)), name);
    *out = v->get<std::string>();
  }

 private:
  const json& obj_;
  ApiError* err_;
  bool ok_ = true;
};

constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;

void parse_stop(Fields& f, GenerationRequest* r) {
  const json* v = f.get("stop");
  if (!v || !f.ok()) return;
  if (v->is_string()) {
    r->stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStops) return f.fail(fmt::format("'stop' may hold at most {} strings", kMaxStops), "stop");
    for (const json& s : *v) {
      if (!s.is_string()) return f.fail("'stop' must be a string or an array of strings", "stop");
      r->stop.push_back(s.get<std::string>());
    }
  } else {
    return f.fail(fmt::format("'stop' must be a string or an array of strings, not {}", type_of(*v)), "stop");
  }
  for (const auto& s : r->stop)
    if (s.size() > kMaxStopBytes) return f.fail(fmt::format("stop strings are limited to {} bytes", kMaxStopBytes), "stop");
}

void parse_stop_token_ids(Fields& f, GenerationRequest* r) {
  const json* v = f.get("stop_token_ids");
  if (!v || !f.ok()) return;
  if (!v->is_array() || v->size() > 256) return f.fail("'stop_token_ids' must be an array of token ids", "stop_token_ids");
  for (const json& t : *v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return f.fail("'stop_token_ids' must be an array of token ids", "stop_token_ids");
    r->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
}

bool is_token_array(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v)
    if (!t.is_number_integer()) return false;
  return true;
}

void parse_prompt(Fields& f, const json& body, const ProtocolLimits& lim, GenerationRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return f.fail("'prompt' is required", "prompt");
  const json& p = *it;
  auto add_tokens = [&](const json& arr) {
    std::vector<int32_t> ids;
    ids.reserve(arr.size());
    for (const json& t : arr) {
      const int64_t x = t.get<int64_t>();
      if (x < 0 || x > std::numeric_limits<int32_t>::max())
        return f.fail(fmt::format("token id {} in 'prompt' is out of range", x), "prompt");
      ids.push_back(static_cast<int32_t>(x));
    }
    r->token_prompts.push_back(std::move(ids));
  };
  if (p.is_string()) {
    r->text_prompts.push_back(p.get<std::string>());
  } else if (is_token_array(p)) {
    r->prompt_is_tokens = true;
    add_tokens(p);
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    for (const json& s : p) {
      if (!s.is_string()) return f.fail("'prompt' arrays must hold only strings", "prompt");
      r->text_prompts.push_back(s.get<std::string>());
    }
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    r->prompt_is_tokens = true;
    for (const json& s : p) {
      if (!is_token_array(s)) return f.fail("'prompt' arrays of token arrays must hold non-empty integer arrays", "prompt");
      add_tokens(s);
      if (!f.ok()) return;
    }
  } else {
    return f.fail("'prompt' must be a string, an array of strings, an array of token ids or an array of token-id "
                  "arrays (non-empty)",
                  "prompt");
  }
  const size_t n = r->prompt_is_tokens ? r->token_prompts.size() : r->text_prompts.size();
  if (n > static_cast<size_t>(lim.max_prompts))
    return f.fail(fmt::format("at most {} prompts per request (got {})", lim.max_prompts, n), "prompt");
}

// An assistant message's tool_calls, for templates: arguments given as JSON
// text become objects (as vLLM and transformers' templates expect).
bool parse_message_tool_calls(Fields& f, const json& tc, const std::string& where, json* out) {
  if (!tc.is_array()) return f.fail(fmt::format("'{}' must be an array", where), where), false;
  *out = json::array();
  for (size_t k = 0; k < tc.size(); ++k) {
    const std::string w = fmt::format("{}[{}]", where, k);
    const json& c = tc[k];
    auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return f.fail(fmt::format("'{}' must be an object with 'function': {{'name', 'arguments'}}", w), w), false;
    json call = {{"type", "function"}, {"function", {{"name", (*fn)["name"]}, {"arguments", json::object()}}}};
    if (auto id = c.find("id"); id != c.end() && id->is_string()) call["id"] = *id;
    if (auto a = fn->find("arguments"); a != fn->end() && !a->is_null()) {
      if (a->is_string()) {
        json parsed = json::parse(a->get<std::string>(), nullptr, false);
        call["function"]["arguments"] = parsed.is_discarded() ? *a : parsed;
      } else if (a->is_object()) {
        call["function"]["arguments"] = *a;
      } else {
        return f.fail(fmt::format("'{}.function.arguments' must be a string or an object", w), w), false;
      }
    }
    out->push_back(std::move(call));
  }
  return true;
}

// tools: [{type: "function", function: {name, description?, parameters?}}],
// tool_choice: "none" | "auto" | "required" | {type: "function", function: {name}}.
void parse_tools(Fields& f, GenerationRequest* r) {
  const json* tools = f.get("tools");
  const json* choice = f.get("tool_choice");
  f.boolean("parallel_tool_calls", &r->parallel_tool_calls);
  if (!f.ok()) return;
  if (tools && !tools->is_array()) return f.fail("'tools' must be an array of tool definitions", "tools");
  if (tools && tools->size() > 128) return f.fail("'tools' may hold at most 128 tools", "tools");
  std::vector<std::string> names;
  if (tools) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string w = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        return f.fail(fmt::format("'{}.type' must be 'function'", w), w + ".type");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return f.fail(fmt::format("'{}.function' must be an object", w), w + ".function");
      auto name = fn->find("name");
      bool good = name != fn->end() && name->is_string() && !name->get<std::string>().empty() &&
                  name->get<std::string>().size() <= 64;
      if (good)
        for (char ch : name->get<std::string>()) good &= std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
      if (!good)
        return f.fail(fmt::format("'{}.function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -", w),
                      w + ".function.name");
      for (const auto& n : names)
        if (n == name->get<std::string>())
          return f.fail(fmt::format("'{}.function.name': the tool '{}' is defined twice", w, n), w + ".function.name");
      names.push_back(name->get<std::string>());
      if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
        return f.fail(fmt::format("'{}.function.parameters' must be a JSON schema object", w), w + ".function.parameters");
    }
  }
  const bool have_tools = tools && !tools->empty();
  r->tools = have_tools ? *tools : json(nullptr);
  r->tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (!choice) return;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r->tool_choice = ToolChoice::kNone;
    else if (c == "auto") r->tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
    else if (c == "required") r->tool_choice = ToolChoice::kRequired;
    else return f.fail(fmt::format("'tool_choice' must be 'none', 'auto', 'required' or a function (got '{}')", c), "tool_choice");
  } else if (choice->is_object()) {
    auto fn = choice->find("function");
    if (choice->value("type", "") != "function" || fn == choice->end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string())
      return f.fail("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
    r->tool_choice = ToolChoice::kNamed;
    r->tool_choice_name = (*fn)["name"].get<std::string>();
    bool known = false;
    for (const auto& n : names) known |= n == r->tool_choice_name;
    if (!known)
      return f.fail(fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", r->tool_choice_name),
                    "tool_choice");
  } else {
    return f.fail("'tool_choice' must be a string or an object", "tool_choice");
  }
  if (r->tool_choice == ToolChoice::kRequired && !have_tools)
    return f.fail("'tool_choice' 'required' needs a non-empty 'tools'", "tool_choice");
}

// Normalizes chat messages to [{role, content: string}, ...] for templates.
void parse_messages(Fields& f, const json& body, GenerationRequest* r) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return f.fail("'messages' is required", "messages");
  if (!it->is_array() || it->empty()) return f.fail("'messages' must be a non-empty array", "messages");
  json out = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return f.fail(fmt::format("'{}' must be an object", where), where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return f.fail(fmt::format("'{}.role' must be a string", where), where + ".role");
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
      return f.fail(fmt::format("'{}.role' must be one of system, developer, user, assistant, tool (got '{}')", where,
                                role->get<std::string>()),
                    where + ".role");
    std::string text;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (rs != "assistant") return f.fail(fmt::format("'{}.content' is required", where), where + ".content");
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pw = fmt::format("{}.content[{}]", where, k);
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return f.fail(fmt::format("'{}' must be an object with a 'type'", pw), pw);
        const std::string type = part["type"].get<std::string>();
        if (type != "text")
          return f.fail(fmt::format("'{}': content parts of type '{}' are not supported (text only)", pw, type), pw);
        if (!part.contains("text") || !part["text"].is_string())
          return f.fail(fmt::format("'{}.text' must be a string", pw), pw + ".text");
        text += part["text"].get<std::string>();
      }
    } else {
      return f.fail(fmt::format("'{}.content' must be a string or an array of content parts", where), where + ".content");
    }
    json msg = {{"role", rs}, {"content", text}};
    if (auto name = m.find("name"); name != m.end() && name->is_string()) msg["name"] = *name;
    if (auto id = m.find("tool_call_id"); rs == "tool" && id != m.end() && id->is_string()) msg["tool_call_id"] = *id;
    // The thinking of an earlier answer, given back (templates that keep it,
    // e.g. Qwen3 within a tool-calling turn, render it).
    for (const char* key : {"reasoning_content", "reasoning", "thinking"}) {
      auto rc = m.find(key);
      if (rs != "assistant" || rc == m.end() || rc->is_null()) continue;
      if (!rc->is_string())
        return f.fail(fmt::format("'{}.{}' must be a string", where, key), where + "." + key);
      msg["reasoning_content"] = *rc;
      break;
    }
    if (auto tc = m.find("tool_calls"); rs == "assistant" && tc != m.end() && !tc->is_null()) {
      json calls;
      if (!parse_message_tool_calls(f, *tc, where + ".tool_calls", &calls)) return;
      msg["tool_calls"] = std::move(calls);
    }
    out.push_back(std::move(msg));
  }
  r->messages = std::move(out);
}

// reasoning_effort, reasoning {effort, max_tokens, min_tokens, exclude,
// enabled}, thinking_budget / thinking_budget_min, reasoning_format and
// chat_template_kwargs.
void parse_reasoning(Fields& f, GenerationRequest* r) {
  ReasoningOptions& o = r->reasoning;
  auto effort = [&](const json& v, const std::string& param) {
    static const char* kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    bool ok = v.is_string();
    if (ok) {
      ok = false;
      for (const char* e : kEfforts) ok |= v.get<std::string>() == e;
    }
    if (!ok) return f.fail(fmt::format("'{}' must be one of none, minimal, low, medium, high, xhigh", param), param);
    o.effort = v.get<std::string>();
  };
  if (const json* e = f.get("reasoning_effort"); e && f.ok()) effort(*e, "reasoning_effort");
  if (const json* rs = f.get("reasoning"); rs && f.ok()) {
    if (!rs->is_object()) return f.fail("'reasoning' must be an object", "reasoning");
    auto get = [&](const char* k) {
      auto it = rs->find(k);
      return it == rs->end() || it->is_null() ? nullptr : &*it;
    };
    if (const json* e = get("effort")) {
      if (!o.effort.empty()) return f.fail("'reasoning.effort' and 'reasoning_effort' cannot both be given", "reasoning.effort");
      effort(*e, "reasoning.effort");
    }
    if (const json* m = get("max_tokens")) {
      if (!m->is_number_integer() || m->get<int64_t>() < -1)
        return f.fail("'reasoning.max_tokens' must be an integer >= -1", "reasoning.max_tokens");
      if (get("effort")) return f.fail("'reasoning.effort' and 'reasoning.max_tokens' cannot both be given", "reasoning");
      o.budget = m->get<int64_t>();
    }
    if (const json* m = get("min_tokens")) {
      if (!m->is_number_integer() || m->get<int64_t>() < 0)
        return f.fail("'reasoning.min_tokens' must be an integer >= 0", "reasoning.min_tokens");
      o.min_tokens = m->get<int64_t>();
    }
    for (const char* k : {"exclude", "enabled"}) {
      const json* b = get(k);
      if (!b) continue;
      if (!b->is_boolean()) return f.fail(fmt::format("'reasoning.{}' must be a boolean", k), std::string("reasoning.") + k);
      if (std::string(k) == "exclude") o.exclude = b->get<bool>();
      else o.enabled = b->get<bool>();
    }
  }
  if (!f.ok()) return;
  if (f.get("thinking_budget")) {
    if (o.budget != -2) return f.fail("'thinking_budget' and 'reasoning.max_tokens' cannot both be given", "thinking_budget");
    f.integer("thinking_budget", &o.budget, -1, std::numeric_limits<int32_t>::max());
  }
  if (f.get("thinking_budget_min")) {
    if (o.min_tokens >= 0)
      return f.fail("'thinking_budget_min' and 'reasoning.min_tokens' cannot both be given", "thinking_budget_min");
    f.integer("thinking_budget_min", &o.min_tokens, 0, std::numeric_limits<int32_t>::max());
  }
  if (const json* rf = f.get("reasoning_format"); rf && f.ok()) {
    if (!rf->is_string() || (*rf != "auto" && *rf != "deepseek" && *rf != "none"))
      return f.fail("'reasoning_format' must be 'auto', 'deepseek' or 'none'", "reasoning_format");
    o.format = rf->get<std::string>();
  }
  if (const json* kw = f.get("chat_template_kwargs"); kw && f.ok()) {
    if (!kw->is_object()) return f.fail("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const char* k : {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"})
      if (kw->contains(k))
        return f.fail(fmt::format("'chat_template_kwargs' may not set '{}'", k), "chat_template_kwargs");
    r->chat_template_kwargs = *kw;
  }
}

// response_format, the vLLM guided_* fields and structured_outputs: at most one constraint.
void parse_constraint(Fields& f, GenerationRequest* r) {
  using Kind = OutputConstraint::Kind;
  OutputConstraint& c = r->constraint;
  auto set = [&](Kind k, const std::string& param) {
    if (c.kind != Kind::kNone)
      return f.fail(fmt::format("'{}' cannot be combined with '{}' (one output constraint per request)", param, c.param),
                    param), false;
    c.kind = k;
    c.param = param;
    return true;
  };
  if (const json* rf = f.get("response_format"); rf && f.ok()) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      return f.fail("'response_format' must be an object with a 'type'", "response_format");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      set(Kind::kJsonObject, "response_format");
    } else if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        return f.fail("'response_format.json_schema' must be an object", "response_format.json_schema");
      auto sc = js->find("schema");
      if (sc == js->end() || sc->is_null()) {
        set(Kind::kJsonObject, "response_format");  // no schema: any JSON object
      } else if (!sc->is_object() && !sc->is_boolean()) {
        return f.fail("'response_format.json_schema.schema' must be an object", "response_format.json_schema.schema");
      } else if (set(Kind::kJsonSchema, "response_format.json_schema.schema")) {
        c.schema_pointer = "/response_format/json_schema/schema";
      }
    } else if (type != "text") {
      return f.fail(fmt::format("'response_format.type' must be 'text', 'json_object' or 'json_schema' (got '{}')", type),
                    "response_format.type");
    }
  }
  // vLLM: guided_json / guided_regex / guided_grammar / guided_choice, or the
  // same under structured_outputs {json, regex, grammar, choice}.
  const json* so = f.get("structured_outputs");
  if (so && f.ok() && !so->is_object()) return f.fail("'structured_outputs' must be an object", "structured_outputs");
  for (const char* key : {"json", "regex", "grammar", "choice"}) {
    const std::string guided = std::string("guided_") + key;
    std::string param = guided, pointer = "/" + guided;
    const json* v = f.get(guided);
    if (!v && so) {
      auto it = so->find(key);
      if (it != so->end() && !it->is_null()) {
        v = &*it;
        param = std::string("structured_outputs.") + key;
        pointer = std::string("/structured_outputs/") + key;
      }
    }
    if (!v || !f.ok()) continue;
    const std::string k = key;
    if (k == "json") {
      if (v->is_string()) {
        if (!set(Kind::kJsonSchema, param)) return;
        c.text = v->get<std::string>();  // the schema as JSON text
      } else if (v->is_object() || v->is_boolean()) {
        if (!set(Kind::kJsonSchema, param)) return;
        c.schema_pointer = pointer;
      } else {
        return f.fail(fmt::format("'{}' must be a JSON schema (object or string)", param), param);
      }
    } else if (k == "regex" || k == "grammar") {
      if (!v->is_string() || v->get<std::string>().empty())
        return f.fail(fmt::format("'{}' must be a non-empty string", param), param);
      if (!set(k == "regex" ? Kind::kRegex : Kind::kGrammar, param)) return;
      c.text = v->get<std::string>();
    } else {
      if (!v->is_array() || v->empty()) return f.fail(fmt::format("'{}' must be a non-empty array of strings", param), param);
      for (const json& x : *v) {
        if (!x.is_string()) return f.fail(fmt::format("'{}' must be a non-empty array of strings", param), param);
        c.choices.push_back(x.get<std::string>());
      }
      if (!set(Kind::kChoice, param)) return;
    }
  }
}

// Extension json_whitespace: "flexible" (default) or "compact", for JSON constraints.
void parse_json_whitespace(Fields& f, GenerationRequest* r) {
  const json* ws = f.get("json_whitespace");
  if (!ws || !f.ok()) return;
  using Kind = OutputConstraint::Kind;
  const Kind k = r->constraint.kind;
  if (!ws->is_string() || (*ws != "flexible" && *ws != "compact"))
    return f.fail("'json_whitespace' must be 'flexible' or 'compact'", "json_whitespace");
  if (k != Kind::kJsonObject && k != Kind::kJsonSchema)
    return f.fail("'json_whitespace' needs a JSON output constraint (response_format or guided_json)",
                  "json_whitespace");
  r->constraint.compact = *ws == "compact";
}

// OpenAI logit_bias: {"token id": bias in [-100, 100]}.
void parse_logit_bias(Fields& f, GenerationRequest* r) {
  const json* lb = f.get("logit_bias");
  if (!lb || !f.ok()) return;
  if (!lb->is_object()) return f.fail("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  if (lb->size() > 1024) return f.fail("'logit_bias' may hold at most 1024 entries", "logit_bias");
  for (auto it = lb->begin(); it != lb->end(); ++it) {
    const std::string& k = it.key();
    char* end = nullptr;
    const long long id = std::strtoll(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
      return f.fail(fmt::format("'logit_bias' keys must be token ids (got '{}')", k), "logit_bias");
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100 || it->get<double>() > 100)
      return f.fail(fmt::format("'logit_bias' values must be numbers in [-100, 100] (token {})", k), "logit_bias");
    r->logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(it->get<double>())});
  }
}

}  // namespace

std::optional<GenerationRequest> parse_generation_request(const json& body, Endpoint ep, const ProtocolLimits& lim,
                                                          ApiError* err) {
  GenerationRequest r;
  r.endpoint = ep;
  Fields f(body, err);
  f.string("model", &r.model);
  if (ep == Endpoint::kChat) {
    parse_messages(f, body, &r);
    f.boolean("add_generation_prompt", &r.add_generation_prompt);
    f.boolean("continue_final_message", &r.continue_final_message);
    if (f.ok() && r.continue_final_message && r.add_generation_prompt && body.contains("add_generation_prompt") &&
        body["add_generation_prompt"].is_boolean() && body["add_generation_prompt"].get<bool>())
      f.fail("'continue_final_message' and 'add_generation_prompt' cannot both be true", "continue_final_message");
    if (r.continue_final_message) r.add_generation_prompt = false;
  } else {
    parse_prompt(f, body, lim, &r);
  }
  const int64_t max_len = lim.max_model_len > 0 ? lim.max_model_len : (int64_t{1} << 31) - 1;
  int64_t v = -1;
  f.integer("max_tokens", &v, ep == Endpoint::kCompletions ? 0 : 1, max_len);  // 0: echo only
  if (f.ok() && v >= 0) r.max_tokens = v;
  v = -1;
  f.integer("max_completion_tokens", &v, 1, max_len);
  if (f.ok() && v > 0) r.max_tokens = v;
  f.number("temperature", &r.temperature, 0.0, 10.0);
  f.number("top_p", &r.top_p, 0.0, 1.0);
  if (f.ok() && r.top_p <= 0.0) f.fail("'top_p' must be in (0, 1]", "top_p");
  int64_t top_k = 0;
  f.integer("top_k", &top_k, -1, 1 << 20);
  r.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  f.number("min_p", &r.min_p, 0.0, 1.0);
  int64_t n = 1;
  f.integer("n", &n, 1, lim.max_n);
  r.n = static_cast<int>(n);
  parse_stop(f, &r);
  parse_stop_token_ids(f, &r);
  if (const json* s = f.get("seed"); s && f.ok()) {
    if (!s->is_number_integer()) {
      f.fail(fmt::format("'seed' must be an integer, not {}", s->is_number() ? s->dump() : type_of(*s)), "seed");
    } else {
      r.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
    }
  }
  f.number("presence_penalty", &r.presence_penalty, -2.0, 2.0);
  f.number("frequency_penalty", &r.frequency_penalty, -2.0, 2.0);
  f.number("repetition_penalty", &r.repetition_penalty, 0.0, 10.0);
  if (f.ok() && r.repetition_penalty <= 0.0) f.fail("'repetition_penalty' must be in (0, 10]", "repetition_penalty");
  if (ep == Endpoint::kChat) {
    f.boolean("logprobs", &r.logprobs);
    int64_t k = 0;
    f.integer("top_logprobs", &k, 0, 20);
    r.top_logprobs = static_cast<int>(k);
    if (f.ok() && f.get("top_logprobs") && !r.logprobs)
      f.fail("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  } else {
    // Legacy completions: 'logprobs' is the number of alternatives (0..20).
    if (const json* lp = f.get("logprobs"); lp && f.ok()) {
      if (lp->is_boolean()) {
        f.fail("'logprobs' must be an integer in [0, 20] for completions", "logprobs");
      } else {
        int64_t k = 0;
        f.integer("logprobs", &k, 0, 20);
        r.logprobs = true;
        r.top_logprobs = static_cast<int>(k);
      }
    }
    f.boolean("echo", &r.echo);
  }
  f.boolean("stream", &r.stream);
  if (const json* so = f.get("stream_options"); so && f.ok()) {
    if (!so->is_object()) {
      f.fail("'stream_options' must be an object", "stream_options");
    } else if (!r.stream) {
      f.fail("'stream_options' is only allowed when 'stream' is true", "stream_options");
    } else if (auto iu = so->find("include_usage"); iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) f.fail("'stream_options.include_usage' must be a boolean", "stream_options.include_usage");
      else r.include_usage = iu->get<bool>();
    }
  }
  parse_constraint(f, &r);
  parse_json_whitespace(f, &r);
  if (ep == Endpoint::kChat) {
    if (f.ok()) parse_tools(f, &r);
    if (f.ok()) parse_reasoning(f, &r);
  } else if (f.get("tools") && f.ok()) {
    f.fail("'tools' are only supported on /v1/chat/completions", "tools");
  }
  if (f.ok() && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) &&
      r.constraint.kind != OutputConstraint::Kind::kNone)
    f.fail(fmt::format("'tool_choice' '{}' cannot be combined with '{}' (one output constraint per request)",
                       r.tool_choice == ToolChoice::kRequired ? "required" : "function", r.constraint.param),
           "tool_choice");
  parse_logit_bias(f, &r);
  if (const json* bo = f.get("best_of"); bo && f.ok() && !(bo->is_number_integer() && bo->get<int64_t>() == r.n))
    f.fail("'best_of' other than n is not supported", "best_of");
  f.boolean("ignore_eos", &r.ignore_eos);
  f.boolean("forced_tokens", &r.forced_tokens);
  f.boolean("skip_special_tokens", &r.skip_special_tokens);
  f.string("user", &r.user);
  if (f.get("num_speculative_tokens")) {
    int64_t k = -1;
    f.integer("num_speculative_tokens", &k, 0, 32);
    r.num_speculative_tokens = static_cast<int>(k);
  }
  if (!f.ok()) return std::nullopt;
  return r;
}

}  // namespace ember
