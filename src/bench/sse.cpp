// Incremental Server-Sent Events parser; see sse.h.
#include "bench/sse.h"

#include <algorithm>

namespace ember {

void SseParser::process_line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {
    if (has_data_) out->push_back(std::move(cur_));
    cur_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment
  std::string_view field = line, value;
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) cur_.data += '\n';
    cur_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    cur_.event.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) cur_.id.assign(value);
  }
  // "retry" and unknown fields are ignored.
}

Status SseParser::feed(std::string_view bytes, std::vector<SseEvent>* out) {
  if (failed_) return Status::error("SSE stream already failed");
  if (!started_) {
    // Skip a UTF-8 BOM, which may arrive split across feeds.
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    const size_t have = line_.size();
    const size_t need = kBom.size() - have;
    const size_t n = std::min(need, bytes.size());
    if (kBom.substr(have, n) == bytes.substr(0, n)) {
      line_.append(bytes.substr(0, n));
      bytes.remove_prefix(n);
      if (line_.size() < kBom.size()) return Status::ok();  // undecided yet
      line_.clear();
    } else {
      // Not a BOM: the bytes held so far are ordinary content.
      std::string held;
      held.swap(line_);
      started_ = true;
      if (!held.empty()) EMBER_RETURN_IF_ERROR(feed(held, out));
    }
    started_ = true;
  }
  size_t b = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == b && line_.empty()) {
      // The LF of a CRLF whose CR ended the previous line.
      after_cr_ = false;
      b = i + 1;
      continue;
    }
    if (line_.empty()) {
      process_line(bytes.substr(b, i - b), out);
    } else {
      line_.append(bytes.substr(b, i - b));
      process_line(line_, out);
      line_.clear();
    }
    after_cr_ = c == '\r';
    b = i + 1;
  }
  if (b < bytes.size()) {
    line_.append(bytes.substr(b));
    if (line_.size() > max_line_) {
      failed_ = true;
      line_.clear();
      return Status::errorf("SSE line longer than {} bytes", max_line_);
    }
  }
  return Status::ok();
}

void SseParser::finish(std::vector<SseEvent>* out) {
  if (failed_) return;
  if (!started_) line_.clear();  // only part of a BOM was seen
  if (!line_.empty()) {
    process_line(line_, out);
    line_.clear();
  }
  if (has_data_) out->push_back(std::move(cur_));
  cur_ = SseEvent{};
  has_data_ = false;
  after_cr_ = false;
}

}  // namespace ember
