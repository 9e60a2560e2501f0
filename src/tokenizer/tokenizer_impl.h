// Internal pieces of the tokenizer: the vocabulary with fast string lookup,
// the special-token splitter, and the two BPE encoders. Not part of the
// public API (see tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ember::tok {

// Token attributes, as llama.cpp derives them from the GGUF token types.
enum : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
};

uint64_t hash_bytes(std::string_view s);

// Open-addressing map from token text to id. Texts are views into storage
// owned by the caller (the Vocab), which must not change after building.
class TextIdMap {
 public:
  void build(const std::vector<std::string>& texts);  // later duplicates win
  int32_t find(std::string_view s) const;

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
};

// Open-addressing map from a (left id, right id) pair to merge rank and
// the merged token.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t merged;
  };
  void reserve(size_t n);
  // Keeps the first value inserted for a key.
  void insert(int32_t a, int32_t b, Value v);
  const Value* find(int32_t a, int32_t b) const;
  size_t size() const { return size_; }

 private:
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
  void grow();
};

// Priority queue with four children per node: half the depth of a binary
// heap and siblings share cache lines, which matters for the million-entry
// queues of very long words. `Before(a, b)`: a is popped before b.
template <typename T, typename Before>
class QuadHeap {
 public:
  void reserve(size_t n) { v_.reserve(n); }
  bool empty() const { return v_.empty(); }
  // Appends without ordering; call heapify() before the first pop.
  void push_unordered(const T& x) { v_.push_back(x); }
  void heapify() {
    if (v_.size() < 2) return;
    for (size_t i = (v_.size() - 2) / 4 + 1; i-- > 0;) sift_down(i);
  }
  void push(const T& x) {
    v_.push_back(x);
    sift_up(v_.size() - 1);
  }
  T pop() {
    const T top = v_[0];
    const T last = v_.back();
    v_.pop_back();
    if (!v_.empty()) {
      v_[0] = last;
      sift_down(0);
    }
    return top;
  }

 private:
  void sift_up(size_t i) {
    const T x = v_[i];
    while (i > 0) {
      const size_t p = (i - 1) / 4;
      if (!before_(x, v_[p])) break;
      v_[i] = v_[p];
      i = p;
    }
    v_[i] = x;
  }
  void sift_down(size_t i) {
    const T x = v_[i];
    const size_t n = v_.size();
    while (true) {
      const size_t c = 4 * i + 1;
      if (c >= n) break;
      size_t best = c;
      const size_t end = c + 4 < n ? c + 4 : n;
      for (size_t k = c + 1; k < end; ++k) {
        if (before_(v_[k], v_[best])) best = k;
      }
      if (!before_(v_[best], x)) break;
      v_[i] = v_[best];
      i = best;
    }
    v_[i] = x;
  }
  std::vector<T> v_;
  Before before_;
};

struct Vocab {
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<uint32_t> attrs;
  TextIdMap map;
  int32_t n() const { return static_cast<int32_t>(texts.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < n(); }
};

// A piece of input after special-token splitting: either raw text (a range
// of the input) or one token.
struct Fragment {
  int32_t token = -1;  // -1: text
  size_t offset = 0, length = 0;
};

// Splits text on special tokens exactly like llama.cpp's
// tokenizer_st_partition: special tokens are tried longest first (ties in
// the order std::sort leaves them, which we reproduce by sorting the same
// way), each matching at its leftmost non-overlapping occurrences in the
// text not yet claimed. Runs in time linear in the number of matches.
class SpecialSplitter {
 public:
  void build(const Vocab& vocab);
  // Control tokens overlapping a range in `no_special` are not matched.
  std::vector<Fragment> split(std::string_view text, bool parse_special,
                              const std::vector<std::pair<size_t, size_t>>* no_special = nullptr) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Entry {
    int32_t id;
    uint32_t len;
    bool needs_parse_special;  // control/unknown: only with parse_special
    uint32_t attrs;
  };
  std::vector<Entry> tokens_;  // in priority order
  // Trie over token bytes: (node, byte) -> child in a hash map, plus the
  // entry index ending at each node (for parse_special = false / true).
  PairMap edges_;
  std::vector<int32_t> node_entry_[2];  // entry index or -1
  uint8_t first_byte_[2][256] = {};     // byte can start an eligible token
  std::vector<uint32_t> lengths_desc_[2];  // distinct eligible lengths, descending
  int32_t child(int32_t node, uint8_t c) const {
    const PairMap::Value* v = edges_.find(node, c);
    return v ? v->rank : -1;
  }
};

// SentencePiece-style BPE as llama.cpp's SPM tokenizer does it.
class SpmEncoder {
 public:
  explicit SpmEncoder(const Vocab& vocab);
  // `text` already has spaces escaped as U+2581.
  void encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  void encode_chunk(std::string_view text, std::vector<int32_t>* out) const;
  void emit_bytes(std::string_view bytes, std::vector<int32_t>* out) const;
  const Vocab& vocab_;
  int32_t byte_tokens_[256];
  // Tokens that contain U+2581 after a non-U+2581 prefix, with each such
  // offset: they may cross a word boundary, which we check before cutting.
  struct Crossing {
    std::string text;
    size_t offset;
  };
  std::vector<Crossing> crossings_;
  bool chunking_ = true;
  uint32_t max_token_len_ = 0;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// Byte-level BPE with a regex pre-tokenizer.
class ByteBpeEncoder {
 public:
  static Result<std::unique_ptr<ByteBpeEncoder>> create(const Vocab& vocab, const std::vector<std::string>& merges,
                                                         const std::vector<std::string>& regexes,
                                                         bool ignore_merges);
  ~ByteBpeEncoder();
  // `text` must be valid UTF-8.
  void encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  explicit ByteBpeEncoder(const Vocab& vocab);
  void split(std::string_view text, std::vector<std::string_view>* words) const;
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;
  const Vocab& vocab_;
  PairMap merges_;
  int32_t byte_tokens_[256];
  bool ignore_merges_ = false;
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// Regexes of the pre-tokenizers we know by their tokenizer.ggml.pre name.
// Returns false for an unknown name.
bool pre_tokenizer_regexes(const std::string& pre, std::vector<std::string>* out);
// The tokenizer.ggml.pre name for a Hugging Face Split regex, or "".
std::string pre_name_for_regex(const std::string& regex);

}  // namespace ember::tok

namespace ember {

class TokenizerImpl {
 public:
  Tokenizer::Kind kind = Tokenizer::Kind::kSentencePieceBpe;
  tok::Vocab vocab;
  tok::SpecialSplitter specials;
  std::unique_ptr<tok::SpmEncoder> spm;
  std::unique_ptr<tok::ByteBpeEncoder> bpe;
  std::vector<std::string> pieces;  // decoded bytes per token (special rendered)
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool nfc = false;
  std::vector<int32_t> eog;
  std::vector<uint8_t> is_eog;
  std::string chat_template;
};

}  // namespace ember
