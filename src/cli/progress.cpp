// Progress display; see progress.h.
#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace ember::cli {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9) return "?";
  const long t = static_cast<long>(seconds + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

ProgressLine::ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}

void ProgressLine::update(long done, long total, double elapsed, const std::string& what) {
  const double frac = total > 0 ? static_cast<double>(done) / total : 1.0;
  const double eta = done > 0 ? elapsed * (total - done) / done : 0;
  const std::string line = fmt::format("[{}/{}] {:5.1f}%  {}  elapsed {}  ETA {}", done, total, 100 * frac, what,
                                       format_duration(elapsed), format_duration(eta));
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    shown_ = true;
    if (done >= total) clear();
    return;
  }
  const int decile = static_cast<int>(frac * 10);
  if (done >= total || decile > last_decile_ || elapsed - last_print_ >= 30) {
    std::fprintf(stderr, "%s\n", line.c_str());
    last_decile_ = decile;
    last_print_ = elapsed;
  }
}

void ProgressLine::clear() {
  if (!tty_ || !shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace ember::cli
