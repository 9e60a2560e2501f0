// Tokenizers: text <-> token ids, exactly as the reference implementations do
// it, for the two vocabulary kinds found in GGUF files.
//
//   tokenizer.ggml.model = "llama": SentencePiece-style BPE (Gemma, Llama 2,
//     Mistral). Spaces become U+2581 (plus one in front when
//     add_space_prefix), adjacent pieces are merged highest token score first,
//     and pieces that are not tokens fall back to <0xNN> byte tokens. Token
//     ids match llama.cpp (checked on Gemma 3) and sentencepiece.
//   tokenizer.ggml.model = "gpt2": byte-level BPE (Llama 3, Qwen2/2.5/3,
//     GPT-2). Text is split by the pre-tokenizer regex named by
//     tokenizer.ggml.pre (PCRE2, UTF + Unicode properties), bytes are mapped to
//     GPT-2's printable code points, and merges apply lowest rank first. Token
//     ids match Hugging Face `tokenizers` on the model's tokenizer.json
//     (checked on Llama 3.2 and Qwen3). Invalid UTF-8 input is first repaired
//     (each bad byte -> U+FFFD), as llama.cpp does.
//
// Usage:
//   auto tok = Tokenizer::from_metadata(model_file->metadata);  // GGUF keys
//   if (!tok) return tok.status();
//   std::vector<int32_t> ids = (*tok)->encode(user_text);         // + BOS if the model wants it
//   auto prompt = (*tok)->encode(rendered_chat, {.add_bos = false, .parse_special = true});
//   std::string text = (*tok)->decode(ids);
//   StreamDecoder sd(**tok);        // while generating:
//   std::string out = sd.push(id);  // never ends inside a UTF-8 character
//   out += sd.flush();              // at the end
//   if ((*tok)->is_eog(id)) stop();
//
// Special tokens: control tokens (<start_of_turn>, <|im_start|>, <bos>, ...)
// in the input text become single tokens only with parse_special = true (for
// chat templates); otherwise they are ordinary text, so user content cannot
// inject them. User-defined tokens (Gemma's whitespace runs and HTML tags,
// Qwen's <think>, <tool_call>) are always matched, as the references do.
// Overlapping special tokens are resolved like llama.cpp: longest first, then
// leftmost.
//
// A Hugging Face folder (tokenizer.json + tokenizer_config.json, and
// tokenizer.model for SentencePiece models) is read with
// metadata_from_hf_tokenizer(), which fills the same GGUF keys;
// from_metadata() does this itself when the metadata has no vocabulary but
// has the key "ember.hf.dir".
//
// Speed: words are merged with a heap over a linked list of symbols
// (O(n log n)) and cached, so English encodes at tens of MB/s on one core
// and 1 MB without any space finishes in well under a second.
//
// Thread safety: a Tokenizer is immutable after construction apart from its
// internal, mutex-protected word caches; encode/decode may be called from
// several threads. A StreamDecoder belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/metadata.h"

namespace ember {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Everything a tokenizer is built from: the GGUF tokenizer keys as plain data.
// from_metadata() fills one from Metadata; the Hugging Face reader fills one
// from tokenizer.json. Optional fields left unset take the reference defaults
// for the model kind.
struct VocabSpec {
  std::string model;                   // "llama" or "gpt2"
  std::string pre;                     // tokenizer.ggml.pre ("llama-bpe", "qwen2", "gpt-2", "default", ...)
  std::vector<std::string> pre_regex;  // explicit pre-tokenizer regexes (override `pre`), applied in order
  std::string normalizer;              // "" or "NFC" (applied to text before encoding)
  std::vector<std::string> tokens;
  std::vector<float> scores;           // empty: all 0
  std::vector<int32_t> token_types;    // empty: all normal
  std::vector<std::string> merges;     // "left right", gpt2 models only
  std::optional<int32_t> bos_id, eos_id, eot_id, eom_id, unk_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix, ignore_merges;
  std::vector<int32_t> extra_eog_ids;  // more end-of-generation ids (e.g. generation_config.json)
  std::string model_name;              // general.name (some reference rules key on it)
  std::string chat_template;           // tokenizer.chat_template, passed through
};

// Reads the tokenizer.ggml.* keys (and ember.tokenizer.* extensions) into a spec.
Status vocab_spec_from_metadata(const Metadata& md, VocabSpec* out);
// Reads a Hugging Face tokenizer folder: tokenizer.json (required),
// tokenizer_config.json and generation_config.json (optional). Supports
// byte-level BPE models; SentencePiece-style models need tokenizer.model
// next to tokenizer.json. Anything else is an error naming what is missing.
Status vocab_spec_from_hf_tokenizer(const std::string& dir, VocabSpec* out);
// Same, written as GGUF keys (tokenizer.ggml.*, tokenizer.chat_template,
// ember.tokenizer.*) into `out` (existing keys are replaced).
Status metadata_from_hf_tokenizer(const std::string& dir, Metadata* out);
// Writes a spec as GGUF-style keys.
void vocab_spec_to_metadata(const VocabSpec& spec, Metadata* out);

struct EncodeOptions {
  // Add the special tokens the model asks for: BOS when add_bos_token is set
  // (the default for "llama" models and Llama 3), EOS when add_eos_token is
  // set. This is llama.cpp's `add_special` / HF's `add_special_tokens`.
  bool add_bos = true;
  // Match control tokens written in the text (chat templates). User-defined
  // tokens are matched either way.
  bool parse_special = false;
  // With parse_special: byte ranges [first, second) of `text` in which
  // control tokens are NOT matched (user content inside a rendered chat
  // template), so users cannot inject <start_of_turn> or <|im_start|>.
  const std::vector<std::pair<size_t, size_t>>* no_special_ranges = nullptr;
};

class TokenizerImpl;

class Tokenizer {
 public:
  enum class Kind { kSentencePieceBpe, kByteLevelBpe };

  static Result<std::unique_ptr<Tokenizer>> from_metadata(const Metadata& md);
  static Result<std::unique_ptr<Tokenizer>> from_spec(VocabSpec spec);
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, EncodeOptions opts = {}) const;
  // Concatenated token pieces. Control/unknown tokens render as "" unless
  // `render_special`. For models with add_space_prefix, the one space the
  // encoder put in front of the text is removed from the first piece that
  // produces text. Out-of-range ids render as "". No clean-up of spaces
  // around punctuation is done, so decode(encode(s)) == s for valid UTF-8.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;
  // The bytes one token stands for (control tokens as their text), without
  // the leading-space rule. "" for out-of-range ids.
  std::string token_to_piece(int32_t id, bool render_special = true) const;
  // The raw vocabulary string of a token (e.g. "▁Hello", "Ġworld", "<0x0A>").
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Id of an exact vocabulary string, or -1.
  int32_t token_id(std::string_view text) const;

  Kind kind() const;
  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;
  int32_t eot_id() const;
  int32_t eom_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: eos, eot, eom and tokens such as <end_of_turn>,
  // <|im_end|>, <|eot_id|>, <|eom_id|>, <|endoftext|>.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;
  const std::string& chat_template() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenizer for generation. The concatenation of all push()
// results and flush() equals tokenizer.decode(ids, render_special); no
// result ends inside an incomplete UTF-8 sequence (bytes that can never
// become a valid character are passed through as they are).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false)
      : tok_(&tok), render_special_(render_special) {}
  std::string push(int32_t id);
  // Emits whatever is held back and resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tok_;
  bool render_special_;
  bool produced_text_ = false;  // for the leading-space rule
  std::string pending_;         // an incomplete UTF-8 tail
};

}  // namespace ember
