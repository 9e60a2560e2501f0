// Files that are either whole or absent (checkpoints, teacher caches): the
// content is written to "<path>.tmp" in the same folder, flushed and synced,
// then renamed over `path` and the folder synced, so a crash or Ctrl-C at
// any moment leaves the old file or the new one, never a part.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

#include "core/status.h"

namespace ember {

// `write` fills the open file (returns false on a failed write).
Status write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write);

// The whole content of a file (error: cannot open or read).
Result<std::string> read_whole_file(const std::string& path);

}  // namespace ember
