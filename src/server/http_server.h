// HTTP/1.1 server transport for `ember serve`: one event-loop thread (epoll,
// non-blocking sockets) owns every connection, parses requests with strict
// limits and deadlines (slow or half-sent requests are timed out and closed,
// oversized ones rejected), and hands each complete request to a small pool
// of handler threads. Responses are written back by the event loop from a
// per-connection output buffer, so neither a handler nor the inference
// engine ever blocks on a slow client: HttpResponse::write() only appends
// and wakes the loop. Streaming uses chunked transfer encoding (SSE).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ember {

struct HttpRequest {
  std::string method;   // "GET", "POST", ... (as sent, upper case)
  std::string target;   // request target as sent, e.g. "/v1/models?x=1"
  std::string path;     // target without the query string, percent-decoding not applied
  std::string query;    // after '?', may be empty
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;
  std::string peer;     // "ip:port" of the client

  // First header with this (lower-case) name, or nullptr.
  const std::string* header(const std::string& lower_name) const;
};

// A response under construction for one request. Thread-safe; every method
// returns at once (data is queued for the event loop). Exactly one of
// send() or start_stream() ... end_stream() should be used; once the client
// has gone, calls are accepted and dropped.
class HttpResponse {
 public:
  virtual ~HttpResponse() = default;
  // A complete response with Content-Length.
  virtual void send(int status, const std::string& content_type, std::string body,
                    const std::vector<std::pair<std::string, std::string>>& extra_headers = {}) = 0;
  // Starts a chunked response (e.g. "text/event-stream").
  virtual void start_stream(int status, const std::string& content_type,
                            const std::vector<std::pair<std::string, std::string>>& extra_headers = {}) = 0;
  // Queues one chunk. Returns false if the client is gone (or its unsent
  // backlog exceeded the limit and the connection was dropped).
  virtual bool write(std::string data) = 0;
  // Ends a chunked response (terminating zero-length chunk).
  virtual void end_stream() = 0;
  // True once the client disconnected or the connection was dropped.
  virtual bool closed() const = 0;
  // Called once (on the event-loop thread; must be quick and must not call
  // back into this response) if the connection closes before the response
  // ended. If the connection is already closed, called at once.
  virtual void on_close(std::function<void()> fn) = 0;
};

// Runs on a handler thread; should hand long work off and return. HEAD
// requests reach the handler like GET; the transport sends the headers only.
using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpResponse>)>;

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port (see HttpServer::port())
  size_t max_body_bytes = size_t{8} << 20;    // larger: 413, connection closed
  size_t max_header_bytes = 64 << 10;         // request line + headers; larger: 431
  int request_timeout_ms = 10000;        // whole request (headers + body) must arrive within this: else 408 + close
  int idle_timeout_ms = 30000;           // keep-alive connection with no request in flight: closed
  size_t max_output_backlog = size_t{64} << 20;  // unsent bytes per connection before it is dropped
  // Open connections at most (clamped to what RLIMIT_NOFILE leaves). At the
  // limit a new connection takes the place of the longest idle keep-alive
  // connection, else of the oldest connection still sending a partial
  // request; only when every connection has a request in flight does it get
  // 503 and close. So idle or slow clients never lock new ones out.
  int max_connections = 16384;
  // Connections one client address (IP, any port) may hold; 0: no limit. At
  // the limit its longest idle connection is closed for the new one, else the
  // new one gets 429 and closes.
  int max_connections_per_client = 0;
  int n_handler_threads = 4;             // threads running HttpHandler
};

// Standard reason phrase for a status code ("Not Found"); "Unknown" if none.
const char* http_reason_phrase(int status);
// An error body in OpenAI's shape:
// {"error":{"message":...,"type":...,"param":null,"code":null}}.
std::string http_error_json(const std::string& message, const std::string& type = "invalid_request_error");

class HttpServer {
 public:
  // Binds and listens (error if the address is in use or invalid), starts
  // the event loop and handler threads.
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerConfig& cfg, HttpHandler handler);
  virtual ~HttpServer() = default;
  // The bound port (useful with port 0).
  virtual int port() const = 0;
  // Stops accepting new connections (and new requests on kept-alive ones:
  // they get 503 + close); in-flight responses continue.
  virtual void stop_accepting() = 0;
  // Open connections with a request whose response has not ended.
  virtual int n_in_flight() const = 0;
  // Open connections (counted towards max_connections).
  virtual int n_connections() const = 0;
  // The connection limit in force (max_connections, clamped to the
  // descriptor limit).
  virtual int max_connections() const = 0;
  // Connections closed to make room for new ones (idle or slow ones).
  virtual int64_t n_evicted() const = 0;
  // Closes every connection (in-flight responses see on_close) and joins all
  // threads. Idempotent; the destructor calls it. Must not be called from a
  // handler or an on_close callback (it joins those threads).
  virtual void shutdown() = 0;
};

}  // namespace ember
