// Read-only memory-mapped file; see mmap_file.h.
#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace ember {

MappedFile::~MappedFile() {
  if (data_ && size_) munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ && size_) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::errorf("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::errorf("{}: not a regular file", path);
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      f.size_ = 0;
      return Status::errorf("{}: mmap failed: {}", path, std::strerror(e));
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

std::vector<std::pair<uintptr_t, uintptr_t>> file_mappings() {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long b = 0, e = 0, inode = 0;
    char perms[8] = {}, dev[16] = {};
    unsigned long long offset = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %15s %lu", &b, &e, perms, &offset, dev, &inode) == 6 && inode)
      out.emplace_back(b, e);
  }
  return out;
}

bool in_file_mapping(const void* p, size_t bytes, const std::vector<std::pair<uintptr_t, uintptr_t>>& files) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  for (const auto& [fb, fe] : files)
    if (b >= fb && b + bytes <= fe) return true;
  return false;
}

size_t release_file_pages(const void* p, size_t bytes, const std::vector<std::pair<uintptr_t, uintptr_t>>& files) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (e <= b || !in_file_mapping(reinterpret_cast<const void*>(b), e - b, files)) return 0;
  return madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED) == 0 ? e - b : 0;
}

}  // namespace ember
