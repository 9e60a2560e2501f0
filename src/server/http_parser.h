// Incremental HTTP/1.x request parser used by the server's event loop: fed
// whatever bytes have arrived, it consumes complete request lines, header
// lines, Content-Length or chunked bodies and trailers, enforcing the header
// and body size limits as it goes (so an oversized request is rejected
// before it has been fully received). No I/O, no threads: one parser per
// connection, reset() between requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "server/http_server.h"

namespace ember {

class HttpRequestParser {
 public:
  enum class State { kNeedMore, kComplete, kError };

  HttpRequestParser(size_t max_header_bytes, size_t max_body_bytes)
      : max_header_bytes_(max_header_bytes), max_body_bytes_(max_body_bytes) {}

  // Parses from data[0, len). *consumed is set to the number of bytes used
  // (a trailing partial line is left unconsumed: pass it again, followed by
  // new bytes, on the next call). After kComplete, request() holds the
  // request and the remaining bytes belong to the next one; call reset()
  // before feeding them. After kError, error_status()/error_message() say
  // why; the connection must be closed.
  State feed(const char* data, size_t len, size_t* consumed);

  // Prepares for the next request on the same connection.
  void reset();

  // Valid after kComplete (method, target, path, query, headers, body).
  HttpRequest& request() { return req_; }
  bool http11() const { return version_minor_ == 1; }
  // Whether the connection may stay open after this request's response.
  bool keep_alive() const { return keep_alive_; }
  // Headers are complete, the client sent "Expect: 100-continue" and the
  // body has not fully arrived yet: the server should send 100 Continue.
  bool wants_continue() const;
  bool headers_done() const { return phase_ > Phase::kHeaders; }

  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class Phase { kRequestLine, kHeaders, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone };

  State fail(int status, std::string msg);
  // Returns false (after fail()) on a malformed line.
  bool parse_request_line(const char* p, size_t n);
  bool parse_header_line(const char* p, size_t n);
  // Validates the complete header section and decides how the body is framed.
  bool finish_headers();

  size_t max_header_bytes_;
  size_t max_body_bytes_;

  Phase phase_ = Phase::kRequestLine;
  HttpRequest req_;
  int version_minor_ = 1;
  bool keep_alive_ = true;
  bool expect_continue_ = false;
  size_t header_bytes_ = 0;   // request line + header (+ trailer) bytes consumed
  size_t scanned_ = 0;        // bytes of the pending partial line already searched for '\n'
  uint64_t body_remaining_ = 0;  // Content-Length left, or bytes left in the current chunk
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace ember
