// write_file_atomic, read_whole_file; see atomic_file.h.
#include "train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ember {

Status write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::errorf("cannot create '{}': {}", tmp, std::strerror(errno));
  bool ok = write(f) && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return Status::errorf("cannot write '{}': {}", tmp, std::strerror(err ? err : EIO));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return Status::errorf("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(e));
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return Status::ok();
}

Result<std::string> read_whole_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::errorf("cannot open '{}': {}", path, std::strerror(errno));
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) return Status::errorf("cannot read '{}'", path);
  return s;
}

}  // namespace ember
