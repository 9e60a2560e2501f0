// CPU time of this or another process; see cpu_time.h.
#include "core/cpu_time.h"

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ember {

double process_cpu_seconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Result<double> process_cpu_seconds(int64_t pid) {
  if (pid <= 0) return Status::errorf("process id must be positive, got {}", pid);
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return Status::errorf("cannot read {} (no such process?)", path);
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'. utime and stime are fields 14 and
  // 15 of the line, i.e. the 12th and 13th after the state.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return Status::errorf("{}: unexpected format", path);
  std::istringstream in(line.substr(close + 1));
  std::string field;
  double utime = -1, stime = -1;
  for (int i = 1; i <= 13 && in >> field; ++i) {
    if (i == 12) utime = std::strtod(field.c_str(), nullptr);
    if (i == 13) stime = std::strtod(field.c_str(), nullptr);
  }
  if (utime < 0 || stime < 0) return Status::errorf("{}: unexpected format", path);
  const long hz = sysconf(_SC_CLK_TCK);
  return (utime + stime) / static_cast<double>(hz > 0 ? hz : 100);
}

}  // namespace ember
