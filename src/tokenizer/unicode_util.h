// UTF-8 helpers for the tokenizers: lead-byte lengths (as the reference
// tokenizers split text into symbols), strict decoding, repair of invalid
// input, completeness checks for streaming, GPT-2's byte <-> code point map,
// and Unicode NFC normalization.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::tok {

// Length of a UTF-8 sequence judged from its first byte only (1 for
// continuation bytes, 4 for 0xF8..0xFF), as llama.cpp splits symbols.
inline size_t utf8_len_from_lead(uint8_t c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

// Decodes one strictly valid UTF-8 character at s[*pos] (no overlongs, no
// surrogates, <= U+10FFFF). On success advances *pos and returns true.
bool utf8_decode_strict(std::string_view s, size_t* pos, uint32_t* cp);
void utf8_append(uint32_t cp, std::string* out);
bool utf8_is_valid(std::string_view s);
// Copy of `s` in which every byte that is not part of a valid character is
// replaced by U+FFFD.
std::string utf8_repair(std::string_view s);
// Number of bytes at the end of `s` that form the start of a valid but
// incomplete UTF-8 character (0..3): bytes a streaming decoder must hold.
size_t utf8_incomplete_tail(std::string_view s);

// GPT-2 byte-level map: every byte to a printable code point, and back.
struct ByteUnicodeMap {
  std::array<std::string, 256> byte_to_utf8;  // UTF-8 of the code point for each byte
  int unicode_to_byte(uint32_t cp) const;     // -1 if cp is not in the map
  std::array<int16_t, 324> cp_to_byte{};      // code points 0..323 cover the map
};
const ByteUnicodeMap& byte_unicode_map();
// Maps each byte of `bytes` to its code point, appending UTF-8 to *out.
void byte_encode(std::string_view bytes, std::string* out);
// Inverse of byte_encode for a vocabulary string: code points outside the map
// are copied as UTF-8.
std::string byte_decode(std::string_view text);

// Unicode canonical composition (NFC) of valid UTF-8 text; invalid input is
// returned unchanged.
std::string nfc_normalize(std::string_view s);
// True if `s` is certainly already NFC (fast check; false means "maybe not").
bool nfc_quick_check(std::string_view s);

}  // namespace ember::tok
