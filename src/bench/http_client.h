// A small blocking HTTP/1.1 client over POSIX sockets, for `ember bench
// serve` and tests: one request per connection ("Connection: close"),
// connect with a timeout, an overall per-request deadline, Content-Length,
// chunked and read-until-close bodies, and a streaming mode that hands body
// bytes to a callback as they arrive (so SSE events can be timestamped on
// arrival). Plain http:// only. A misbehaving server yields an error
// Result, never a crash or a hang past the deadline.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ember {

// "http://host[:port][/prefix]" split into parts. IPv6 hosts as "[::1]".
struct HttpUrl {
  std::string host;
  int port = 80;
  std::string path;  // prefix without a trailing '/', may be empty
};
Result<HttpUrl> parse_http_url(const std::string& url);

struct HttpClientRequest {
  std::string method = "GET";
  std::string host;
  int port = 80;
  std::string target = "/";  // request target, e.g. "/v1/completions"
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;                                          // sent with Content-Length when non-empty or POST
  double connect_timeout_s = 10;
  double timeout_s = 600;                 // whole request: connect, send, headers and body
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 256u << 20;     // for the buffered (non-streaming) mode
  // When >= 0, a descriptor (e.g. an eventfd) that becomes readable to cancel
  // the request: every wait ends at once with the error "cancelled". Not
  // owned.
  int cancel_fd = -1;
};

struct HttpClientResponse {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;  // empty in streaming mode
  const std::string* header(const std::string& lower_name) const;
};

// Called with the response status and each piece of (de-chunked) body as it
// arrives; returning false aborts the request (the Result is then an error
// "aborted by the caller").
using HttpBodyCallback = std::function<bool(int status, std::string_view data)>;

// Sends the request and reads the whole response. With on_body set, body
// bytes go to the callback instead of HttpClientResponse::body.
Result<HttpClientResponse> http_request(const HttpClientRequest& req, const HttpBodyCallback& on_body = nullptr);

}  // namespace ember
