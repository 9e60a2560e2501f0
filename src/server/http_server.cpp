// HTTP/1.1 server transport (see http_server.h): an epoll event loop on one
// thread owns every socket, parses requests (http_parser.h) under size
// limits and deadlines, and hands complete requests to a pool of handler
// threads. Responses append to a per-connection output queue under a mutex
// and wake the loop through an eventfd; the loop alone writes to sockets.
// The responses themselves are in http_connection.cpp, socket set-up in
// tcp_socket.cpp.
//
// Notes on behaviour:
// - One request in flight per connection; pipelined requests are parsed
//   only after the previous response has ended, so they run in order.
// - A client half-close (EOF), EPOLLRDHUP, EPOLLHUP or a write error closes
//   the connection at once and fires the pending on_close callback; this is
//   how a disconnected streaming client aborts its request. (So a client
//   that sends a request and then shuts down its write side gets no answer.)
// - HEAD is passed to the handler like any method; the transport drops the
//   response body (Content-Length is kept) and any stream chunks.
// - Errors raised by the transport (400, 408, 413, 431, 503, ...) are JSON in
//   OpenAI's error shape and close the connection after a lingering close
//   (write side shut down, input drained for a short while) so the client
//   reads the error instead of a reset.
// - HTTP/1.0 clients get streams without chunked framing, ended by close.
// - A response dropped by every owner before it ended is completed by the
//   transport: 500 if nothing was sent, connection closed mid-stream.
#include "server/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "server/http_connection.h"
#include "server/http_parser.h"
#include "server/tcp_socket.h"

namespace ember {

const std::string* HttpRequest::header(const std::string& lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

namespace {

using transport::ConnShared;
using transport::http_error_response;
using transport::make_http_response;
using transport::Waker;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr int kLingerMs = 1000;        // lingering close after an error / Connection: close
constexpr int kTickMs = 25;            // deadline sweep granularity
constexpr size_t kReadChunk = 64 << 10;

// Loop-thread state of one connection.
struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  std::string ip;             // the client address: the key of the per-client limit
  std::shared_ptr<ConnShared> shared;
  HttpRequestParser parser;
  std::string in;
  size_t in_off = 0;
  std::string wbuf;
  size_t woff = 0;
  uint32_t events = 0;        // currently registered epoll events
  bool counted = false;       // counts towards max_connections
  bool in_flight = false;
  bool req_active = false;    // bytes of a not yet complete request have arrived
  bool continue_sent = false;
  bool closing = false;       // no more requests: close once output is flushed
  bool lingering = false;     // write side shut down, draining input until EOF/deadline
  uint64_t idle_epoch = 0;    // bumped each time the connection becomes idle (see idle_q_)
  uint64_t slow_epoch = 0;    // bumped each time a request starts arriving (see slow_q_)
  Clock::time_point req_start;
  Clock::time_point last_activity;
  Clock::time_point linger_deadline;

  Conn(size_t max_header, size_t max_body) : parser(max_header, max_body) {}
};

struct Task {
  HttpRequest req;
  std::shared_ptr<HttpResponse> resp;
};

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(const HttpServerConfig& cfg, HttpHandler handler) : cfg_(cfg), handler_(std::move(handler)) {}
  ~HttpServerImpl() override {
    shutdown();
    if (ep_ >= 0) ::close(ep_);
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  Status init();
  int port() const override { return port_; }
  void stop_accepting() override;
  int n_in_flight() const override { return n_in_flight_.load(); }
  int n_connections() const override { return n_conns_pub_.load(); }
  int max_connections() const override { return max_conns_; }
  int64_t n_evicted() const override { return n_evicted_.load(); }
  void shutdown() override;

 private:
  void loop();
  void handler_worker();
  void accept_all();
  void on_event(Conn& c, uint32_t ev);
  void on_wake(Conn& c);
  void read_input(Conn& c);
  void process_input(Conn& c);
  void dispatch(Conn& c);
  void send_error(Conn& c, int status, const std::string& msg);
  bool flush(Conn& c);         // false if the connection was closed
  void after_flush(Conn& c);
  void update_events(Conn& c);
  void close_conn(uint64_t id);
  void count(Conn& c);
  void uncount(Conn& c);
  bool evict_one(const std::string* ip);
  void became_idle(Conn& c);
  Conn* oldest(std::deque<std::pair<uint64_t, uint64_t>>& q, bool idle);
  void sweep();
  void close_listener();

  HttpServerConfig cfg_;
  HttpHandler handler_;
  int listen_fd_ = -1;
  int ep_ = -1;
  int port_ = 0;
  std::shared_ptr<Waker> waker_;
  std::thread loop_thread_;
  std::vector<std::thread> workers_;

  // Loop-thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_id_ = 2;
  int n_counted_ = 0;
  std::unordered_map<std::string, int> per_client_;  // counted connections per client address
  int max_conns_ = 0;  // cfg_.max_connections clamped to the descriptor limit
  // Eviction candidates in the order they became idle / started a request:
  // (connection id, epoch), checked lazily (an entry whose connection is
  // gone or whose epoch moved on is dropped), so making room is O(1)
  // amortized however many connections are open.
  std::deque<std::pair<uint64_t, uint64_t>> idle_q_, slow_q_;
  bool listen_paused_ = false;
  Clock::time_point listen_resume_;
  std::vector<char> rbuf_ = std::vector<char>(kReadChunk);

  std::atomic<int> n_in_flight_{0};
  std::atomic<int> n_conns_pub_{0};
  std::atomic<int64_t> n_evicted_{0};
  std::atomic<bool> stop_loop_{false};

  std::mutex listen_mu_;
  std::condition_variable listen_cv_;
  bool listen_close_requested_ = false;
  bool listen_closed_ = false;

  std::mutex shutdown_mu_;
  bool shut_down_ = false;

  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<Task> queue_;
  bool q_stop_ = false;
};

Status HttpServerImpl::init() {
  if (cfg_.port < 0 || cfg_.port > 65535) return Status::errorf("invalid port {}", cfg_.port);
  if (cfg_.n_handler_threads < 1) return Status::error("n_handler_threads must be at least 1");
  if (cfg_.max_connections < 1) return Status::error("max_connections must be at least 1");
  if (cfg_.max_connections_per_client < 0) return Status::error("max_connections_per_client must be >= 0");
  // Leave descriptors for everything else the process opens (model files,
  // upstream connections of a router, lingering closes).
  const int fd_limit = open_file_limit();
  max_conns_ = std::max(1, std::min(cfg_.max_connections, fd_limit - std::max(128, fd_limit / 10)));
  if (cfg_.request_timeout_ms < 1 || cfg_.idle_timeout_ms < 1) return Status::error("timeouts must be positive");
  if (cfg_.max_header_bytes < 64) return Status::error("max_header_bytes must be at least 64");

  auto listener = tcp_listen(cfg_.host, cfg_.port);
  if (!listener.is_ok()) return listener.status();
  listen_fd_ = listener->fd;
  port_ = listener->port;

  waker_ = std::make_shared<Waker>();
  waker_->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ep_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (waker_->efd < 0 || ep_ < 0) return Status::errorf("cannot create event loop: {}", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  if (::epoll_ctl(ep_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) return Status::errorf("epoll_ctl: {}", std::strerror(errno));
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(ep_, EPOLL_CTL_ADD, waker_->efd, &ev) != 0) return Status::errorf("epoll_ctl: {}", std::strerror(errno));

  for (int i = 0; i < cfg_.n_handler_threads; ++i) workers_.emplace_back([this] { handler_worker(); });
  loop_thread_ = std::thread([this] { loop(); });
  return Status::ok();
}

void HttpServerImpl::stop_accepting() {
  waker_->stopping.store(true);
  std::unique_lock<std::mutex> lk(listen_mu_);
  if (listen_closed_) return;
  if (!loop_thread_.joinable() || std::this_thread::get_id() == loop_thread_.get_id()) {
    lk.unlock();
    close_listener();
    return;
  }
  listen_close_requested_ = true;
  waker_->kick();
  listen_cv_.wait(lk, [this] { return listen_closed_; });
}

void HttpServerImpl::close_listener() {
  std::lock_guard<std::mutex> lk(listen_mu_);
  if (listen_closed_) return;
  if (listen_fd_ >= 0) {
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  listen_closed_ = true;
  listen_cv_.notify_all();
}

void HttpServerImpl::shutdown() {
  {
    std::lock_guard<std::mutex> lk(shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (!waker_) return;  // init() failed before anything started
  waker_->stopping.store(true);
  stop_loop_.store(true);
  waker_->kick();
  if (loop_thread_.joinable()) loop_thread_.join();
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> lk(q_mu_);
    q_stop_ = true;
    dropped.swap(queue_);
  }
  q_cv_.notify_all();
  dropped.clear();  // their connections are closed: the responses are no-ops
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void HttpServerImpl::handler_worker() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lk(q_mu_);
      q_cv_.wait(lk, [this] { return q_stop_ || !queue_.empty(); });
      if (q_stop_) return;
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      handler_(t.req, t.resp);
    } catch (const std::exception& e) {
      t.resp->send(500, "application/json", http_error_json(fmt::format("internal error: {}", e.what()), "server_error"));
    } catch (...) {
      t.resp->send(500, "application/json", http_error_json("internal error", "server_error"));
    }
  }
}

void HttpServerImpl::loop() {
  std::vector<epoll_event> evs(256);
  auto next_sweep = Clock::now();
  while (!stop_loop_.load()) {
    int n = ::epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), kTickMs);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      uint64_t id = evs[i].data.u64;
      if (id == kListenId) {
        accept_all();
      } else if (id == kWakeId) {
        uint64_t v;
        while (::read(waker_->efd, &v, sizeof(v)) > 0) {
        }
        std::vector<uint64_t> ids;
        {
          std::lock_guard<std::mutex> lk(waker_->mu);
          ids.swap(waker_->pending);
        }
        for (uint64_t cid : ids) {
          auto it = conns_.find(cid);
          if (it != conns_.end()) on_wake(*it->second);
        }
      } else {
        auto it = conns_.find(id);
        if (it != conns_.end()) on_event(*it->second, evs[i].events);
      }
    }
    {
      std::unique_lock<std::mutex> lk(listen_mu_);
      if (listen_close_requested_ && !listen_closed_) {
        lk.unlock();
        close_listener();
      }
    }
    auto now = Clock::now();
    if (now >= next_sweep) {
      sweep();
      next_sweep = now + std::chrono::milliseconds(kTickMs);
    }
  }
  // Shutting down: close every connection (firing on_close), then the listener.
  std::vector<uint64_t> ids;
  for (auto& [cid, c] : conns_) ids.push_back(cid);
  for (uint64_t cid : ids) close_conn(cid);
  close_listener();
  waker_->alive.store(false);
}

void HttpServerImpl::accept_all() {
  if (listen_fd_ < 0) return;
  for (int k = 0; k < 64; ++k) {
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && evict_one(nullptr)) continue;  // make room, then retry
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop polling the listener briefly instead of spinning.
        epoll_event ev{};
        ev.data.u64 = kListenId;
        ::epoll_ctl(ep_, EPOLL_CTL_MOD, listen_fd_, &ev);
        listen_paused_ = true;
        listen_resume_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>(cfg_.max_header_bytes, cfg_.max_body_bytes);
    c->id = next_id_++;
    c->fd = fd;
    c->peer = tcp_peer_name(ss);
    c->ip = tcp_peer_ip(ss);
    c->shared = std::make_shared<ConnShared>();
    c->shared->id = c->id;
    c->shared->waker = waker_;
    c->shared->max_backlog = cfg_.max_output_backlog;
    c->last_activity = Clock::now();
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = c->id;
    if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    Conn& ref = *c;
    conns_.emplace(c->id, std::move(c));
    if (cfg_.max_connections_per_client > 0) {
      auto pc = per_client_.find(ref.ip);
      if (pc != per_client_.end() && pc->second >= cfg_.max_connections_per_client && !evict_one(&ref.ip)) {
        send_error(ref, 429, "too many connections from this client; retry later");
        continue;
      }
    }
    if (n_counted_ >= max_conns_ && !evict_one(nullptr)) {
      send_error(ref, 503, "server is at its connection limit; retry later");
      continue;
    }
    count(ref);
    became_idle(ref);
  }
}

void HttpServerImpl::became_idle(Conn& c) {
  idle_q_.emplace_back(c.id, ++c.idle_epoch);
}

// The front of q that is still a candidate (idle: no request bytes, nothing
// in flight; slow: a partial request), dropping stale entries on the way.
Conn* HttpServerImpl::oldest(std::deque<std::pair<uint64_t, uint64_t>>& q, bool idle) {
  while (!q.empty()) {
    auto [id, epoch] = q.front();
    auto it = conns_.find(id);
    if (it != conns_.end()) {
      Conn& c = *it->second;
      const bool usable = c.counted && !c.in_flight && !c.closing && !c.lingering;
      if (usable && idle && c.idle_epoch == epoch && !c.req_active && c.in_off == c.in.size()) return &c;
      if (usable && !idle && c.slow_epoch == epoch && c.req_active) return &c;
    }
    q.pop_front();
  }
  return nullptr;
}

void HttpServerImpl::count(Conn& c) {
  c.counted = true;
  ++n_counted_;
  ++per_client_[c.ip];
  n_conns_pub_.store(n_counted_);
}

void HttpServerImpl::uncount(Conn& c) {
  if (!c.counted) return;
  c.counted = false;
  --n_counted_;
  auto it = per_client_.find(c.ip);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  n_conns_pub_.store(n_counted_);
}

// Makes room for a new connection (of client `ip` when given): closes the
// longest idle keep-alive connection, else answers the connection that has
// been sending a partial request the longest with 503. Connections with a
// request in flight are never taken. Returns false when none can go.
bool HttpServerImpl::evict_one(const std::string* ip) {
  Conn* idle = nullptr;
  Conn* slow = nullptr;
  if (!ip) {
    idle = oldest(idle_q_, true);
    if (!idle) slow = oldest(slow_q_, false);
  } else {
    // One client's connections: a scan of every connection, done only when
    // that client is at its own limit (--max-connections-per-client).
    for (auto& [id, up] : conns_) {
      Conn& c = *up;
      if (!c.counted || c.in_flight || c.closing || c.lingering || c.ip != *ip) continue;
      if (!c.req_active && c.in_off == c.in.size()) {
        if (!idle || c.last_activity < idle->last_activity) idle = &c;
      } else if (!slow || c.req_start < slow->req_start) {
        slow = &c;
      }
    }
  }
  if (idle) {
    close_conn(idle->id);
  } else if (slow) {
    const uint64_t id = slow->id;
    send_error(*slow, 503, "server is at its connection limit; request not completed in time");
    auto it = conns_.find(id);  // closed by a failed write, or lingering
    if (it != conns_.end()) uncount(*it->second);  // on its way out: no longer takes a place
  } else {
    return false;
  }
  n_evicted_.fetch_add(1);
  return true;
}

void HttpServerImpl::on_event(Conn& c, uint32_t ev) {
  if (ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
    close_conn(c.id);
    return;
  }
  if (ev & EPOLLOUT) {
    if (!flush(c)) return;
    after_flush(c);
    if (conns_.find(c.id) == conns_.end()) return;
  }
  if (ev & EPOLLIN) read_input(c);
}

void HttpServerImpl::read_input(Conn& c) {
  const uint64_t id = c.id;
  for (int k = 0; k < 8; ++k) {
    ssize_t n = ::recv(c.fd, rbuf_.data(), rbuf_.size(), 0);
    if (n > 0) {
      if (c.closing || c.lingering) continue;  // discard input of a connection on its way out
      c.in.append(rbuf_.data(), static_cast<size_t>(n));
      c.last_activity = Clock::now();
      if (static_cast<size_t>(n) < rbuf_.size()) break;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    close_conn(id);  // EOF or error
    return;
  }
  if (c.closing || c.lingering) return;
  if (!c.in_flight) {
    process_input(c);
  } else if (c.in.size() - c.in_off > cfg_.max_header_bytes + cfg_.max_body_bytes + kReadChunk) {
    // Pipelined input piling up behind a long response: stop reading for now
    // (EPOLLRDHUP still reports a disconnect).
    update_events(c);
  }
}

void HttpServerImpl::process_input(Conn& c) {
  const uint64_t id = c.id;
  while (!c.in_flight && !c.closing) {
    size_t avail = c.in.size() - c.in_off;
    if (avail == 0) break;
    if (!c.req_active) {
      c.req_active = true;
      c.req_start = Clock::now();
      slow_q_.emplace_back(c.id, ++c.slow_epoch);
    }
    size_t used = 0;
    auto st = c.parser.feed(c.in.data() + c.in_off, avail, &used);
    c.in_off += used;
    if (st == HttpRequestParser::State::kError) {
      send_error(c, c.parser.error_status(), c.parser.error_message());
      return;
    }
    if (st == HttpRequestParser::State::kNeedMore) {
      if (c.parser.wants_continue() && !c.continue_sent) {
        c.continue_sent = true;
        c.wbuf += "HTTP/1.1 100 Continue\r\n\r\n";
        if (!flush(c)) return;
      }
      break;
    }
    if (waker_->stopping.load()) {
      send_error(c, 503, "server is shutting down");
      return;
    }
    dispatch(c);
  }
  if (conns_.find(id) == conns_.end()) return;
  if (c.in_off == c.in.size()) {
    c.in.clear();
    c.in_off = 0;
  } else if (c.in_off > (64u << 10) && c.in_off > c.in.size() / 2) {
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }
  update_events(c);
}

void HttpServerImpl::dispatch(Conn& c) {
  HttpRequest req = std::move(c.parser.request());
  req.peer = c.peer;
  bool head = req.method == "HEAD";
  auto resp = make_http_response(c.shared, head, c.parser.http11(), c.parser.keep_alive());
  c.parser.reset();
  c.req_active = false;
  c.continue_sent = false;
  c.in_flight = true;
  n_in_flight_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lk(q_mu_);
    queue_.push_back(Task{std::move(req), std::move(resp)});
  }
  q_cv_.notify_one();
}

void HttpServerImpl::send_error(Conn& c, int status, const std::string& msg) {
  c.closing = true;
  c.req_active = false;
  c.in.clear();
  c.in_off = 0;
  c.wbuf += http_error_response(status, msg);
  if (!flush(c)) return;
  after_flush(c);
}

void HttpServerImpl::on_wake(Conn& c) {
  c.shared->wake_queued.store(false);
  bool drop = false, ended = false, close_after = false;
  {
    std::lock_guard<std::mutex> lk(c.shared->mu);
    drop = c.shared->drop;
    if (!c.shared->out.empty()) {
      if (c.woff == c.wbuf.size()) {
        c.wbuf.clear();
        c.woff = 0;
        c.wbuf.swap(c.shared->out);
      } else {
        c.wbuf += c.shared->out;
        c.shared->out.clear();
      }
    }
    ended = c.shared->ended;
    close_after = c.shared->close_after;
    c.shared->ended = false;
    c.shared->loop_unsent = c.wbuf.size() - c.woff;
  }
  if (drop) {
    close_conn(c.id);
    return;
  }
  if (ended && c.in_flight) {
    c.in_flight = false;
    n_in_flight_.fetch_sub(1);
    c.last_activity = Clock::now();
    if (!close_after) became_idle(c);
    if (close_after) c.closing = true;
  }
  if (!flush(c)) return;
  after_flush(c);
  if (conns_.find(c.id) == conns_.end()) return;
  if (ended && !c.in_flight && !c.closing && !c.lingering) process_input(c);
}

bool HttpServerImpl::flush(Conn& c) {
  size_t before = c.woff;
  while (c.woff < c.wbuf.size()) {
    ssize_t n = ::send(c.fd, c.wbuf.data() + c.woff, c.wbuf.size() - c.woff, MSG_NOSIGNAL);
    if (n > 0) {
      c.woff += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close_conn(c.id);
    return false;
  }
  if (c.woff != before) {
    c.last_activity = Clock::now();
    if (c.woff == c.wbuf.size()) {
      c.wbuf.clear();
      c.woff = 0;
    } else if (c.woff > (1u << 20) && c.woff > c.wbuf.size() / 2) {
      c.wbuf.erase(0, c.woff);
      c.woff = 0;
    }
    std::lock_guard<std::mutex> lk(c.shared->mu);
    c.shared->loop_unsent = c.wbuf.size() - c.woff;
  }
  update_events(c);
  return true;
}

// Starts the lingering close once a closing connection's output is written.
void HttpServerImpl::after_flush(Conn& c) {
  if (c.closing && !c.lingering && !c.in_flight && c.woff == c.wbuf.size()) {
    c.lingering = true;
    c.linger_deadline = Clock::now() + std::chrono::milliseconds(kLingerMs);
    ::shutdown(c.fd, SHUT_WR);
    uncount(c);
    update_events(c);
  }
}

void HttpServerImpl::update_events(Conn& c) {
  uint32_t want = EPOLLRDHUP;
  bool backlog_in = c.in_flight && c.in.size() - c.in_off > cfg_.max_header_bytes + cfg_.max_body_bytes + kReadChunk;
  if (!backlog_in) want |= EPOLLIN;
  if (c.woff < c.wbuf.size()) want |= EPOLLOUT;
  if (want == c.events) return;
  c.events = want;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
}

void HttpServerImpl::close_conn(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lk(c->shared->mu);
    c->shared->closed = true;
    fn = std::move(c->shared->on_close);
    c->shared->on_close = nullptr;
    c->shared->out.clear();
  }
  ::epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  uncount(*c);
  if (c->in_flight) n_in_flight_.fetch_sub(1);
  if (fn) {
    try {
      fn();
    } catch (...) {
    }
  }
}

void HttpServerImpl::sweep() {
  auto now = Clock::now();
  if (listen_paused_ && now >= listen_resume_ && listen_fd_ >= 0) {
    listen_paused_ = false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, listen_fd_, &ev);
  }
  // Drop stale eviction candidates once they outnumber the connections.
  for (auto* q : {&idle_q_, &slow_q_}) {
    if (q->size() <= 2 * conns_.size() + 1024) continue;
    const bool idle = q == &idle_q_;
    std::deque<std::pair<uint64_t, uint64_t>> keep;
    for (const auto& [id, epoch] : *q) {
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      const Conn& c = *it->second;
      if ((idle ? c.idle_epoch : c.slow_epoch) == epoch) keep.emplace_back(id, epoch);
    }
    q->swap(keep);
  }
  const auto req_to = std::chrono::milliseconds(cfg_.request_timeout_ms);
  const auto idle_to = std::chrono::milliseconds(cfg_.idle_timeout_ms);
  std::vector<uint64_t> expired, timed_out;
  for (auto& [id, c] : conns_) {
    if (c->lingering) {
      if (now >= c->linger_deadline) expired.push_back(id);
    } else if (c->in_flight) {
      continue;
    } else if (c->req_active && !c->closing) {
      if (now - c->req_start >= req_to) timed_out.push_back(id);
    } else if (now - c->last_activity >= idle_to) {
      expired.push_back(id);
    }
  }
  for (uint64_t id : expired) close_conn(id);
  for (uint64_t id : timed_out) {
    auto it = conns_.find(id);
    if (it != conns_.end()) send_error(*it->second, 408, "request not received in time");
  }
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerConfig& cfg, HttpHandler handler) {
  if (!handler) return Status::error("HttpServer::start: no handler");
  auto srv = std::make_unique<HttpServerImpl>(cfg, std::move(handler));
  Status st = srv->init();
  if (!st.is_ok()) return st;
  return std::unique_ptr<HttpServer>(std::move(srv));
}

}  // namespace ember
