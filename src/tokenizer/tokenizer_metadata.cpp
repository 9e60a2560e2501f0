// Conversion between GGUF tokenizer metadata keys and VocabSpec.
//
// Keys read/written: tokenizer.ggml.{model, pre, tokens, scores, token_type,
// merges, bos_token_id, eos_token_id, eot_token_id, eom_token_id,
// unknown_token_id, padding_token_id, add_bos_token, add_eos_token,
// add_space_prefix}, tokenizer.chat_template, general.name, and ember's
// extensions for what GGUF has no key for: ember.tokenizer.pre_regex
// (string array), ember.tokenizer.normalizer ("NFC"),
// ember.tokenizer.ignore_merges (bool), ember.tokenizer.eog_token_ids.
#include "tokenizer/tokenizer.h"

namespace ember {

namespace {

bool is_array_of(const GgufValue* v, bool (*pred)(GgufType)) {
  return v && v->type == GgufType::kArray && pred(v->elem_type);
}
bool is_string_type(GgufType t) { return t == GgufType::kString; }
bool is_int_type(GgufType t) { return gguf_type_is_int(t); }
bool is_float_type(GgufType t) { return gguf_type_is_float(t); }

Status get_id(const Metadata& md, const std::string& key, std::optional<int32_t>* out) {
  const GgufValue* v = md.find(key);
  if (!v) return Status::ok();
  auto i = md.get_int(key);
  if (!i) return Status::errorf("tokenizer: metadata key {} has type {}, expected an integer", key,
                                gguf_type_name(v->type));
  // Out-of-range ids (including -1 / UINT32_MAX "none") become "no token".
  *out = (*i >= 0 && *i <= INT32_MAX) ? static_cast<int32_t>(*i) : -1;
  return Status::ok();
}

Status get_flag(const Metadata& md, const std::string& key, std::optional<bool>* out) {
  const GgufValue* v = md.find(key);
  if (!v) return Status::ok();
  auto b = md.get_bool(key);
  if (!b) return Status::errorf("tokenizer: metadata key {} has type {}, expected a bool", key, gguf_type_name(v->type));
  *out = *b;
  return Status::ok();
}

}  // namespace

Status vocab_spec_from_metadata(const Metadata& md, VocabSpec* out) {
  VocabSpec s;
  const std::string* model = md.get_string("tokenizer.ggml.model");
  if (!model) return Status::error("tokenizer: metadata has no tokenizer.ggml.model");
  s.model = *model;
  if (const std::string* pre = md.get_string("tokenizer.ggml.pre")) s.pre = *pre;

  const GgufValue* tokens = md.find("tokenizer.ggml.tokens");
  if (!is_array_of(tokens, is_string_type)) {
    return Status::error("tokenizer: metadata has no string array tokenizer.ggml.tokens");
  }
  s.tokens = tokens->strings;
  if (s.tokens.size() != tokens->count) return Status::error("tokenizer: tokenizer.ggml.tokens is inconsistent");

  if (const GgufValue* scores = md.find("tokenizer.ggml.scores")) {
    if (is_array_of(scores, is_float_type)) {
      s.scores.assign(scores->nums.begin(), scores->nums.end());
    } else if (is_array_of(scores, is_int_type)) {
      s.scores.assign(scores->ints.begin(), scores->ints.end());
    } else {
      return Status::error("tokenizer: tokenizer.ggml.scores is not a numeric array");
    }
    if (s.scores.size() < s.tokens.size()) {
      return Status::errorf("tokenizer: {} scores for {} tokens", s.scores.size(), s.tokens.size());
    }
  }
  if (const GgufValue* types = md.find("tokenizer.ggml.token_type")) {
    if (!is_array_of(types, is_int_type)) return Status::error("tokenizer: tokenizer.ggml.token_type is not an int array");
    s.token_types.reserve(types->ints.size());
    for (int64_t t : types->ints) s.token_types.push_back(static_cast<int32_t>(t));
    if (s.token_types.size() < s.tokens.size()) {
      return Status::errorf("tokenizer: {} token types for {} tokens", s.token_types.size(), s.tokens.size());
    }
  }
  if (const GgufValue* merges = md.find("tokenizer.ggml.merges")) {
    if (!is_array_of(merges, is_string_type)) return Status::error("tokenizer: tokenizer.ggml.merges is not a string array");
    s.merges = merges->strings;
  }
  if (s.model == "gpt2" && s.merges.empty()) return Status::error("tokenizer: gpt2 tokenizer without tokenizer.ggml.merges");

  EMBER_RETURN_IF_ERROR(get_id(md, "tokenizer.ggml.bos_token_id", &s.bos_id));
  EMBER_RETURN_IF_ERROR(get_id(md, "tokenizer.ggml.eos_token_id", &s.eos_id));
  EMBER_RETURN_IF_ERROR(get_id(md, "tokenizer.ggml.eot_token_id", &s.eot_id));
  EMBER_RETURN_IF_ERROR(get_id(md, "tokenizer.ggml.eom_token_id", &s.eom_id));
  EMBER_RETURN_IF_ERROR(get_id(md, "tokenizer.ggml.unknown_token_id", &s.unk_id));
  EMBER_RETURN_IF_ERROR(get_id(md, "tokenizer.ggml.padding_token_id", &s.pad_id));
  EMBER_RETURN_IF_ERROR(get_flag(md, "tokenizer.ggml.add_bos_token", &s.add_bos));
  EMBER_RETURN_IF_ERROR(get_flag(md, "tokenizer.ggml.add_eos_token", &s.add_eos));
  EMBER_RETURN_IF_ERROR(get_flag(md, "tokenizer.ggml.add_space_prefix", &s.add_space_prefix));
  EMBER_RETURN_IF_ERROR(get_flag(md, "ember.tokenizer.ignore_merges", &s.ignore_merges));
  if (const GgufValue* re = md.find("ember.tokenizer.pre_regex")) {
    if (!is_array_of(re, is_string_type)) return Status::error("tokenizer: ember.tokenizer.pre_regex is not a string array");
    s.pre_regex = re->strings;
  }
  if (const std::string* norm = md.get_string("ember.tokenizer.normalizer")) s.normalizer = *norm;
  if (const GgufValue* eog = md.find("ember.tokenizer.eog_token_ids")) {
    if (!is_array_of(eog, is_int_type)) return Status::error("tokenizer: ember.tokenizer.eog_token_ids is not an int array");
    for (int64_t id : eog->ints) {
      if (id >= 0 && id <= INT32_MAX) s.extra_eog_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (const std::string* name = md.get_string("general.name")) s.model_name = *name;
  if (const std::string* tmpl = md.get_string("tokenizer.chat_template")) s.chat_template = *tmpl;
  *out = std::move(s);
  return Status::ok();
}

void vocab_spec_to_metadata(const VocabSpec& s, Metadata* md) {
  md->set("tokenizer.ggml.model", Metadata::make_string(s.model));
  if (!s.pre.empty()) md->set("tokenizer.ggml.pre", Metadata::make_string(s.pre));
  md->set("tokenizer.ggml.tokens", Metadata::make_string_array(s.tokens));
  if (!s.scores.empty()) {
    GgufValue g;
    g.type = GgufType::kArray;
    g.elem_type = GgufType::kFloat32;
    g.count = s.scores.size();
    g.nums.assign(s.scores.begin(), s.scores.end());
    md->set("tokenizer.ggml.scores", std::move(g));
  }
  if (!s.token_types.empty()) md->set("tokenizer.ggml.token_type", Metadata::make_int_array(s.token_types));
  if (!s.merges.empty()) md->set("tokenizer.ggml.merges", Metadata::make_string_array(s.merges));
  auto set_id = [&](const char* key, const std::optional<int32_t>& id) {
    if (id && *id >= 0) md->set(key, Metadata::make_int(*id, GgufType::kUint32));
  };
  set_id("tokenizer.ggml.bos_token_id", s.bos_id);
  set_id("tokenizer.ggml.eos_token_id", s.eos_id);
  set_id("tokenizer.ggml.eot_token_id", s.eot_id);
  set_id("tokenizer.ggml.eom_token_id", s.eom_id);
  set_id("tokenizer.ggml.unknown_token_id", s.unk_id);
  set_id("tokenizer.ggml.padding_token_id", s.pad_id);
  auto set_flag = [&](const char* key, const std::optional<bool>& b) {
    if (b) md->set(key, Metadata::make_bool(*b));
  };
  set_flag("tokenizer.ggml.add_bos_token", s.add_bos);
  set_flag("tokenizer.ggml.add_eos_token", s.add_eos);
  set_flag("tokenizer.ggml.add_space_prefix", s.add_space_prefix);
  set_flag("ember.tokenizer.ignore_merges", s.ignore_merges);
  if (!s.pre_regex.empty()) md->set("ember.tokenizer.pre_regex", Metadata::make_string_array(s.pre_regex));
  if (!s.normalizer.empty()) md->set("ember.tokenizer.normalizer", Metadata::make_string(s.normalizer));
  if (!s.extra_eog_ids.empty()) md->set("ember.tokenizer.eog_token_ids", Metadata::make_int_array(s.extra_eog_ids));
  if (!s.chat_template.empty()) md->set("tokenizer.chat_template", Metadata::make_string(s.chat_template));
}

Status metadata_from_hf_tokenizer(const std::string& dir, Metadata* out) {
  VocabSpec spec;
  EMBER_RETURN_IF_ERROR(vocab_spec_from_hf_tokenizer(dir, &spec));
  vocab_spec_to_metadata(spec, out);
  return Status::ok();
}

}  // namespace ember
