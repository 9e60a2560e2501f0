// Incremental parser for Server-Sent Events (text/event-stream): feed it body
// bytes as they arrive, in pieces of any size, and it returns each complete
// event. Follows the WHATWG event-stream rules: lines end in LF, CRLF or CR;
// "field: value" with one optional space after the colon; lines starting
// with ':' are comments; several data lines join with '\n'; a blank line
// dispatches the event (only if it has data); a leading UTF-8 BOM is skipped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ember {

struct SseEvent {
  std::string event;  // "event:" field (empty means "message")
  std::string data;   // joined "data:" lines
  std::string id;     // last "id:" field seen in this event
};

class SseParser {
 public:
  explicit SseParser(size_t max_line_bytes = 16u << 20) : max_line_(max_line_bytes) {}

  // Parses more bytes; complete events are appended to *out. Fails (and
  // stays failed) when a line exceeds the limit.
  Status feed(std::string_view bytes, std::vector<SseEvent>* out);

  // End of stream: a final line without its terminator is processed and a
  // pending event that has data is returned too (lenient: the standard
  // drops it, but some servers omit the last blank line).
  void finish(std::vector<SseEvent>* out);

  // Bytes buffered in an unfinished line.
  size_t pending_bytes() const { return line_.size(); }

 private:
  void process_line(std::string_view line, std::vector<SseEvent>* out);
  size_t max_line_;
  std::string line_;
  SseEvent cur_;
  bool has_data_ = false;
  bool after_cr_ = false;  // the previous byte ended a line with CR
  bool started_ = false;   // BOM check done
  bool failed_ = false;
};

}  // namespace ember
