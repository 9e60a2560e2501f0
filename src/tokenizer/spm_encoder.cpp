// SentencePiece-style BPE ("llama" vocabularies: Gemma, Llama 2, Mistral),
// matching llama.cpp's SPM tokenizer: the text (spaces already escaped as
// U+2581) is split into UTF-8 symbols by lead byte, adjacent symbols whose
// concatenation is a token are merged highest score first (ties: leftmost),
// and symbols that are not tokens are emitted as <0xNN> byte tokens.
//
// Speed: the text is cut into words at U+2581 boundaries that no token can
// cross (checked against the vocabulary at load time), words are merged
// independently, and each word's result is cached. Merging uses a binary
// heap over a linked list of symbols: O(n log n) per word.
#include <algorithm>
#include <cstring>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_util.h"

namespace ember::tok {

namespace {

constexpr char kSpace[] = "\xE2\x96\x81";  // U+2581
constexpr size_t kSpaceLen = 3;
constexpr size_t kMaxCachedWord = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;

bool is_space_at(std::string_view s, size_t p) {
  return p + kSpaceLen <= s.size() && std::memcmp(s.data() + p, kSpace, kSpaceLen) == 0;
}

struct Symbol {
  uint32_t start;
  uint32_t n;  // 0: merged away
  int32_t prev, next;
};

// A merge candidate. `key` orders the heap: the score mapped to an unsigned
// integer with the same order, then the inverted left index, so the largest
// key is the highest score and, among equal scores, the leftmost pair (the
// order llama.cpp's comparator gives).
struct Bigram {
  uint64_t key;
  int32_t left, right;
  uint32_t size;
};

inline uint64_t bigram_key(float score, int32_t left) {
  if (score == 0.0f) score = 0.0f;  // -0 and +0 compare equal
  uint32_t u;
  std::memcpy(&u, &score, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(u) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(left));
}

struct BigramBefore {
  bool operator()(const Bigram& l, const Bigram& r) const { return l.key > r.key; }
};

}  // namespace

SpmEncoder::SpmEncoder(const Vocab& vocab) : vocab_(vocab) {
  for (const std::string& t : vocab_.texts) max_token_len_ = std::max<uint32_t>(max_token_len_, t.size());
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = vocab_.map.find(std::string_view(buf, 6));
    if (id < 0) {
      const char c = static_cast<char>(b);
      id = vocab_.map.find(std::string_view(&c, 1));
    }
    byte_tokens_[b] = id;
  }
  // Find tokens where U+2581 occurs after something other than a run of
  // U+2581 at the start: only those can span a cut made before a U+2581
  // that follows a non-U+2581 symbol.
  for (const std::string& t : vocab_.texts) {
    size_t p = 0;
    while (is_space_at(t, p)) p += kSpaceLen;
    for (size_t q = t.find(kSpace, p); q != std::string::npos; q = t.find(kSpace, q + 1)) {
      if (q > 0) crossings_.push_back(Crossing{t, q});
    }
  }
  if (crossings_.size() > 256) {
    // Too many to check cheaply: encode whole fragments instead.
    chunking_ = false;
    crossings_.clear();
  }
}

void SpmEncoder::emit_bytes(std::string_view bytes, std::vector<int32_t>* out) const {
  for (char c : bytes) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
    if (id >= 0) out->push_back(id);
  }
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>* out) const {
  if (!chunking_) {
    encode_chunk(text, out);
    return;
  }
  size_t chunk_start = 0;
  bool prev_is_space = false;
  size_t p = 0;
  while (p < text.size()) {
    const bool space = is_space_at(text, p);
    if (space && !prev_is_space && p > chunk_start) {
      bool crossed = false;
      for (const Crossing& c : crossings_) {
        if (p >= c.offset && text.compare(p - c.offset, c.text.size(), c.text) == 0) {
          crossed = true;
          break;
        }
      }
      if (!crossed) {
        encode_chunk(text.substr(chunk_start, p - chunk_start), out);
        chunk_start = p;
      }
    }
    prev_is_space = space;
    // Symbols are cut by lead-byte length, exactly as in encode_chunk, so
    // cuts always fall on symbol boundaries of the whole text.
    p += std::min(utf8_len_from_lead(static_cast<uint8_t>(text[p])), text.size() - p);
  }
  if (chunk_start < text.size()) encode_chunk(text.substr(chunk_start), out);
}

void SpmEncoder::encode_chunk(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  const bool cacheable = text.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(text));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t out_start = out->size();

  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const uint32_t len =
        static_cast<uint32_t>(std::min(utf8_len_from_lead(static_cast<uint8_t>(text[off])), text.size() - off));
    const int32_t index = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{static_cast<uint32_t>(off), len, index - 1, -1});
    off += len;
    if (off < text.size()) sym.back().next = index + 1;
  }

  QuadHeap<Bigram, BigramBefore> heap;
  heap.reserve(sym.size());
  auto make = [&](int32_t left, int32_t right, Bigram* b) {
    const uint32_t size = sym[left].n + sym[right].n;
    if (size > max_token_len_) return false;
    const int32_t id = vocab_.map.find(text.substr(sym[left].start, size));
    if (id < 0) return false;
    *b = Bigram{bigram_key(vocab_.scores[id], left), left, right, size};
    return true;
  };
  Bigram b;
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) {
    if (make(i - 1, i, &b)) heap.push_unordered(b);
  }
  heap.heapify();
  auto try_add = [&](int32_t left, int32_t right) {
    if (left >= 0 && right >= 0 && make(left, right, &b)) heap.push(b);
  };

  while (!heap.empty()) {
    const Bigram top = heap.pop();
    Symbol& l = sym[top.left];
    Symbol& r = sym[top.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != top.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = top.left;
    try_add(l.prev, top.left);
    try_add(top.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].start, sym[i].n);
    const int32_t id = vocab_.map.find(piece);
    if (id >= 0) {
      out->push_back(id);
    } else {
      emit_bytes(piece, out);
    }
  }

  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(text), std::vector<int32_t>(out->begin() + out_start, out->end()));
  }
}

}  // namespace ember::tok
