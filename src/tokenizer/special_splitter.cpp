// Vocabulary lookup tables (TextIdMap, PairMap) and the special-token
// splitter that cuts control/user-defined tokens out of the input text the
// way llama.cpp's tokenizer_st_partition does, but without its
// O(#special tokens x text length) scans.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "tokenizer/tokenizer_impl.h"

namespace ember::tok {

uint64_t hash_bytes(std::string_view s) {
  // 64-bit FNV-1a over 8-byte words, then a final mix. Good enough for
  // vocabulary strings and fast for the short keys we hash.
  uint64_t h = 0xcbf29ce484222325ull ^ (s.size() * 0x9E3779B97F4A7C15ull);
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x100000001b3ull;
  }
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

// Slots hold (32-bit hash fingerprint << 32 | id) so that probes rarely touch
// the token texts of non-matching entries.
void TextIdMap::build(const std::vector<std::string>& texts) {
  texts_ = &texts;
  size_t cap = 16;
  while (cap < texts.size() * 2) cap <<= 1;
  slots_.assign(cap, kEmpty);
  mask_ = cap - 1;
  for (size_t i = 0; i < texts.size(); ++i) {
    const uint64_t h = hash_bytes(texts[i]);
    const uint64_t fp = h >> 32;
    uint64_t pos = h & mask_;
    while (slots_[pos] != kEmpty) {
      const uint64_t s = slots_[pos];
      if ((s >> 32) == fp && texts[static_cast<uint32_t>(s)] == texts[i]) break;
      pos = (pos + 1) & mask_;
    }
    slots_[pos] = (fp << 32) | i;  // a later duplicate replaces the earlier one
  }
}

int32_t TextIdMap::find(std::string_view s) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash_bytes(s);
  const uint64_t fp = h >> 32;
  uint64_t pos = h & mask_;
  while (true) {
    const uint64_t slot = slots_[pos];
    if (slot == kEmpty) return -1;
    if ((slot >> 32) == fp) {
      const uint32_t id = static_cast<uint32_t>(slot);
      if ((*texts_)[id] == s) return static_cast<int32_t>(id);
    }
    pos = (pos + 1) & mask_;
  }
}

static uint64_t mix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys_.assign(cap, ~0ull);
  values_.assign(cap, Value{-1, -1});
  mask_ = cap - 1;
  size_ = 0;
}

void PairMap::grow() {
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<Value> old_values = std::move(values_);
  reserve(old_keys.size());
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == ~0ull) continue;
    uint64_t h = mix64(old_keys[i]) & mask_;
    while (keys_[h] != ~0ull) h = (h + 1) & mask_;
    keys_[h] = old_keys[i];
    values_[h] = old_values[i];
    ++size_;
  }
}

void PairMap::insert(int32_t a, int32_t b, Value v) {
  if (keys_.empty() || (size_ + 1) * 2 > keys_.size()) grow();
  const uint64_t k = key(a, b);
  uint64_t h = mix64(k) & mask_;
  while (keys_[h] != ~0ull) {
    if (keys_[h] == k) return;  // keep the first (lowest rank)
    h = (h + 1) & mask_;
  }
  keys_[h] = k;
  values_[h] = v;
  ++size_;
}

const PairMap::Value* PairMap::find(int32_t a, int32_t b) const {
  if (keys_.empty()) return nullptr;
  const uint64_t k = key(a, b);
  uint64_t h = mix64(k) & mask_;
  while (true) {
    if (keys_[h] == k) return &values_[h];
    if (keys_[h] == ~0ull) return nullptr;
    h = (h + 1) & mask_;
  }
}

// ---------------------------------------------------------------------------

void SpecialSplitter::build(const Vocab& vocab) {
  // Same candidates and the same order as llama.cpp's cache_special_tokens:
  // ids ascending, then std::sort by text length descending (ties keep the
  // order this libstdc++ sort gives, which is what llama.cpp gets too).
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.n(); ++id) {
    if (vocab.attrs[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return vocab.texts[a].size() > vocab.texts[b].size(); });
  tokens_.clear();
  edges_ = PairMap();
  int32_t n_nodes = 1;
  for (int m = 0; m < 2; ++m) {
    node_entry_[m].assign(1, -1);
    std::memset(first_byte_[m], 0, sizeof(first_byte_[m]));
    lengths_desc_[m].clear();
  }
  for (int32_t id : ids) {
    const std::string& t = vocab.texts[id];
    if (t.empty()) continue;
    Entry e{id, static_cast<uint32_t>(t.size()), (vocab.attrs[id] & (kAttrControl | kAttrUnknown)) != 0,
            vocab.attrs[id]};
    const int32_t index = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(e);
    int32_t node = 0;
    for (char ch : t) {
      const int32_t next = child(node, static_cast<uint8_t>(ch));
      if (next >= 0) {
        node = next;
        continue;
      }
      edges_.insert(node, static_cast<uint8_t>(ch), PairMap::Value{n_nodes, 0});
      node = n_nodes++;
      node_entry_[0].push_back(-1);
      node_entry_[1].push_back(-1);
    }
    // mode 0: parse_special = false (user-defined only); mode 1: all.
    for (int m = 0; m < 2; ++m) {
      if (m == 0 && e.needs_parse_special) continue;
      // A text can appear twice only in malformed vocabularies; the first in
      // priority order wins (it claims every occurrence before the second).
      if (node_entry_[m][node] < 0) node_entry_[m][node] = index;
      first_byte_[m][static_cast<uint8_t>(t[0])] = 1;
      if (lengths_desc_[m].empty() || lengths_desc_[m].back() != e.len) lengths_desc_[m].push_back(e.len);
    }
  }
}

std::vector<Fragment> SpecialSplitter::split(std::string_view text, bool parse_special,
                                             const std::vector<std::pair<size_t, size_t>>* no_special) const {
  std::vector<Fragment> out;
  const size_t n = text.size();
  if (n == 0) return out;
  if (tokens_.empty()) {
    out.push_back(Fragment{-1, 0, n});
    return out;
  }
  const int mode = parse_special ? 1 : 0;
  const std::vector<int32_t>& node_entry = node_entry_[mode];
  const uint8_t* first_byte = first_byte_[mode];

  // 1. Positions where at least one eligible special token starts.
  std::vector<uint32_t> cand;
  for (size_t p = 0; p < n; ++p) {
    if (!first_byte[static_cast<uint8_t>(text[p])]) continue;
    int32_t node = 0;
    for (size_t q = p; q < n; ++q) {
      node = child(node, static_cast<uint8_t>(text[q]));
      if (node < 0) break;
      if (node_entry[node] >= 0) {
        cand.push_back(static_cast<uint32_t>(p));
        break;
      }
    }
  }
  if (cand.empty()) {
    out.push_back(Fragment{-1, 0, n});
    return out;
  }

  // 2. Length classes, longest first. Every token accepted so far is at least
  // as long as the current class, so a candidate [p, p+L) overlaps claimed
  // text iff its first or last byte is claimed.
  std::vector<uint8_t> claimed(n, 0);  // 0 free, 1 token, 2 stripped whitespace
  struct Accepted {
    uint32_t pos, len;
    int32_t id;
  };
  std::vector<Accepted> accepted;
  struct Match {
    int32_t entry;
    uint32_t pos;
  };
  std::vector<Match> matches;
  for (uint32_t len : lengths_desc_[mode]) {
    matches.clear();
    size_t kept = 0;
    for (uint32_t p : cand) {
      if (claimed[p]) continue;  // claimed positions never start a token again
      cand[kept++] = p;
      if (p + len > n || claimed[p + len - 1]) continue;
      int32_t node = 0;
      for (uint32_t k = 0; k < len && node >= 0; ++k) node = child(node, static_cast<uint8_t>(text[p + k]));
      if (node < 0) continue;
      const int32_t entry = node_entry[node];
      if (entry < 0 || tokens_[entry].len != len) continue;
      if (no_special && tokens_[entry].needs_parse_special) {
        bool inside = false;
        for (const auto& r : *no_special) inside |= p < r.second && p + len > r.first;
        if (inside) continue;
      }
      matches.push_back(Match{entry, p});
    }
    cand.resize(kept);
    if (matches.empty()) continue;
    // Tokens in priority order, each at its occurrences left to right.
    std::stable_sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) { return a.entry < b.entry; });
    for (const Match& m : matches) {
      if (claimed[m.pos] || claimed[m.pos + len - 1]) continue;
      std::memset(&claimed[m.pos], 1, len);
      const Entry& e = tokens_[m.entry];
      accepted.push_back(Accepted{m.pos, len, e.id});
      if (e.attrs & kAttrLstrip) {
        for (size_t q = m.pos; q > 0 && !claimed[q - 1] && std::isspace(static_cast<unsigned char>(text[q - 1])); --q) {
          claimed[q - 1] = 2;
        }
      }
      if (e.attrs & kAttrRstrip) {
        for (size_t q = m.pos + len; q < n && !claimed[q] && std::isspace(static_cast<unsigned char>(text[q])); ++q) {
          claimed[q] = 2;
        }
      }
    }
  }

  // 3. Fragments in text order.
  std::sort(accepted.begin(), accepted.end(), [](const Accepted& a, const Accepted& b) { return a.pos < b.pos; });
  size_t next_tok = 0;
  size_t p = 0;
  while (p < n) {
    if (claimed[p] == 0) {
      size_t q = p;
      while (q < n && claimed[q] == 0) ++q;
      out.push_back(Fragment{-1, p, q - p});
      p = q;
    } else if (claimed[p] == 2) {
      ++p;
    } else {
      const Accepted& a = accepted[next_tok++];
      out.push_back(Fragment{a.id, a.pos, a.len});
      p = a.pos + a.len;
    }
  }
  return out;
}

}  // namespace ember::tok
