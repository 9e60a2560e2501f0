// UTF-8 helpers, GPT-2 byte <-> code point map and NFC normalization for the
// tokenizers (see unicode_util.h).
#include "tokenizer/unicode_util.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode_nfc_data.h"

namespace ember::tok {

bool utf8_decode_strict(std::string_view s, size_t* pos, uint32_t* cp) {
  const size_t i = *pos;
  const size_t n = s.size();
  if (i >= n) return false;
  const uint8_t c0 = static_cast<uint8_t>(s[i]);
  if (c0 < 0x80) {
    *cp = c0;
    *pos = i + 1;
    return true;
  }
  size_t len;
  uint32_t v;
  uint32_t min;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    len = 2, v = c0 & 0x1F, min = 0x80;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    len = 3, v = c0 & 0x0F, min = 0x800;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    len = 4, v = c0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (i + len > n) return false;
  for (size_t k = 1; k < len; ++k) {
    const uint8_t c = static_cast<uint8_t>(s[i + k]);
    if ((c & 0xC0) != 0x80) return false;
    v = (v << 6) | (c & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *cp = v;
  *pos = i + len;
  return true;
}

void utf8_append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) {
  size_t pos = 0;
  uint32_t cp;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (!utf8_decode_strict(s, &pos, &cp)) return false;
  }
  return true;
}

std::string utf8_repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  uint32_t cp;
  while (pos < s.size()) {
    const size_t start = pos;
    if (utf8_decode_strict(s, &pos, &cp)) {
      out.append(s.data() + start, pos - start);
    } else {
      out.append("\xEF\xBF\xBD");
      pos = start + 1;
    }
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  // Look back at most 3 bytes for the lead byte of a truncated character.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 4;
    } else {
      return 0;  // ASCII or a byte that never starts a character
    }
    if (back >= need) return 0;  // complete (or invalid; either way emit)
    // The bytes present must be a valid prefix, including the second-byte
    // range restrictions, or they can never complete.
    if (back >= 2) {
      const uint8_t c1 = static_cast<uint8_t>(s[n - back + 1]);
      if (c == 0xE0 && c1 < 0xA0) return 0;
      if (c == 0xED && c1 > 0x9F) return 0;
      if (c == 0xF0 && c1 < 0x90) return 0;
      if (c == 0xF4 && c1 > 0x8F) return 0;
    }
    return back;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// GPT-2 byte map

static ByteUnicodeMap build_byte_unicode_map() {
  ByteUnicodeMap m;
  m.cp_to_byte.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
    utf8_append(cp, &m.byte_to_utf8[b]);
    m.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return m;
}

const ByteUnicodeMap& byte_unicode_map() {
  static const ByteUnicodeMap m = build_byte_unicode_map();
  return m;
}

int ByteUnicodeMap::unicode_to_byte(uint32_t cp) const {
  if (cp >= cp_to_byte.size()) return -1;
  return cp_to_byte[cp];
}

void byte_encode(std::string_view bytes, std::string* out) {
  const ByteUnicodeMap& m = byte_unicode_map();
  for (char c : bytes) out->append(m.byte_to_utf8[static_cast<uint8_t>(c)]);
}

std::string byte_decode(std::string_view text) {
  const ByteUnicodeMap& m = byte_unicode_map();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  uint32_t cp;
  while (pos < text.size()) {
    const size_t start = pos;
    if (!utf8_decode_strict(text, &pos, &cp)) {
      out.push_back(text[start]);
      pos = start + 1;
      continue;
    }
    const int b = m.unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.data() + start, pos - start);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// NFC

namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  const NfcCcc* end = kNfcCcc + kNfcCccCount;
  const NfcCcc* it = std::lower_bound(kNfcCcc, end, cp, [](const NfcCcc& e, uint32_t v) { return e.cp < v; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const NfcDecomp* end = kNfcDecomp + kNfcDecompCount;
    const NfcDecomp* it =
        std::lower_bound(kNfcDecomp, end, cp, [](const NfcDecomp& e, uint32_t v) { return e.cp < v; });
    if (it != end && it->cp == cp) {
      out->insert(out->end(), kNfcDecompData + it->offset, kNfcDecompData + it->offset + it->count);
      return;
    }
  }
  out->push_back(cp);
}

// Returns the primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const NfcPair* end = kNfcPairs + kNfcPairCount;
  const NfcPair* it = std::lower_bound(kNfcPairs, end, std::make_pair(a, b), [](const NfcPair& e, auto v) {
    return e.first < v.first || (e.first == v.first && e.second < v.second);
  });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

bool nfc_quick_check(std::string_view s) {
  // Below U+0300 nothing decomposes-and-recomposes differently except
  // precomposed Latin-1 letters, which are already NFC themselves; characters
  // below U+0300 are never combining marks. So pure text below U+0300 is NFC.
  for (size_t i = 0; i < s.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) continue;
    if (c >= 0xCC) return false;  // U+0300 and above
  }
  return true;
}

std::string nfc_normalize(std::string_view s) {
  if (nfc_quick_check(s)) return std::string(s);
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t pos = 0;
  uint32_t cp;
  while (pos < s.size()) {
    if (!utf8_decode_strict(s, &pos, &cp)) return std::string(s);
    decompose(cp, &cps);
  }
  // Canonical ordering: stable sort each run of non-starters by class.
  std::vector<uint8_t> cls(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) cls[i] = ccc_of(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (cls[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && cls[j] != 0) ++j;
    // insertion sort (runs are short), stable
    for (size_t a = i + 1; a < j; ++a) {
      for (size_t b = a; b > i && cls[b - 1] > cls[b]; --b) {
        std::swap(cls[b - 1], cls[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    }
    i = j;
  }
  // Canonical composition.
  if (!cps.empty()) {
    size_t starter = 0;
    int last_class = cls[0] == 0 ? 0 : 256;
    size_t out_n = 1;
    for (size_t i = 1; i < cps.size(); ++i) {
      const uint32_t ch = cps[i];
      const int ch_class = cls[i];
      const uint32_t comp = compose(cps[starter], ch);
      if (comp != 0 && (last_class < ch_class || last_class == 0)) {
        cps[starter] = comp;
        continue;
      }
      if (ch_class == 0) starter = out_n;
      last_class = ch_class;
      cps[out_n++] = ch;
    }
    cps.resize(out_n);
  }
  std::string out;
  out.reserve(s.size());
  for (uint32_t c : cps) utf8_append(c, &out);
  return out;
}

}  // namespace ember::tok
