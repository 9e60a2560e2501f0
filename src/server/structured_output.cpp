// Output constraints and logit_bias for `ember serve`; see structured_output.h.
#include "server/structured_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/harmony_calls.h"

namespace ember {

using nlohmann::ordered_json;
using Kind = OutputConstraint::Kind;

StructuredOutput::StructuredOutput(const Tokenizer& tok)
    : tok_(tok), vocab_(grammar::TokenVocab::from_tokenizer(tok)), worker_(std::make_shared<grammar::MaskWorker>(1)) {}

namespace {

// Points the local $refs of a schema placed at `prefix` (a JSON pointer in
// the combined schema) at their new place.
void move_refs(ordered_json& s, const std::string& prefix) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "$ref" && it->is_string() && it->get<std::string>().rfind('#', 0) == 0)
        *it = "#" + prefix + it->get<std::string>().substr(1);
      else
        move_refs(*it, prefix);
    }
  } else if (s.is_array()) {
    for (auto& x : s) move_refs(x, prefix);
  }
}

// The tools named in c.choices, in the request's order: each with its
// parameters schema (none: the function takes none, {}) and its grammar.
// False with *err set when the tools cannot be read or a schema is not
// supported.
struct ChosenTool {
  std::string name;
  ordered_json params;
  std::string gbnf;   // of the arguments
  std::string where;  // tools[i].function.parameters
};

bool chosen_tools(const OutputConstraint& c, const std::string& body_text, std::vector<ChosenTool>* out,
                  ApiError* err) {
  const ordered_json body = ordered_json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.contains("tools") || !body["tools"].is_array()) {
    *err = bad_request("the tools could not be read", "tools");
    return false;
  }
  const ordered_json& tools = body["tools"];
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& fn = tools[i]["function"];
    ChosenTool t;
    t.name = fn["name"].get<std::string>();
    if (std::find(c.choices.begin(), c.choices.end(), t.name) == c.choices.end()) continue;
    t.params = ordered_json{{"type", "object"}, {"properties", ordered_json::object()}, {"additionalProperties", false}};
    if (auto p = fn.find("parameters"); p != fn.end() && p->is_object() && !p->empty()) t.params = *p;
    t.where = fmt::format("tools[{}].function.parameters", i);
    grammar::SchemaError se;
    auto text = grammar::json_schema_to_gbnf(t.params, &se);
    if (!text) {
      *err = bad_request(fmt::format("unsupported JSON schema in '{}': {}{}", t.where, se.message,
                                     se.path.empty() ? "" : " (at " + se.path + ")"),
                         t.where);
      return false;
    }
    t.gbnf = std::move(*text);
    out->push_back(std::move(t));
  }
  return true;
}

}  // namespace

// The grammar of tool calls to the tools named in c.choices: each call is
// {"name": const, "<arguments key>": the tool's parameters schema}, one of
// them (anyOf), wrapped in the format's markers.
std::optional<std::string> StructuredOutput::tool_call_grammar(const OutputConstraint& c, const std::string& body_text,
                                                               ApiError* err) {
  std::vector<ChosenTool> chosen;
  if (!chosen_tools(c, body_text, &chosen, err)) return std::nullopt;
  const std::string key = tool_arguments_key(c.tool_format);
  ordered_json calls = ordered_json::array();
  for (ChosenTool& t : chosen) {
    ordered_json call = {{"type", "object"},
                         {"properties", {{"name", {{"const", t.name}}}, {key, std::move(t.params)}}},
                         {"required", {"name", key}},
                         {"additionalProperties", false}};
    calls.push_back(std::move(call));
  }
  const bool one = calls.size() == 1;
  for (size_t k = 0; k < calls.size(); ++k)
    move_refs(calls[k]["properties"][key], one ? "/properties/" + key : fmt::format("/anyOf/{}/properties/{}", k, key));
  const ordered_json schema = one ? calls[0] : ordered_json{{"anyOf", std::move(calls)}};
  grammar::SchemaError se;
  auto text = grammar::json_schema_to_gbnf(schema, &se);
  if (!text) {
    *err = bad_request(fmt::format("unsupported JSON schema in the tools' parameters: {}", se.message), "tools");
    return std::nullopt;
  }
  return tool_call_gbnf(c.tool_format, *text, c.parallel);
}

std::shared_ptr<const grammar::CompiledGrammar> StructuredOutput::compile(const OutputConstraint& c,
                                                                          const std::string& body_text, ApiError* err) {
  std::string gbnf;
  switch (c.kind) {
    case Kind::kNone: return nullptr;
    case Kind::kJsonObject: gbnf = grammar::json_object_gbnf(); break;
    case Kind::kChoice: gbnf = grammar::choice_gbnf(c.choices); break;
    case Kind::kGrammar: gbnf = c.text; break;
    case Kind::kRegex: {
      auto body = grammar::regex_to_gbnf(c.text);
      if (!body) {
        *err = bad_request(body.status().message(), c.param);
        return nullptr;
      }
      gbnf = "root ::= " + *body + "\n";
      break;
    }
    case Kind::kJsonSchema: {
      ordered_json schema;
      if (!c.schema_pointer.empty()) {
        ordered_json body = ordered_json::parse(body_text, nullptr, false);
        const ordered_json::json_pointer ptr(c.schema_pointer);
        if (body.is_discarded() || !body.contains(ptr)) {
          *err = bad_request("the JSON schema could not be read", c.param);
          return nullptr;
        }
        schema = body.at(ptr);
      } else {
        schema = ordered_json::parse(c.text, nullptr, false);
        if (schema.is_discarded()) {
          *err = bad_request(fmt::format("'{}' is not valid JSON", c.param), c.param);
          return nullptr;
        }
      }
      grammar::SchemaError se;
      auto text = grammar::json_schema_to_gbnf(schema, &se);
      if (!text) {
        *err = bad_request(fmt::format("unsupported JSON schema: {}{}", se.message,
                                       se.path.empty() ? "" : " (at " + se.path + ")"),
                           c.param);
        return nullptr;
      }
      gbnf = std::move(*text);
      break;
    }
    case Kind::kToolCall: {
      if (c.tool_format == ToolCallFormat::kHarmony) return nullptr;  // harmony_call()
      auto text = tool_call_grammar(c, body_text, err);
      if (!text) return nullptr;
      gbnf = std::move(*text);
      break;
    }
  }
  if (c.compact) gbnf = grammar::with_json_whitespace(std::move(gbnf), "\"\"");
  return compile_gbnf(gbnf, c.param, err);
}

std::shared_ptr<const grammar::CompiledGrammar> StructuredOutput::compile_gbnf(const std::string& gbnf,
                                                                               const std::string& param,
                                                                               ApiError* err) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = by_text_.find(gbnf); it != by_text_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto g = grammar::parse_gbnf(gbnf);
  if (!g) {
    *err = bad_request(g.status().message(), param);
    return nullptr;
  }
  auto compiled = grammar::CompiledGrammar::compile(std::move(g.value()), vocab_);
  std::lock_guard<std::mutex> lk(mu_);
  if (by_text_.count(gbnf)) return compiled;
  lru_.emplace_front(gbnf, compiled);
  by_text_[gbnf] = lru_.begin();
  if (lru_.size() > kCacheSize) {
    by_text_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

std::shared_ptr<const LogitsProcessor> StructuredOutput::harmony_call(const OutputConstraint& c,
                                                                    const std::string& body_text,
                                                                    const std::vector<int32_t>& stop_ids,
                                                                    bool forced_jumps, ApiError* err) {
  std::vector<ChosenTool> chosen;
  if (!chosen_tools(c, body_text, &chosen, err)) return nullptr;
  auto spec = std::make_shared<HarmonyCallLogits::Spec>();
  std::vector<std::string> names;
  for (ChosenTool& t : chosen) {
    auto g = compile_gbnf(grammar::with_json_whitespace(std::move(t.gbnf), "| \" \""), t.where, err);
    if (!g) return nullptr;
    spec->args.emplace_back(t.name, processor(g, {}, stop_ids, forced_jumps));
    names.push_back(t.name + " ");
  }
  auto names_g = compile_gbnf(grammar::choice_gbnf(names), "tool_choice", err);
  if (!names_g) return nullptr;
  spec->names = processor(names_g, {}, {}, forced_jumps);
  EncodeOptions eo;
  eo.add_bos = false;
  eo.parse_special = true;
  spec->separator = tok_.encode("<|constrain|>json<|message|>", eo);
  spec->vocab = vocab_;
  for (std::string_view m : {"<|end|>", "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|call|>",
                             "<|return|>"})
    if (const int32_t id = tok_.token_id(m); id >= 0 && !vocab_->bytes[id].empty()) spec->banned.push_back(id);
  return std::make_shared<HarmonyCallLogits>(std::move(spec));
}

std::shared_ptr<const LogitsProcessor> StructuredOutput::processor(
    std::shared_ptr<const grammar::CompiledGrammar> g, const std::vector<std::pair<int32_t, float>>& logit_bias,
    const std::vector<int32_t>& stop_ids, bool forced_jumps, const std::string& trigger) const {
  if (!g && logit_bias.empty()) return nullptr;
  return std::make_shared<ConstrainedLogits>(std::move(g), logit_bias, stop_ids, forced_jumps ? &tok_ : nullptr,
                                             worker_, g ? trigger : std::string());
}

ConstrainedLogits::ConstrainedLogits(std::shared_ptr<const grammar::CompiledGrammar> g,
                                     std::vector<std::pair<int32_t, float>> bias, std::vector<int32_t> stop_ids,
                                     const Tokenizer* jump_tok, std::shared_ptr<grammar::MaskWorker> worker,
                                     std::string trigger)
    : jump_tok_(jump_tok),
      worker_(std::move(worker)),
      g_(std::move(g)),
      bias_(std::move(bias)),
      stop_ids_(std::move(stop_ids)),
      trigger_(std::move(trigger)),
      armed_(trigger_.empty()) {
  if (g_) {
    pool_ = g_->new_pool();
    pool_mu_ = std::make_shared<std::mutex>();
    matcher_ = std::make_unique<grammar::GrammarMatcher>(pool_);
    bits_.resize((g_->vocab().n_vocab + 63) / 64);
    if (worker_) prefetch_ = std::make_unique<grammar::MaskPrefetch>(worker_, g_, pool_, pool_mu_);
  }
}

void ConstrainedLogits::prefetch() {
  if (prefetch_) prefetch_->want(matcher_->state());
}

void ConstrainedLogits::process(const int32_t*, int64_t, int64_t, float* logits, int n_vocab) {
  for (auto [id, b] : bias_)
    if (id < n_vocab) logits[id] += b;
  if (!g_ || !armed_) return;
  const grammar::StateId s = matcher_->state();
  std::unique_lock<std::mutex> lk(*pool_mu_, std::defer_lock);
  if (!prefetch_ || !prefetch_->take(s, &bits_)) {
    lk.lock();
    g_->fill_mask(*pool_, s, bits_.data());
  } else {
    lk.lock();
  }
  const bool can_end = matcher_->can_end();
  lk.unlock();
  bool any = false;
  for (uint64_t w : bits_) any |= w != 0;
  // End-of-generation tokens where the grammar may end (or, should it ever
  // admit nothing, so that generation can stop).
  if (can_end || !any)
    for (int32_t t : stop_ids_)
      if (t >= 0 && t < g_->vocab().n_vocab) bits_[t >> 6] |= uint64_t{1} << (t & 63);
  const int nv = std::min(n_vocab, g_->vocab().n_vocab);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int w = 0; w * 64 < nv; ++w) {
    const uint64_t m = bits_[w];
    if (m == ~uint64_t{0}) continue;
    const int end = std::min(nv, w * 64 + 64);
    if (m == 0) {
      std::fill(logits + w * 64, logits + end, kNegInf);
      continue;
    }
    for (int i = w * 64; i < end; ++i)
      if (!((m >> (i - w * 64)) & 1)) logits[i] = kNegInf;
  }
  for (int i = nv; i < n_vocab; ++i) logits[i] = kNegInf;
}

void ConstrainedLogits::accept(int32_t token) {
  if (!g_) return;
  if (!armed_) {
    if (token < 0 || token >= g_->vocab().n_vocab) return;
    seen_ += g_->vocab().bytes[token];
    const size_t at = seen_.find(trigger_);
    if (at == std::string::npos) {
      if (seen_.size() >= trigger_.size()) seen_.erase(0, seen_.size() - trigger_.size() + 1);
      return;
    }
    // The grammar takes the text from the trigger on (the trigger itself
    // first, so that a token running past it cannot lose it).
    armed_ = true;
    {
      std::lock_guard<std::mutex> lk(*pool_mu_);
      const std::string_view rest = std::string_view(seen_).substr(at + trigger_.size());
      if (!matcher_->accept(trigger_) || (!rest.empty() && !matcher_->accept(rest))) matcher_->accept_nothing();
    }
    seen_.clear();
    prefetch();
    return;
  }
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    matcher_->accept_nothing();
    return;  // the end: no next mask
  }
  {
    std::lock_guard<std::mutex> lk(*pool_mu_);
    if (token < 0 || token >= g_->vocab().n_vocab || !matcher_->accept(g_->vocab().bytes[token]))
      matcher_->accept_nothing();
  }
  prefetch();
}

void ConstrainedLogits::forced_tokens(std::vector<int32_t>* out) {
  if (!g_ || !jump_tok_ || !armed_) return;
  std::lock_guard<std::mutex> lk(*pool_mu_);
  const std::string bytes = matcher_->forced_bytes(kMaxForcedBytes);
  if (bytes.empty()) return;
  EncodeOptions eo;
  eo.add_bos = false;
  const std::vector<int32_t> ids = jump_tok_->encode(bytes, eo);
  grammar::StackPool& pool = *pool_;
  const bool complete = !pool.live(pool.advance(matcher_->state(), bytes));
  const size_t keep = complete || ids.empty() ? ids.size() : ids.size() - 1;
  grammar::StateId s = matcher_->state();
  for (size_t i = 0; i < keep; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= g_->vocab().n_vocab || g_->vocab().bytes[id].empty()) break;
    s = pool.advance(s, g_->vocab().bytes[id]);
    if (s == grammar::kDeadState) break;
    out->push_back(id);
  }
}

std::unique_ptr<LogitsProcessor> ConstrainedLogits::clone() const {
  auto c = std::make_unique<ConstrainedLogits>(nullptr, bias_, stop_ids_, jump_tok_, worker_, trigger_);
  c->armed_ = armed_;
  c->seen_ = seen_;
  c->g_ = g_;
  c->pool_ = pool_;
  c->pool_mu_ = pool_mu_;
  if (matcher_) c->matcher_ = std::make_unique<grammar::GrammarMatcher>(*matcher_);
  c->bits_.resize(bits_.size());
  if (g_ && worker_) {
    c->prefetch_ = std::make_unique<grammar::MaskPrefetch>(worker_, g_, pool_, pool_mu_);
    if (armed_) c->prefetch();  // the first mask, while the prompt is computed
  }
  return c;
}

}  // namespace ember
