// Test helper: whether the page holding an address is mapped into this
// process now (the present bit of /proc/self/pagemap; true when the file
// cannot be read, so a check for "released" never passes by accident).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>

namespace ember {

inline bool page_present(const void* p) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  std::FILE* f = std::fopen("/proc/self/pagemap", "rb");
  if (!f) return true;
  uint64_t entry = 0;
  const long off = static_cast<long>(reinterpret_cast<uintptr_t>(p) / page * sizeof(uint64_t));
  const bool ok = std::fseek(f, off, SEEK_SET) == 0 && std::fread(&entry, sizeof(entry), 1, f) == 1;
  std::fclose(f);
  return !ok || (entry >> 63) != 0;
}

}  // namespace ember
