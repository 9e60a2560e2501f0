// Internal to the HTTP transport (http_server.cpp and http_connection.cpp):
// what one connection shares between the event loop and the responses that
// handler and engine threads write to it, and the HttpResponse over it.
//
// Ownership: the server owns the Waker; every ConnShared holds it too, so it
// outlives the server while responses are still held. A ConnShared is held
// by the loop's connection state and by each of the connection's responses.
// Threading: Waker::kick / notify and every HttpResponse method may be called
// from any thread; ConnShared's fields marked "guarded by mu" are read and
// written only under its mu, and only the event loop touches the socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/http_server.h"

namespace ember::transport {

// Wakes the event loop (an eventfd) with the ids of connections that have
// news: output queued, a response ended, a connection to drop.
struct Waker {
  int efd = -1;  // owned: closed by the destructor
  std::mutex mu;
  std::vector<uint64_t> pending;  // connection ids with news for the loop (guarded by mu)
  std::atomic<bool> alive{true};
  std::atomic<bool> stopping{false};  // stop_accepting() was called

  ~Waker();
  void kick();
  // Queues id and kicks; a no-op once the loop has ended (alive is false).
  void notify(uint64_t id);
};

// State shared between the loop and the responses of one connection.
struct ConnShared {
  uint64_t id = 0;
  std::shared_ptr<Waker> waker;
  size_t max_backlog = 0;
  std::atomic<bool> wake_queued{false};

  std::mutex mu;
  // Guarded by mu:
  std::string out;          // bytes queued by responses, not yet taken by the loop
  size_t loop_unsent = 0;   // bytes the loop holds but has not written yet
  bool closed = false;      // connection gone (or being dropped)
  bool drop = false;        // a response asks the loop to drop the connection
  bool ended = false;       // the active response ended (loop resets)
  bool close_after = false; // ... and the connection must close after it
  std::function<void()> on_close;  // of the active response

  void wake() {
    if (!wake_queued.exchange(true)) waker->notify(id);
  }
};

// The response to one request on `conn`: head (a HEAD request: no body is
// sent), http11 (chunked streams; HTTP/1.0 streams end by close), keep_alive
// (the connection may stay open after it).
std::shared_ptr<HttpResponse> make_http_response(std::shared_ptr<ConnShared> conn, bool head, bool http11,
                                                 bool keep_alive);

// A complete error response (status line, headers, JSON body in OpenAI's
// shape) that closes the connection.
std::string http_error_response(int status, const std::string& message);

}  // namespace ember::transport
