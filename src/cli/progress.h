// A progress display for long CLI runs: on a terminal one live status line
// (rewritten in place on stderr), otherwise plain lines every 10% of the
// work or every 30 seconds, so logs stay readable.
#pragma once

#include <string>

namespace ember::cli {

// "1:05" or "1:02:03".
std::string format_duration(double seconds);

class ProgressLine {
 public:
  ProgressLine();
  // `done` of `total` units after `elapsed` seconds; `what` describes the
  // current unit. The ETA assumes the remaining units take as long as the
  // finished ones on average.
  void update(long done, long total, double elapsed, const std::string& what);
  // Erases the live line (before printing a result line on stdout).
  void clear();
  bool is_tty() const { return tty_; }

 private:
  bool tty_;
  bool shown_ = false;
  int last_decile_ = 0;
  double last_print_ = 0;
};

}  // namespace ember::cli
