// Read-only memory-mapped file. Model weights are used in place from the map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ember {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Address ranges [begin, end) of this process's file mappings (the
// /proc/self/maps lines with an inode): the mapped model files among them.
std::vector<std::pair<uintptr_t, uintptr_t>> file_mappings();

// Whether [p, p + bytes) lies inside one of `files` (file_mappings()).
bool in_file_mapping(const void* p, size_t bytes, const std::vector<std::pair<uintptr_t, uintptr_t>>& files);

// The whole pages of [p, p + bytes), no longer read, leave this process's
// resident set when they lie in one of `files` (MADV_DONTNEED: unwritten
// private file pages are dropped and read again from the page cache if ever
// touched; nothing is lost). Other memory is left alone. Returns the bytes
// released (whole pages; 0 when the range is not in a file mapping).
size_t release_file_pages(const void* p, size_t bytes, const std::vector<std::pair<uintptr_t, uintptr_t>>& files);

}  // namespace ember
