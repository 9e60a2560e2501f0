// Byte-level BPE ("gpt2" vocabularies: Llama 3, Qwen2/2.5/3, GPT-2): the
// pre-tokenizer regexes split the text into words (PCRE2, UTF + Unicode
// properties, JIT), every byte of a word starts as the token of its GPT-2
// code point, and adjacent tokens are merged lowest merge rank first (ties:
// leftmost), as Hugging Face tokenizers and llama.cpp do. Words are cached.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <functional>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_util.h"

namespace ember::tok {

namespace {

constexpr size_t kMaxCachedWord = 128;
constexpr size_t kMaxCacheEntries = 1 << 16;

// Pre-tokenizer patterns, as written in the models' tokenizer.json files.
const char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kGpt2Regex[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma (used by Hugging Face tokenizers) counts U+0085 (NEL) as \s;
// PCRE2 does not. Rewrites \s and \S so PCRE2 agrees.
std::string adapt_regex(const std::string& re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char d = re[i + 1];
      if (d == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (d == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += d;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' or '^]' right after '[' is literal.
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

bool pre_tokenizer_regexes(const std::string& pre, std::vector<std::string>* out) {
  out->clear();
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "pixtral" ||
      pre == "dbrx" || pre == "smaug-bpe" || pre == "chatglm-bpe" || pre == "glm4") {
    out->push_back(kLlama3Regex);
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "hunyuan") {
    out->push_back(kQwen2Regex);
  } else if (pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "mpt" || pre == "olmo" || pre == "jais" ||
             pre == "roberta-bpe" || pre == "jina-es" || pre == "jina-de" || pre == "jina-v2-es" ||
             pre == "jina-v2-de" || pre == "jina-v1-en" || pre == "jina-v2-code" || pre == "gigachat") {
    out->push_back(kGpt2Regex);
  } else if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" ||
             pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
    out->push_back(R"(\p{N})");
    out->push_back(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))");
  } else if (pre == "default" || pre.empty()) {
    out->push_back(R"([\p{P}\$\+<=>\^~\|]+)");
    out->push_back(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))");
    out->push_back(R"(\p{N}+)");
    out->push_back(R"([0-9][0-9][0-9])");
  } else {
    return false;
  }
  return true;
}

std::string pre_name_for_regex(const std::string& regex) {
  if (regex == kLlama3Regex) return "llama-bpe";
  if (regex == kQwen2Regex) return "qwen2";
  if (regex == kGpt2Regex) return "gpt-2";
  return "";
}

struct ByteBpeEncoder::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

ByteBpeEncoder::ByteBpeEncoder(const Vocab& vocab) : vocab_(vocab) {}
ByteBpeEncoder::~ByteBpeEncoder() = default;

Result<std::unique_ptr<ByteBpeEncoder>> ByteBpeEncoder::create(const Vocab& vocab,
                                                               const std::vector<std::string>& merges,
                                                               const std::vector<std::string>& regexes,
                                                               bool ignore_merges) {
  std::unique_ptr<ByteBpeEncoder> enc(new ByteBpeEncoder(vocab));
  enc->ignore_merges_ = ignore_merges;
  const ByteUnicodeMap& bm = byte_unicode_map();
  for (int b = 0; b < 256; ++b) enc->byte_tokens_[b] = vocab.map.find(bm.byte_to_utf8[b]);

  enc->merges_.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) continue;
    const std::string_view left(m.data(), sp);
    const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t a = vocab.map.find(left);
    const int32_t b = vocab.map.find(right);
    joined.assign(left);
    joined.append(right);
    const int32_t merged = vocab.map.find(joined);
    // Merges whose parts or result are not tokens can never apply to token
    // sequences; Hugging Face rejects such files, llama.cpp ignores them.
    if (a < 0 || b < 0 || merged < 0) continue;
    enc->merges_.insert(a, b, PairMap::Value{static_cast<int32_t>(i), merged});
  }

  for (const std::string& re : regexes) {
    const std::string pattern = adapt_regex(re);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::errorf("tokenizer: cannot compile pre-tokenizer regex '{}' at offset {}: {}", re,
                            static_cast<size_t>(err_off), reinterpret_cast<const char*>(msg));
    }
    auto r = std::make_unique<Regex>();
    r->code = code;
    r->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    enc->regexes_.push_back(std::move(r));
  }
  return enc;
}

void ByteBpeEncoder::split(std::string_view text, std::vector<std::string_view>* words) const {
  words->clear();
  if (text.empty()) return;
  words->push_back(text);
  std::vector<std::string_view> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    next.clear();
    for (std::string_view piece : *words) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0;  // end of the last emitted part
      size_t offset = 0;
      while (offset < piece.size()) {
        int rc = re->jit ? pcre2_jit_match(re->code, subject, piece.size(), offset, 0, md, nullptr)
                         : PCRE2_ERROR_NOMATCH - 1;
        if (!re->jit || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) {
          // No JIT, or the JIT ran out of stack: use the interpreter.
          rc = pcre2_match(re->code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
        }
        if (rc < 0) break;  // no more matches (or a resource limit: rest is one word)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {
          // Empty match: step over one character.
          offset = ms + utf8_len_from_lead(static_cast<uint8_t>(piece[ms]));
          continue;
        }
        if (ms > start) next.push_back(piece.substr(start, ms - start));  // unmatched gap: its own word
        next.push_back(piece.substr(ms, me - ms));
        start = offset = me;
      }
      if (start < piece.size()) next.push_back(piece.substr(start));
    }
    pcre2_match_data_free(md);
    words->swap(next);
  }
}

void ByteBpeEncoder::encode(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::string_view> words;
  split(text, &words);
  for (std::string_view w : words) encode_word(w, out);
}

void ByteBpeEncoder::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t out_start = out->size();

  bool done = false;
  if (ignore_merges_) {
    std::string encoded;
    byte_encode(word, &encoded);
    const int32_t id = vocab_.map.find(encoded);
    if (id >= 0) {
      out->push_back(id);
      done = true;
    }
  }
  if (!done) {
    struct Sym {
      int32_t id;  // -1: byte without a token (dropped, as llama.cpp does)
      int32_t prev, next;
    };
    std::vector<Sym> sym(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      sym[i] = Sym{byte_tokens_[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                   i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
    }
    // Candidate merges as (rank << 32 | left index): the smallest key is the
    // lowest rank, leftmost. An entry is current iff the pair now at `left`
    // still has that rank (ranks identify pairs), so stale entries need no
    // bookkeeping.
    QuadHeap<uint64_t, std::less<uint64_t>> heap;
    heap.reserve(word.size());
    auto pair_rank = [&](int32_t left) -> const PairMap::Value* {
      const int32_t right = sym[left].next;
      if (right < 0 || sym[left].id < 0 || sym[right].id < 0) return nullptr;
      return merges_.find(sym[left].id, sym[right].id);
    };
    auto key = [](int32_t rank, int32_t left) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(left);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) {
      if (const PairMap::Value* v = pair_rank(i)) heap.push_unordered(key(v->rank, i));
    }
    heap.heapify();
    auto push = [&](int32_t left) {
      if (left < 0) return;
      if (const PairMap::Value* v = pair_rank(left)) heap.push(key(v->rank, left));
    };
    while (!heap.empty()) {
      const uint64_t top = heap.pop();
      const int32_t left = static_cast<int32_t>(top & 0xFFFFFFFFu);
      const int32_t rank = static_cast<int32_t>(top >> 32);
      if (sym[left].id < 0) continue;  // merged into its left neighbour
      const PairMap::Value* v = pair_rank(left);
      if (!v || v->rank != rank) continue;  // stale
      Sym& l = sym[left];
      Sym& r = sym[l.next];
      l.id = v->merged;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = left;
      r.id = -2;  // dead
      r.prev = r.next = -1;
      push(l.prev);
      push(left);
    }
    for (int32_t i = 0; i != -1; i = sym[i].next) {
      if (sym[i].id >= 0) out->push_back(sym[i].id);
    }
  }

  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out->begin() + out_start, out->end()));
  }
}

}  // namespace ember::tok
