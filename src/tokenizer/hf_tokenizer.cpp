// Reads a Hugging Face tokenizer folder into a VocabSpec (GGUF keys as data):
//
//  - byte-level BPE tokenizer.json (Llama 3, Qwen, GPT-2): vocab + added
//    tokens (special -> control, others -> user-defined), merges, the Split /
//    ByteLevel pre-tokenizer regexes, NFC normalizer, ignore_merges, and BOS /
//    EOS handling from the post-processor;
//  - SentencePiece BPE (Llama 2, Mistral, Gemma): pieces, scores and types
//    from tokenizer.model (protobuf), then tokenizer.json's added tokens;
//  - tokenizer_config.json: special token names, add_bos/eos_token,
//    chat_template; chat_template.jinja (where transformers >= 4.47 saves
//    the template, e.g. openai/gpt-oss-*: it takes precedence over
//    tokenizer_config.json's, as in transformers); generation_config.json:
//    extra end-of-generation ids.
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace ember {

namespace {

using json = nlohmann::json;

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return static_cast<bool>(f) || f.eof();
}

Status load_json(const std::string& path, bool required, json* out, bool* found) {
  std::string text;
  *found = read_file(path, &text);
  if (!*found) {
    if (required) return Status::errorf("{}: cannot read file", path);
    return Status::ok();
  }
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return Status::errorf("{}: invalid JSON", path);
  return Status::ok();
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_str(const json& j, const char* key) {
  const json* v = member(j, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<bool> get_bool(const json& j, const char* key) {
  const json* v = member(j, key);
  if (v && v->is_boolean()) return v->get<bool>();
  return std::nullopt;
}

// A special-token entry in tokenizer_config.json: "text" or {"content": "text"}.
std::string token_name(const json& j, const char* key) {
  const json* v = member(j, key);
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return get_str(*v, "content");
  return "";
}

// ---------------------------------------------------------------------------
// SentencePiece model protobuf (only the fields we need).

struct PbReader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) return ok = false;
      const uint8_t b = *p++;
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return ok = false;
  }
  // Reads one field; for length-delimited fields returns the payload view.
  bool field(uint32_t* num, uint32_t* wire, uint64_t* ival, std::string_view* bytes) {
    uint64_t key;
    if (!varint(&key)) return false;
    *num = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    switch (*wire) {
      case 0: return varint(ival);
      case 1:
        if (end - p < 8) return ok = false;
        std::memcpy(ival, p, 8);
        p += 8;
        return true;
      case 5: {
        if (end - p < 4) return ok = false;
        uint32_t v;
        std::memcpy(&v, p, 4);
        *ival = v;
        p += 4;
        return true;
      }
      case 2: {
        uint64_t len;
        if (!varint(&len) || len > static_cast<uint64_t>(end - p)) return ok = false;
        *bytes = std::string_view(reinterpret_cast<const char*>(p), len);
        p += len;
        return true;
      }
      default: return ok = false;
    }
  }
};

Status read_sentencepiece_model(const std::string& path, VocabSpec* s) {
  std::string data;
  if (!read_file(path, &data)) return Status::errorf("{}: cannot read file", path);
  PbReader r{reinterpret_cast<const uint8_t*>(data.data()), reinterpret_cast<const uint8_t*>(data.data()) + data.size()};
  int model_type = 1;  // UNIGRAM
  bool add_dummy_prefix = true;
  std::optional<int32_t> unk, bos, eos, pad;
  uint32_t num, wire;
  uint64_t ival;
  std::string_view bytes;
  while (r.p < r.end) {
    if (!r.field(&num, &wire, &ival, &bytes)) return Status::errorf("{}: malformed SentencePiece model", path);
    if (num == 1 && wire == 2) {  // SentencePiece
      PbReader pr{reinterpret_cast<const uint8_t*>(bytes.data()),
                  reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size()};
      std::string piece;
      float score = 0;
      int32_t type = 1;
      while (pr.p < pr.end) {
        std::string_view b;
        uint64_t v = 0;
        if (!pr.field(&num, &wire, &v, &b)) return Status::errorf("{}: malformed SentencePiece piece", path);
        if (num == 1 && wire == 2) piece.assign(b);
        if (num == 2 && wire == 5) {
          const uint32_t u = static_cast<uint32_t>(v);
          std::memcpy(&score, &u, 4);
        }
        if (num == 3 && wire == 0) type = static_cast<int32_t>(v);
      }
      s->tokens.push_back(std::move(piece));
      s->scores.push_back(score);
      s->token_types.push_back(type);
    } else if (num == 2 && wire == 2) {  // TrainerSpec
      PbReader tr{reinterpret_cast<const uint8_t*>(bytes.data()),
                  reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size()};
      while (tr.p < tr.end) {
        std::string_view b;
        uint64_t v = 0;
        if (!tr.field(&num, &wire, &v, &b)) return Status::errorf("{}: malformed SentencePiece trainer spec", path);
        if (wire != 0) continue;
        const int32_t iv = static_cast<int32_t>(static_cast<uint32_t>(v));
        if (num == 3) model_type = iv;
        if (num == 40) unk = iv;
        if (num == 41) bos = iv;
        if (num == 42) eos = iv;
        if (num == 43) pad = iv;
      }
    } else if (num == 3 && wire == 2) {  // NormalizerSpec
      PbReader nr{reinterpret_cast<const uint8_t*>(bytes.data()),
                  reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size()};
      while (nr.p < nr.end) {
        std::string_view b;
        uint64_t v = 0;
        if (!nr.field(&num, &wire, &v, &b)) return Status::errorf("{}: malformed SentencePiece normalizer", path);
        if (num == 3 && wire == 0) add_dummy_prefix = v != 0;
      }
    }
  }
  if (model_type != 2) {
    return Status::errorf("{}: SentencePiece model type {} is not supported (only BPE = 2; Unigram models are not)",
                          path, model_type);
  }
  if (s->tokens.empty()) return Status::errorf("{}: SentencePiece model has no pieces", path);
  s->model = "llama";
  s->pre = "default";
  s->add_space_prefix = add_dummy_prefix;
  s->unk_id = unk.value_or(0);
  s->bos_id = bos.value_or(1);
  s->eos_id = eos.value_or(2);
  if (pad) s->pad_id = *pad;
  return Status::ok();
}

// Pre-tokenizer regexes from tokenizer.json's pre_tokenizer.
Status collect_pre_tokenizers(const json& pt, std::vector<std::string>* regexes, const std::string& path) {
  const std::string type = get_str(pt, "type");
  if (type == "Sequence") {
    const json* list = member(pt, "pretokenizers");
    if (!list || !list->is_array()) return Status::errorf("{}: pre_tokenizer Sequence without a list", path);
    for (const json& p : *list) EMBER_RETURN_IF_ERROR(collect_pre_tokenizers(p, regexes, path));
    return Status::ok();
  }
  if (type == "Split") {
    const json* pat = member(pt, "pattern");
    const std::string behavior = get_str(pt, "behavior");
    if (behavior != "Isolated" || get_bool(pt, "invert").value_or(false)) {
      return Status::errorf("{}: Split pre-tokenizer with behavior '{}' is not supported (only Isolated)", path,
                            behavior);
    }
    if (pat && member(*pat, "Regex")) {
      regexes->push_back(get_str(*pat, "Regex"));
    } else if (pat && member(*pat, "String")) {
      std::string lit = get_str(*pat, "String");
      std::string re = "\\Q" + lit + "\\E";
      regexes->push_back(re);
    } else {
      return Status::errorf("{}: Split pre-tokenizer without a pattern", path);
    }
    return Status::ok();
  }
  if (type == "ByteLevel") {
    if (get_bool(pt, "add_prefix_space").value_or(false)) {
      return Status::errorf("{}: ByteLevel pre-tokenizer with add_prefix_space is not supported", path);
    }
    if (get_bool(pt, "use_regex").value_or(true)) {
      std::vector<std::string> gpt2;
      tok::pre_tokenizer_regexes("gpt-2", &gpt2);
      regexes->insert(regexes->end(), gpt2.begin(), gpt2.end());
    }
    return Status::ok();
  }
  if (type == "Digits") {
    regexes->push_back(get_bool(pt, "individual_digits").value_or(false) ? "\\p{N}" : "\\p{N}+");
    return Status::ok();
  }
  return Status::errorf("{}: pre-tokenizer type '{}' is not supported", path, type);
}

// Finds the TemplateProcessing "single" template and reports whether it
// starts / ends with a special token (and which).
void template_specials(const json& pp, std::string* first, std::string* last, bool* found) {
  const std::string type = get_str(pp, "type");
  if (type == "Sequence") {
    if (const json* list = member(pp, "processors"); list && list->is_array()) {
      for (const json& p : *list) template_specials(p, first, last, found);
    }
    return;
  }
  if (type != "TemplateProcessing") return;
  const json* single = member(pp, "single");
  if (!single || !single->is_array() || single->empty()) return;
  *found = true;
  auto special_id = [](const json& item) -> std::string {
    const json* st = member(item, "SpecialToken");
    return st ? get_str(*st, "id") : std::string();
  };
  *first = special_id(single->front());
  *last = single->size() > 1 ? special_id(single->back()) : std::string();
}

bool looks_sentencepiece(const json& tj) {
  const json* model = member(tj, "model");
  if (model && get_bool(*model, "byte_fallback").value_or(false)) return true;
  const json* pt = member(tj, "pre_tokenizer");
  if (pt && get_str(*pt, "type") == "Metaspace") return true;
  const json* dec = member(tj, "decoder");
  if (dec && get_str(*dec, "type") == "Metaspace") return true;
  const json* norm = member(tj, "normalizer");
  if (norm && norm->dump().find("\xE2\x96\x81") != std::string::npos) return true;
  return false;
}

Status read_hf(const std::string& dir, VocabSpec* out) {
  const std::string tj_path = dir + "/tokenizer.json";
  json tj;
  bool found = false;
  EMBER_RETURN_IF_ERROR(load_json(tj_path, false, &tj, &found));
  if (!found) {
    // Older SentencePiece repositories ship only tokenizer.model.
    if (!std::ifstream(dir + "/tokenizer.model")) {
      return Status::errorf("{}: no tokenizer.json or tokenizer.model in this folder", dir);
    }
    tj = json::object();
    tj["model"] = {{"type", "BPE"}, {"byte_fallback", true}};
  }
  const json* model = member(tj, "model");
  if (!model) return Status::errorf("{}: no model section", tj_path);
  const std::string mtype = get_str(*model, "type");
  if (mtype != "BPE") return Status::errorf("{}: tokenizer model type '{}' is not supported (only BPE)", tj_path, mtype);

  VocabSpec s;
  const bool spm = looks_sentencepiece(tj);
  if (spm) {
    const std::string sp_path = dir + "/tokenizer.model";
    std::ifstream probe(sp_path);
    if (!probe) {
      return Status::errorf("{}: SentencePiece-style BPE tokenizer.json is only supported with its tokenizer.model "
                            "next to it ({} is missing)",
                            tj_path, sp_path);
    }
    EMBER_RETURN_IF_ERROR(read_sentencepiece_model(sp_path, &s));
  } else {
    s.model = "gpt2";
    const json* vocab = member(*model, "vocab");
    if (!vocab || !vocab->is_object()) return Status::errorf("{}: model.vocab is not an object", tj_path);
    int64_t max_id = -1;
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      if (!it.value().is_number_integer()) return Status::errorf("{}: non-integer id in model.vocab", tj_path);
      max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
    }
    if (const json* added = member(tj, "added_tokens"); added && added->is_array()) {
      for (const json& a : *added) {
        if (const json* id = member(a, "id"); id && id->is_number_integer()) max_id = std::max<int64_t>(max_id, id->get<int64_t>());
      }
    }
    if (max_id < 0 || max_id >= (1 << 24)) return Status::errorf("{}: bad vocabulary size {}", tj_path, max_id + 1);
    const size_t n = static_cast<size_t>(max_id + 1);
    s.tokens.assign(n, std::string());
    s.token_types.assign(n, static_cast<int32_t>(TokenType::kUnused));
    std::vector<bool> filled(n, false);
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      const int64_t id = it.value().get<int64_t>();
      if (id < 0) return Status::errorf("{}: negative id in model.vocab", tj_path);
      s.tokens[id] = it.key();
      s.token_types[id] = static_cast<int32_t>(TokenType::kNormal);
      filled[id] = true;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!filled[i]) s.tokens[i] = "[PAD" + std::to_string(i) + "]";
    }
    const json* merges = member(*model, "merges");
    if (!merges || !merges->is_array()) return Status::errorf("{}: model.merges is not an array", tj_path);
    s.merges.reserve(merges->size());
    for (const json& m : *merges) {
      if (m.is_string()) {
        s.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        s.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return Status::errorf("{}: bad entry in model.merges", tj_path);
      }
    }
    if (get_bool(*model, "ignore_merges").value_or(false)) s.ignore_merges = true;
    else s.ignore_merges = false;
    if (!get_str(*model, "continuing_subword_prefix").empty() || !get_str(*model, "end_of_word_suffix").empty()) {
      return Status::errorf("{}: BPE continuing_subword_prefix / end_of_word_suffix are not supported", tj_path);
    }
    if (const json* pt = member(tj, "pre_tokenizer")) {
      std::vector<std::string> regexes;
      EMBER_RETURN_IF_ERROR(collect_pre_tokenizers(*pt, &regexes, tj_path));
      if (regexes.size() == 1 && !tok::pre_name_for_regex(regexes[0]).empty()) {
        s.pre = tok::pre_name_for_regex(regexes[0]);
      } else {
        s.pre = "custom";
        s.pre_regex = regexes;
        if (regexes.empty()) s.pre_regex.push_back("(?s).+");  // no splitting
      }
    } else {
      s.pre = "custom";
      s.pre_regex.push_back("(?s).+");
    }
    if (const json* norm = member(tj, "normalizer")) {
      const std::string nt = get_str(*norm, "type");
      if (nt == "NFC") {
        s.normalizer = "NFC";
      } else if (nt == "Sequence" && member(*norm, "normalizers") && member(*norm, "normalizers")->empty()) {
        // no-op
      } else {
        return Status::errorf("{}: normalizer '{}' is not supported for byte-level BPE", tj_path, nt);
      }
    }
    s.bos_id = -1;
    s.eos_id = -1;
    s.unk_id = -1;
  }

  // Added tokens (both kinds).
  std::map<std::string, int32_t> added_ids;
  if (const json* added = member(tj, "added_tokens"); added && added->is_array()) {
    for (const json& a : *added) {
      const json* idj = member(a, "id");
      const std::string content = get_str(a, "content");
      if (!idj || !idj->is_number_integer() || content.empty()) continue;
      const int64_t id = idj->get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(s.tokens.size())) {
        return Status::errorf("{}: added token '{}' has id {} outside the vocabulary of {}", tj_path, content, id,
                              s.tokens.size());
      }
      const bool special = get_bool(a, "special").value_or(false);
      s.tokens[id] = content;
      s.token_types[id] = static_cast<int32_t>(special ? TokenType::kControl : TokenType::kUserDefined);
      added_ids[content] = static_cast<int32_t>(id);
    }
  }
  auto id_of = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    auto it = added_ids.find(text);
    if (it != added_ids.end()) return it->second;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      if (s.tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };

  if (!spm) {
    std::string first, last;
    bool has_template = false;
    if (const json* pp = member(tj, "post_processor")) template_specials(*pp, &first, &last, &has_template);
    if (has_template) {
      s.add_bos = !first.empty();
      s.add_eos = !last.empty();
      if (!first.empty()) s.bos_id = id_of(first);
      if (!last.empty()) s.eos_id = id_of(last);
    } else {
      s.add_bos = false;
      s.add_eos = false;
    }
  }

  // tokenizer_config.json
  json cfg;
  EMBER_RETURN_IF_ERROR(load_json(dir + "/tokenizer_config.json", false, &cfg, &found));
  if (found) {
    if (const std::string b = token_name(cfg, "bos_token"); !b.empty() && id_of(b) >= 0) s.bos_id = id_of(b);
    if (const std::string e = token_name(cfg, "eos_token"); !e.empty() && id_of(e) >= 0) s.eos_id = id_of(e);
    if (const std::string u = token_name(cfg, "unk_token"); !u.empty() && id_of(u) >= 0) s.unk_id = id_of(u);
    if (const std::string p = token_name(cfg, "pad_token"); !p.empty() && id_of(p) >= 0) s.pad_id = id_of(p);
    if (auto b = get_bool(cfg, "add_bos_token")) s.add_bos = *b;
    if (auto e = get_bool(cfg, "add_eos_token")) s.add_eos = *e;
    if (const json* ct = member(cfg, "chat_template")) {
      if (ct->is_string()) {
        s.chat_template = ct->get<std::string>();
      } else if (ct->is_array()) {
        for (const json& t : *ct) {
          if (get_str(t, "name") == "default") s.chat_template = get_str(t, "template");
        }
      }
    }
  }
  // chat_template.jinja: the template as a file of its own (transformers
  // reads it after tokenizer_config.json, so it wins).
  if (std::string tmpl; read_file(dir + "/chat_template.jinja", &tmpl)) {
    if (tmpl.empty()) return Status::errorf("{}/chat_template.jinja: empty file", dir);
    s.chat_template = std::move(tmpl);
  }
  // generation_config.json: eos_token_id may list several end tokens.
  json gen;
  EMBER_RETURN_IF_ERROR(load_json(dir + "/generation_config.json", false, &gen, &found));
  if (found) {
    if (const json* e = member(gen, "eos_token_id")) {
      if (e->is_number_integer()) s.extra_eog_ids.push_back(e->get<int32_t>());
      if (e->is_array()) {
        for (const json& x : *e) {
          if (x.is_number_integer()) s.extra_eog_ids.push_back(x.get<int32_t>());
        }
      }
    }
  }
  *out = std::move(s);
  return Status::ok();
}

}  // namespace

Status vocab_spec_from_hf_tokenizer(const std::string& dir, VocabSpec* out) {
  try {
    return read_hf(dir, out);
  } catch (const std::exception& e) {
    return Status::errorf("{}: cannot read tokenizer: {}", dir, e.what());
  }
}

}  // namespace ember
