// Tokenizer: builds the vocabulary and encoder from a VocabSpec (reference
// defaults, special-token detection, end-of-generation set) and implements
// encode/decode and the streaming decoder.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_util.h"

namespace ember {

using namespace tok;

namespace {

uint32_t attr_from_type(int32_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

// Texts that end generation, and that are forced to control type: the list
// llama.cpp uses (so e.g. Gemma 3's user-defined "</s>" is control there too).
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~[",
};
const char* const kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "<end_of_utterance>",
};
// Fill-in-the-middle pad/repo/file-separator tokens also end generation.
const char* const kFimEogTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>",
                                    "<fim-repo>", "<reponame>", "<|file_sep|>"};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The bytes a token stands for, with control tokens as their text.
std::string compute_piece(const Vocab& v, int32_t id, Tokenizer::Kind kind) {
  const uint32_t a = v.attrs[id];
  const std::string& t = v.texts[id];
  if (a & (kAttrControl | kAttrUnknown | kAttrUserDefined)) return t;
  if (a & kAttrNormal) {
    if (kind == Tokenizer::Kind::kByteLevelBpe) return byte_decode(t);
    std::string r;
    r.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
        r.push_back(' ');
        i += 3;
      } else {
        r.push_back(t[i++]);
      }
    }
    return r;
  }
  if (a & kAttrByte) {
    // "<0xNN>"
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
        std::isxdigit(static_cast<unsigned char>(t[4]))) {
      return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    }
    return t;
  }
  return "";  // unused / undefined
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_metadata(const Metadata& md) {
  VocabSpec spec;
  if (!md.find("tokenizer.ggml.tokens") && md.get_string("ember.hf.dir")) {
    EMBER_RETURN_IF_ERROR(vocab_spec_from_hf_tokenizer(*md.get_string("ember.hf.dir"), &spec));
  } else {
    EMBER_RETURN_IF_ERROR(vocab_spec_from_metadata(md, &spec));
  }
  return from_spec(std::move(spec));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_spec(VocabSpec spec) {
  auto impl = std::make_unique<TokenizerImpl>();
  Kind kind;
  if (spec.model == "llama") {
    kind = Kind::kSentencePieceBpe;
  } else if (spec.model == "gpt2") {
    kind = Kind::kByteLevelBpe;
  } else {
    return Status::errorf("tokenizer: unsupported tokenizer model '{}' (supported: 'llama' = SentencePiece BPE, "
                          "'gpt2' = byte-level BPE)",
                          spec.model);
  }
  impl->kind = kind;
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::error("tokenizer: the vocabulary is empty (tokenizer.ggml.tokens)");
  if (n > 0x7FFFFFF0u) return Status::error("tokenizer: vocabulary too large");
  if (!spec.scores.empty() && spec.scores.size() < n) {
    return Status::errorf("tokenizer: {} scores for {} tokens", spec.scores.size(), n);
  }
  if (!spec.token_types.empty() && spec.token_types.size() < n) {
    return Status::errorf("tokenizer: {} token types for {} tokens", spec.token_types.size(), n);
  }

  Vocab& v = impl->vocab;
  v.texts = std::move(spec.tokens);
  v.scores.assign(n, 0.0f);
  v.attrs.assign(n, kAttrNormal);
  for (size_t i = 0; i < n; ++i) {
    if (v.texts[i].empty()) v.texts[i] = "[EMPTY_" + std::to_string(i) + "]";
    if (!spec.scores.empty()) v.scores[i] = spec.scores[i];
    if (!spec.token_types.empty()) v.attrs[i] = attr_from_type(spec.token_types[i]);
  }
  v.map.build(v.texts);

  // Reference defaults per model kind (llama.cpp's), then the spec's values.
  int32_t bos, eos, unk = -1;
  bool add_bos, add_eos = false, add_space_prefix;
  bool ignore_merges = false;
  if (kind == Kind::kSentencePieceBpe) {
    bos = 1, eos = 2, unk = 0;
    add_bos = true, add_space_prefix = true;
  } else {
    bos = 11, eos = 11;
    add_bos = false, add_space_prefix = false;
  }
  std::vector<std::string> regexes;
  if (kind == Kind::kByteLevelBpe) {
    if (!spec.pre_regex.empty()) {
      regexes = spec.pre_regex;
    } else if (!pre_tokenizer_regexes(spec.pre, &regexes)) {
      return Status::errorf("tokenizer: unknown pre-tokenizer '{}' (tokenizer.ggml.pre)", spec.pre);
    }
    const std::string& p = spec.pre;
    if (p == "llama3" || p == "llama-v3" || p == "llama-bpe" || p == "falcon3" || p == "pixtral") {
      ignore_merges = true;
      add_bos = true;
    }
  }
  auto in_range = [&](std::optional<int32_t> id, int32_t def) -> int32_t {
    int32_t r = id ? *id : def;
    return (r >= 0 && r < static_cast<int32_t>(n)) ? r : -1;
  };
  impl->bos = in_range(spec.bos_id, bos);
  impl->eos = in_range(spec.eos_id, eos);
  impl->unk = in_range(spec.unk_id, unk);
  impl->pad = in_range(spec.pad_id, -1);
  impl->eot = in_range(spec.eot_id, -1);
  impl->eom = in_range(spec.eom_id, -1);
  impl->add_bos = spec.add_bos.value_or(add_bos) && impl->bos >= 0;
  impl->add_eos = spec.add_eos.value_or(add_eos) && impl->eos >= 0;
  impl->add_space_prefix = spec.add_space_prefix.value_or(add_space_prefix);
  ignore_merges = spec.ignore_merges.value_or(ignore_merges);
  impl->nfc = lower(spec.normalizer) == "nfc";
  impl->chat_template = std::move(spec.chat_template);

  // End-of-generation tokens by text; they are forced to control type.
  std::set<int32_t> eog;
  for (const char* t : kEotTexts) {
    const int32_t id = v.map.find(t);
    if (impl->eot < 0 && id >= 0) impl->eot = id;
  }
  if (impl->eom < 0) impl->eom = v.map.find("<|eom_id|>");
  for (const char* t : kEogTexts) {
    const int32_t id = v.map.find(t);
    if (id < 0) continue;
    // A "</s>" that is an ordinary BPE token (Qwen) is text, not a marker.
    if (std::string_view(t) == "</s>" && v.attrs[id] == kAttrNormal && id != impl->eos) continue;
    eog.insert(id);
    v.attrs[id] |= kAttrControl;
  }
  for (const char* t : kFimEogTexts) {
    const int32_t id = v.map.find(t);
    if (id >= 0) eog.insert(id);
  }
  for (int32_t id : {impl->eos, impl->eot, impl->eom}) {
    if (id >= 0) eog.insert(id);
  }
  for (int32_t id : spec.extra_eog_ids) {
    if (id >= 0 && id < static_cast<int32_t>(n)) eog.insert(id);
  }
  // gpt-oss / solar-open style vocabularies: <|end|> separates messages there.
  {
    const int32_t end = v.map.find("<|end|>");
    const bool has_return = v.map.find("<|return|>") >= 0, has_flush = v.map.find("<|flush|>") >= 0;
    const bool has_call = v.map.find("<|call|>") >= 0 || v.map.find("<|calls|>") >= 0;
    if (end >= 0 && has_call && (has_return || has_flush)) {
      eog.erase(end);
      v.attrs[end] = kAttrUserDefined;
    }
  }
  // Gemma 4 style vocabularies: </s> is an ordinary token there.
  {
    const int32_t s_id = v.map.find("</s>");
    if (s_id >= 0 && v.map.find("<|tool_response>") >= 0 && s_id != impl->eos) {
      eog.erase(s_id);
      v.attrs[s_id] = kAttrNormal;
    }
  }
  impl->eog.assign(eog.begin(), eog.end());
  impl->is_eog.assign(n, 0);
  for (int32_t id : impl->eog) impl->is_eog[id] = 1;

  // Phi-3 vocabularies strip whitespace after special tokens (as llama.cpp).
  const std::string name = lower(spec.model_name);
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < n; ++i) {
      if (v.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.attrs[i] |= kAttrRstrip;
    }
    for (const char* t : {"</s>"}) {
      const int32_t id = v.map.find(t);
      if (id >= 0) v.attrs[id] |= kAttrRstrip;
    }
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) {
      const int32_t id = v.map.find(t);
      if (id >= 0) v.attrs[id] &= ~kAttrRstrip;
    }
  }

  impl->specials.build(v);
  if (kind == Kind::kSentencePieceBpe) {
    impl->spm = std::make_unique<SpmEncoder>(v);
  } else {
    auto bpe = ByteBpeEncoder::create(v, spec.merges, regexes, ignore_merges);
    if (!bpe) return bpe.status();
    impl->bpe = std::move(bpe.value());
  }
  impl->pieces.resize(n);
  for (size_t i = 0; i < n; ++i) impl->pieces[i] = compute_piece(v, static_cast<int32_t>(i), kind);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions opts) const {
  const TokenizerImpl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (opts.add_bos && m.add_bos) out.push_back(m.bos);
  const std::vector<Fragment> frags = m.specials.split(text, opts.parse_special, opts.no_special_ranges);
  if (m.kind == Kind::kSentencePieceBpe) {
    bool prev_special = true;  // the first text fragment gets the space prefix
    std::string buf;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      std::string_view piece = text.substr(f.offset, f.length);
      std::string normalized;
      if (m.nfc) {
        normalized = nfc_normalize(piece);
        piece = normalized;
      }
      buf.clear();
      if (m.add_space_prefix && prev_special) buf.append("\xE2\x96\x81");
      for (char c : piece) {
        if (c == ' ') {
          buf.append("\xE2\x96\x81");
        } else {
          buf.push_back(c);
        }
      }
      m.spm->encode(buf, &out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      std::string_view piece = text.substr(f.offset, f.length);
      std::string fixed;
      if (!utf8_is_valid(piece)) {
        fixed = utf8_repair(piece);
        piece = fixed;
      }
      if (m.nfc && !nfc_quick_check(piece)) {
        fixed = nfc_normalize(piece);
        piece = fixed;
      }
      m.bpe->encode(piece, &out);
    }
  }
  if (opts.add_bos && m.add_eos) out.push_back(m.eos);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const size_t before = out.size();
    out += token_to_piece(id, render_special);
    if (first && out.size() > before) {
      first = false;
      if (impl_->add_space_prefix && out[before] == ' ') out.erase(before, 1);
    }
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  const TokenizerImpl& m = *impl_;
  if (!m.vocab.valid(id)) return "";
  if (!render_special && (m.vocab.attrs[id] & (kAttrControl | kAttrUnknown))) return "";
  return m.pieces[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  return impl_->vocab.valid(id) ? impl_->vocab.texts[id] : kEmpty;
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (!impl_->vocab.valid(id)) return TokenType::kUndefined;
  const uint32_t a = impl_->vocab.attrs[id];
  if (a & kAttrControl) return TokenType::kControl;
  if (a & kAttrUserDefined) return TokenType::kUserDefined;
  if (a & kAttrUnknown) return TokenType::kUnknown;
  if (a & kAttrByte) return TokenType::kByte;
  if (a & kAttrUnused) return TokenType::kUnused;
  if (a & kAttrNormal) return TokenType::kNormal;
  return TokenType::kUndefined;
}

int32_t Tokenizer::token_id(std::string_view text) const { return impl_->vocab.map.find(text); }
Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
int32_t Tokenizer::n_vocab() const { return impl_->vocab.n(); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
int32_t Tokenizer::eot_id() const { return impl_->eot; }
int32_t Tokenizer::eom_id() const { return impl_->eom; }
int32_t Tokenizer::unk_id() const { return impl_->unk; }
int32_t Tokenizer::pad_id() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
bool Tokenizer::is_eog(int32_t id) const { return impl_->vocab.valid(id) && impl_->is_eog[id]; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

// ---------------------------------------------------------------------------

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_->token_to_piece(id, render_special_);
  if (piece.empty()) return "";
  if (!produced_text_) {
    produced_text_ = true;
    if (tok_->impl_->add_space_prefix && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  produced_text_ = false;
  return out;
}

}  // namespace ember
