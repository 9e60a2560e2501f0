// Declarations of the generated NFC tables (unicode_nfc_data.cpp, made by
// tools/gen_tokenizer_unicode_tables.py). All tables are sorted by code point.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember::tok {

struct NfcCcc {
  uint32_t cp;
  uint8_t ccc;  // canonical combining class (only non-zero classes are listed)
};
struct NfcDecomp {
  uint32_t cp;
  uint32_t offset;  // into kNfcDecompData
  uint32_t count;   // full canonical decomposition length
};
struct NfcPair {
  uint32_t first, second, composite;  // sorted by (first, second)
};

extern const NfcCcc kNfcCcc[];
extern const size_t kNfcCccCount;
extern const uint32_t kNfcDecompData[];
extern const NfcDecomp kNfcDecomp[];
extern const size_t kNfcDecompCount;
extern const NfcPair kNfcPairs[];
extern const size_t kNfcPairCount;

}  // namespace ember::tok
