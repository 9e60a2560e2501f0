// Tests for the HTTP/1.1 server transport (src/server/http_server.h) and its
// request parser, driven by raw POSIX client sockets against a server on
// 127.0.0.1 with an ephemeral port and short timeouts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/http_parser.h"
#include "server/http_server.h"

namespace ember {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int connect_to(int port, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

struct Resp {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  std::vector<std::string> chunks;
  bool chunked = false;
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? "" : it->second;
  }
};

class Client {
 public:
  explicit Client(int port, int rcvbuf = 0) : fd_(connect_to(port, rcvbuf)) {}
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& s) { return send_all(fd_, s); }

  // Reads one response (a 100 Continue counts as one). False on EOF/timeout/garbage.
  bool read(Resp* r, bool head = false) {
    *r = Resp{};
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return false;
    }
    std::string hdr = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t eol = hdr.find("\r\n");
    std::string status_line = hdr.substr(0, eol);
    if (status_line.compare(0, 9, "HTTP/1.1 ") != 0) return false;
    r->status = std::atoi(status_line.c_str() + 9);
    size_t pos = eol == std::string::npos ? hdr.size() : eol + 2;
    while (pos < hdr.size()) {
      size_t e = hdr.find("\r\n", pos);
      if (e == std::string::npos) e = hdr.size();
      std::string line = hdr.substr(pos, e - pos);
      size_t c = line.find(':');
      if (c == std::string::npos) return false;
      std::string name = line.substr(0, c);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      size_t v = line.find_first_not_of(' ', c + 1);
      r->headers[name] = v == std::string::npos ? "" : line.substr(v);
      pos = e + 2;
    }
    if (r->status < 200 || head) return true;
    if (r->header("transfer-encoding") == "chunked") {
      r->chunked = true;
      for (;;) {
        size_t le;
        while ((le = buf_.find("\r\n")) == std::string::npos) {
          if (!fill()) return false;
        }
        size_t n = std::stoul(buf_.substr(0, le), nullptr, 16);
        buf_.erase(0, le + 2);
        while (buf_.size() < n + 2) {
          if (!fill()) return false;
        }
        if (buf_.compare(n, 2, "\r\n") != 0) return false;
        if (n == 0) {
          buf_.erase(0, 2);
          return true;
        }
        r->chunks.push_back(buf_.substr(0, n));
        r->body += r->chunks.back();
        buf_.erase(0, n + 2);
      }
    }
    if (r->headers.count("content-length")) {
      size_t n = std::stoul(r->header("content-length"));
      while (buf_.size() < n) {
        if (!fill()) return false;
      }
      r->body = buf_.substr(0, n);
      buf_.erase(0, n);
      return true;
    }
    while (fill()) {
    }
    r->body = buf_;
    buf_.clear();
    return true;
  }

  // True if the server closes the connection (EOF or reset) within `ms`.
  bool wait_closed(int ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (Clock::now() < deadline) {
      char tmp[4096];
      timeval tv{0, 50000};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
      if (n > 0) buf_.append(tmp, static_cast<size_t>(n));
    }
    return false;
  }

  std::string& buffered() { return buf_; }

 private:
  bool fill() {
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string buf_;
};

HttpServerConfig test_config() {
  HttpServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.request_timeout_ms = 300;
  cfg.idle_timeout_ms = 3000;
  cfg.max_header_bytes = 4096;
  cfg.max_body_bytes = 1 << 20;
  cfg.n_handler_threads = 4;
  return cfg;
}

// Echoes "METHOD path query|body"; /sleep?N sleeps N ms first.
void echo_handler(const HttpRequest& req, std::shared_ptr<HttpResponse> resp) {
  if (req.path == "/sleep") std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(req.query.c_str())));
  std::string ua = req.header("x-test") ? *req.header("x-test") : "";
  resp->send(200, "text/plain", req.method + " " + req.path + " " + req.query + "|" + req.body,
             {{"X-Echo-Header", ua}, {"X-Peer", req.peer}});
}

std::unique_ptr<HttpServer> start_server(const HttpServerConfig& cfg, HttpHandler h) {
  auto r = HttpServer::start(cfg, std::move(h));
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (!r.is_ok()) return nullptr;
  return std::move(r.value());
}

std::string get(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

std::string post(const std::string& target, const std::string& body, const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra + "\r\n" + body;
}

void expect_json_error(const Resp& r, int status) {
  EXPECT_EQ(r.status, status);
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.header("connection"), "close");
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  ASSERT_TRUE(j.contains("error"));
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
}

// Waits until pred() or the timeout; returns pred().
template <typename Pred>
bool wait_for(Pred pred, int ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (!pred() && Clock::now() < deadline) std::this_thread::sleep_for(2ms);
  return pred();
}

// ---------------------------------------------------------------- parser

TEST(HttpServerParser, ByteByByteWithChunkedBodyAndTrailers) {
  std::string raw =
      "\r\nPOST http://example.com/v1/x?a=b HTTP/1.1\r\nHOST: e\r\nTransfer-Encoding:  Chunked \r\n\r\n"
      "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
  HttpRequestParser p(4096, 1024);
  std::string pending;
  HttpRequestParser::State st = HttpRequestParser::State::kNeedMore;
  size_t i = 0;
  for (; i < raw.size() && st == HttpRequestParser::State::kNeedMore; ++i) {
    pending += raw[i];
    size_t used = 0;
    st = p.feed(pending.data(), pending.size(), &used);
    pending.erase(0, used);
  }
  ASSERT_EQ(st, HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.request().method, "POST");
  EXPECT_EQ(p.request().path, "/v1/x");
  EXPECT_EQ(p.request().query, "a=b");
  EXPECT_EQ(p.request().body, "abc0123456789");
  ASSERT_NE(p.request().header("host"), nullptr);
  EXPECT_EQ(*p.request().header("host"), "e");
  EXPECT_TRUE(p.keep_alive());
  EXPECT_EQ(raw.substr(i), "GET /next HTTP/1.1\r\n\r\n");
}

TEST(HttpServerParser, RejectsMalformedInput) {
  struct Case {
    std::string raw;
    int status;
  } cases[] = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET / HTTP/1.1 extra\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / FOO/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n", 413},
      {"POST / HTTP/1.1\r\nExpect: magic\r\n\r\n", 417},
      {"GET /" + std::string(5000, 'a') + " HTTP/1.1\r\n\r\n", 431},
  };
  for (const Case& c : cases) {
    HttpRequestParser p(1024, 1024);
    size_t used = 0;
    EXPECT_EQ(p.feed(c.raw.data(), c.raw.size(), &used), HttpRequestParser::State::kError) << c.raw;
    EXPECT_EQ(p.error_status(), c.status) << c.raw;
  }
}

TEST(HttpServerParser, KeepAliveRules) {
  auto ka = [](const std::string& raw) {
    HttpRequestParser p(1024, 1024);
    size_t used = 0;
    EXPECT_EQ(p.feed(raw.data(), raw.size(), &used), HttpRequestParser::State::kComplete);
    return p.keep_alive();
  };
  EXPECT_TRUE(ka("GET / HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(ka("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
  EXPECT_FALSE(ka("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(ka("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

TEST(HttpServerParser, RandomSplitsGiveTheSameRequests) {
  std::string raw;
  std::vector<std::string> bodies;
  for (int i = 0; i < 20; ++i) {
    std::string body(static_cast<size_t>(i * 37 % 300), static_cast<char>('a' + i));
    bodies.push_back(body);
    if (i % 2 == 0) {
      raw += "POST /r" + std::to_string(i) + " HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n" + body;
    } else {
      raw += "POST /r" + std::to_string(i) + " HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
      for (size_t off = 0; off < body.size(); off += 50) {
        std::string part = body.substr(off, 50);
        char hex[16];
        std::snprintf(hex, sizeof(hex), "%zx", part.size());
        raw += std::string(hex) + "\r\n" + part + "\r\n";
      }
      raw += "0\r\n\r\n";
    }
  }
  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    HttpRequestParser p(1024, 4096);
    std::string pending;
    size_t pos = 0;
    std::vector<std::string> got;
    while (pos < raw.size() || !pending.empty()) {
      size_t n = std::min<size_t>(raw.size() - pos, 1 + rng() % 97);
      pending.append(raw, pos, n);
      pos += n;
      for (;;) {
        size_t used = 0;
        auto st = p.feed(pending.data(), pending.size(), &used);
        pending.erase(0, used);
        ASSERT_NE(st, HttpRequestParser::State::kError) << p.error_message();
        if (st != HttpRequestParser::State::kComplete) break;
        EXPECT_EQ(p.request().path, "/r" + std::to_string(got.size()));
        got.push_back(p.request().body);
        p.reset();
      }
      if (pos == raw.size() && !pending.empty()) break;
    }
    EXPECT_EQ(got, bodies);
  }
}

TEST(HttpServerParser, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  const std::string alphabet = "GETPOST /HTP1.0\r\n:;chunkedContent-Length0123456789abcdef \t\x01\xff";
  int errors = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string raw = trial % 2 ? "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" : "";
    size_t len = rng() % 200;
    for (size_t i = 0; i < len; ++i) raw += alphabet[rng() % alphabet.size()];
    HttpRequestParser p(256, 256);
    size_t used = 0;
    if (p.feed(raw.data(), raw.size(), &used) == HttpRequestParser::State::kError) {
      ++errors;
      EXPECT_GE(p.error_status(), 400);
    }
    EXPECT_LE(used, raw.size());
  }
  EXPECT_GT(errors, 100);
}

// ---------------------------------------------------------------- server

TEST(HttpServer, SimpleGetAndPost) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  EXPECT_GT(srv->port(), 0);
  Client c(srv->port());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send(get("/hello?x=1", "X-Test:   spaced value  \r\n")));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "GET /hello x=1|");
  EXPECT_EQ(r.header("content-type"), "text/plain");
  EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size()));
  EXPECT_EQ(r.header("connection"), "keep-alive");
  EXPECT_EQ(r.header("x-echo-header"), "spaced value");
  EXPECT_EQ(r.header("x-peer").rfind("127.0.0.1:", 0), 0u);

  Client c2(srv->port());
  ASSERT_TRUE(c2.send(post("/v1/chat", "{\"a\":1}")));
  ASSERT_TRUE(c2.read(&r));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /v1/chat |{\"a\":1}");
}

TEST(HttpServer, KeepAliveSequentialRequests) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  Client c(srv->port());
  Resp r;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send(post("/k", "n" + std::to_string(i))));
    ASSERT_TRUE(c.read(&r));
    EXPECT_EQ(r.body, "POST /k |n" + std::to_string(i));
  }
}

TEST(HttpServer, PipelinedRequestsAnswerInOrder) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  Client c(srv->port());
  // The first one is slow: responses must still come back in request order.
  ASSERT_TRUE(c.send(get("/sleep?60") + post("/b", "xyz") + get("/c") + "HEAD /d HTTP/1.1\r\n\r\n" + get("/e")));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.body, "GET /sleep 60|");
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.body, "POST /b |xyz");
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.body, "GET /c |");
  ASSERT_TRUE(c.read(&r, /*head=*/true));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-length"), std::to_string(std::string("HEAD /d |").size()));
  ASSERT_TRUE(c.read(&r));  // HEAD sent no body: the next response follows directly
  EXPECT_EQ(r.body, "GET /e |");
}

TEST(HttpServer, ChunkedRequestBody) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send("POST /ch HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"));
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(c.send("lo\r\n6;x=y\r\n world\r\n0\r\nTrailer: v\r\n\r\n"));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /ch |hello world");
}

TEST(HttpServer, ExpectContinue) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.status, 100);
  ASSERT_TRUE(c.send("abcde"));
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /up |abcde");
}

TEST(HttpServer, ConnectionCloseAndHttp10) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  Resp r;
  {
    Client c(srv->port());
    ASSERT_TRUE(c.send(get("/x", "Connection: close\r\n")));
    ASSERT_TRUE(c.read(&r));
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(c.wait_closed(1000));
  }
  {
    Client c(srv->port());
    ASSERT_TRUE(c.send("GET /old HTTP/1.0\r\n\r\n"));
    ASSERT_TRUE(c.read(&r));
    EXPECT_EQ(r.body, "GET /old |");
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(c.wait_closed(1000));
  }
  {
    Client c(srv->port());
    ASSERT_TRUE(c.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    ASSERT_TRUE(c.read(&r));
    EXPECT_EQ(r.header("connection"), "keep-alive");
    ASSERT_TRUE(c.send("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    ASSERT_TRUE(c.read(&r));
    EXPECT_EQ(r.body, "GET /b |");
  }
}

TEST(HttpServer, OversizedHeaderGets431) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n"));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  expect_json_error(r, 431);
  EXPECT_TRUE(c.wait_closed(2000));
}

TEST(HttpServer, OversizedBodyGets413BeforeBodyIsSent) {
  HttpServerConfig cfg = test_config();
  cfg.max_body_bytes = 1000;
  std::atomic<int> calls{0};
  auto srv = start_server(cfg, [&](const HttpRequest& q, std::shared_ptr<HttpResponse> r) {
    ++calls;
    echo_handler(q, r);
  });
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n" + std::string(100, 'x')));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  expect_json_error(r, 413);
  EXPECT_TRUE(c.wait_closed(2000));
  EXPECT_EQ(calls.load(), 0);
}

TEST(HttpServer, MalformedRequestsGet400) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  for (const std::string& raw : {std::string("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"),
                                std::string("\x16\x03\x01 garbage not http\r\n\r\n"),
                                std::string("POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n")}) {
    Client c(srv->port());
    ASSERT_TRUE(c.send(raw));
    Resp r;
    ASSERT_TRUE(c.read(&r)) << raw;
    expect_json_error(r, 400);
    EXPECT_TRUE(c.wait_closed(2000));
  }
}

TEST(HttpServer, SlowLorisTimesOutWhileOthersAreServed) {
  auto srv = start_server(test_config(), echo_handler);  // request_timeout_ms = 300
  ASSERT_TRUE(srv);
  Client slow(srv->port());
  auto t0 = Clock::now();
  ASSERT_TRUE(slow.send("GET / HTTP/1.1\r\n"));
  std::atomic<bool> closed{false};
  std::thread dripper([&] {
    const char* drip = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (int i = 0; drip[i] && !closed.load(); ++i) {
      if (!send_all(slow.fd(), std::string(1, drip[i]))) break;
      std::this_thread::sleep_for(50ms);
    }
  });
  // Meanwhile another client is served normally.
  Client other(srv->port());
  Resp r;
  ASSERT_TRUE(other.send(get("/fast")));
  ASSERT_TRUE(other.read(&r));
  EXPECT_EQ(r.body, "GET /fast |");
  EXPECT_LT(Clock::now() - t0, 250ms);

  Resp e;
  bool got = slow.read(&e);
  auto elapsed = Clock::now() - t0;
  closed = true;
  dripper.join();
  ASSERT_TRUE(got);
  expect_json_error(e, 408);
  EXPECT_GE(elapsed, 290ms);
  EXPECT_LT(elapsed, 1000ms);
  EXPECT_TRUE(slow.wait_closed(2500));
}

TEST(HttpServer, IdleKeepAliveConnectionIsClosed) {
  HttpServerConfig cfg = test_config();
  cfg.idle_timeout_ms = 200;
  auto srv = start_server(cfg, echo_handler);
  ASSERT_TRUE(srv);
  Client c(srv->port());
  Resp r;
  ASSERT_TRUE(c.send(get("/")));
  ASSERT_TRUE(c.read(&r));
  auto t0 = Clock::now();
  EXPECT_TRUE(c.wait_closed(1500));
  EXPECT_GE(Clock::now() - t0, 150ms);
}

// Holds the responses handed to a handler so a test can drive them.
struct Captured {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<HttpResponse>> resps;
  std::atomic<int> closes{0};
  Clock::time_point last_close;

  HttpHandler handler(bool stream) {
    return [this, stream](const HttpRequest&, std::shared_ptr<HttpResponse> resp) {
      resp->on_close([this] {
        last_close = Clock::now();
        ++closes;
      });
      if (stream) resp->start_stream(200, "text/event-stream");
      std::lock_guard<std::mutex> lk(mu);
      resps.push_back(resp);
      cv.notify_all();
    };
  }
  std::shared_ptr<HttpResponse> wait(size_t n) {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, 3s, [&] { return resps.size() >= n; })) return nullptr;
    return resps[n - 1];
  }
};

TEST(HttpServer, StreamingResponseFromAnotherThread) {
  Captured cap;
  auto srv = start_server(test_config(), cap.handler(true));
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send(get("/stream")));
  auto resp = cap.wait(1);
  ASSERT_TRUE(resp);
  EXPECT_EQ(srv->n_in_flight(), 1);
  std::thread producer([resp] {
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(resp->write("data: " + std::to_string(i) + "\n\n"));
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_TRUE(resp->write(""));  // empty writes must not end the stream
    resp->end_stream();
    EXPECT_FALSE(resp->write("late"));
  });
  Resp r;
  ASSERT_TRUE(c.read(&r));
  producer.join();
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.header("cache-control"), "no-cache");
  EXPECT_EQ(r.header("x-accel-buffering"), "no");
  ASSERT_EQ(r.chunks.size(), 5u);
  EXPECT_EQ(r.chunks[3], "data: 3\n\n");
  EXPECT_TRUE(wait_for([&] { return srv->n_in_flight() == 0; }, 1000));
  EXPECT_EQ(cap.closes.load(), 0);  // the response ended normally
  // Connection is still usable.
  ASSERT_TRUE(c.send(get("/again")));
  auto resp2 = cap.wait(2);
  ASSERT_TRUE(resp2);
  resp2->end_stream();
  ASSERT_TRUE(c.read(&r));
  EXPECT_TRUE(r.chunks.empty());
}

TEST(HttpServer, ClientDisconnectDuringStreamFiresOnClose) {
  Captured cap;
  auto srv = start_server(test_config(), cap.handler(true));
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send(get("/stream")));
  auto resp = cap.wait(1);
  ASSERT_TRUE(resp);
  ASSERT_TRUE(resp->write("data: first\n\n"));
  std::string& buf = c.buffered();
  while (buf.find("data: first") == std::string::npos) {
    char tmp[1024];
    ssize_t n = ::recv(c.fd(), tmp, sizeof(tmp), 0);
    ASSERT_GT(n, 0);
    buf.append(tmp, static_cast<size_t>(n));
  }
  auto t0 = Clock::now();
  c.close();
  ASSERT_TRUE(wait_for([&] { return cap.closes.load() == 1; }, 1000));
  EXPECT_LT(cap.last_close - t0, 100ms);
  EXPECT_TRUE(resp->closed());
  EXPECT_FALSE(resp->write("data: more\n\n"));
  resp->end_stream();  // no-op
  EXPECT_EQ(cap.closes.load(), 1);
  EXPECT_EQ(srv->n_in_flight(), 0);
  // Registering after the close calls back at once.
  std::atomic<bool> late{false};
  resp->on_close([&] { late = true; });
  EXPECT_TRUE(late.load());
}

TEST(HttpServer, ClientDisconnectBeforeResponseFiresOnClose) {
  Captured cap;
  auto srv = start_server(test_config(), cap.handler(false));
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send(post("/v1/completions", "{}")));
  auto resp = cap.wait(1);
  ASSERT_TRUE(resp);
  EXPECT_FALSE(resp->closed());
  auto t0 = Clock::now();
  c.close();
  ASSERT_TRUE(wait_for([&] { return cap.closes.load() == 1; }, 1000));
  EXPECT_LT(cap.last_close - t0, 100ms);
  resp->send(200, "text/plain", "too late");  // accepted and dropped
  EXPECT_TRUE(resp->closed());
  EXPECT_EQ(cap.closes.load(), 1);
}

TEST(HttpServer, NonReadingClientIsDroppedAtBacklogLimit) {
  HttpServerConfig cfg = test_config();
  cfg.max_output_backlog = 1 << 20;
  Captured cap;
  auto srv = start_server(cfg, cap.handler(true));
  ASSERT_TRUE(srv);
  Client c(srv->port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(c.send(get("/stream")));
  auto resp = cap.wait(1);
  ASSERT_TRUE(resp);
  std::string chunk(64 << 10, 'z');
  int accepted = 0;
  while (accepted < 4096 && resp->write(chunk)) {
    ++accepted;
    if (accepted % 16 == 0) std::this_thread::sleep_for(1ms);  // let the loop fill the socket
  }
  EXPECT_LT(accepted, 4096);  // dropped long before 256 MiB
  EXPECT_TRUE(resp->closed());
  EXPECT_TRUE(wait_for([&] { return cap.closes.load() == 1; }, 1000));
  EXPECT_TRUE(wait_for([&] { return srv->n_in_flight() == 0; }, 1000));
}

TEST(HttpServer, FramingHeadersCannotBeOverriddenOrInjected) {
  auto srv = start_server(test_config(), [](const HttpRequest&, std::shared_ptr<HttpResponse> resp) {
    resp->send(201, "application/json", "{}",
               {{"Content-Length", "999"}, {"connection", "close"}, {"X-Bad", "a\r\nX-Injected: 1"}, {"X-Ok", "1"}});
  });
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send(get("/")));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body, "{}");
  EXPECT_EQ(r.header("content-length"), "2");
  EXPECT_EQ(r.header("connection"), "keep-alive");
  EXPECT_EQ(r.header("x-ok"), "1");
  EXPECT_EQ(r.headers.count("x-injected"), 0u);
  EXPECT_EQ(r.headers.count("x-bad"), 0u);
}

TEST(HttpServer, Http10StreamIsUnframedAndEndsWithClose) {
  Captured cap;
  auto srv = start_server(test_config(), cap.handler(true));
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send("GET /s HTTP/1.0\r\n\r\n"));
  auto resp = cap.wait(1);
  ASSERT_TRUE(resp);
  EXPECT_TRUE(resp->write("one "));
  EXPECT_TRUE(resp->write("two"));
  resp->end_stream();
  Resp r;
  ASSERT_TRUE(c.read(&r));  // no Content-Length, not chunked: body runs to EOF
  EXPECT_FALSE(r.chunked);
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_EQ(r.body, "one two");
}

TEST(HttpServer, HandlerThatDropsResponseYields500) {
  auto srv = start_server(test_config(), [](const HttpRequest&, std::shared_ptr<HttpResponse>) {});
  ASSERT_TRUE(srv);
  Client c(srv->port());
  ASSERT_TRUE(c.send(get("/")));
  Resp r;
  ASSERT_TRUE(c.read(&r));
  EXPECT_EQ(r.status, 500);
}

TEST(HttpServer, MaxConnectionsGets503OnlyWhenAllAreInFlight) {
  Captured cap;
  HttpServerConfig cfg = test_config();
  cfg.max_connections = 2;
  auto srv = start_server(cfg, cap.handler(false));
  ASSERT_TRUE(srv);
  Client a(srv->port()), b(srv->port());
  ASSERT_TRUE(a.send(get("/a")));
  ASSERT_TRUE(b.send(get("/b")));
  ASSERT_TRUE(cap.wait(2));  // both requests in flight: neither can make room
  Client c(srv->port());
  ASSERT_TRUE(c.ok());
  Resp r;
  ASSERT_TRUE(c.read(&r));
  expect_json_error(r, 503);
  EXPECT_TRUE(c.wait_closed(2000));
  // Once a response ends its connection is idle, and a new client takes its place.
  cap.resps[0]->send(200, "text/plain", "done");
  ASSERT_TRUE(a.read(&r));
  EXPECT_EQ(r.status, 200);
  Client d(srv->port());
  ASSERT_TRUE(d.send(get("/d")));
  auto resp = cap.wait(3);
  ASSERT_TRUE(resp);
  resp->send(200, "text/plain", "d");
  ASSERT_TRUE(d.read(&r));
  EXPECT_EQ(r.body, "d");
  EXPECT_TRUE(a.wait_closed(2000));  // a was the idle one: closed for d
  EXPECT_EQ(srv->n_evicted(), 1);
}

// Idle and slow connections at the limit make room for new clients: the
// longest idle goes first, then the oldest partial request (with a 503);
// connections with a request in flight never.
TEST(HttpServer, IdleAndSlowConnectionsMakeRoomForNewClients) {
  Captured cap;
  HttpServerConfig cfg = test_config();
  cfg.max_connections = 8;
  cfg.request_timeout_ms = 30000;
  cfg.idle_timeout_ms = 30000;
  auto srv = start_server(cfg, cap.handler(false));
  ASSERT_TRUE(srv);
  std::vector<std::unique_ptr<Client>> idle, slow, fresh;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Client>(srv->port()));
  ASSERT_TRUE(wait_for([&] { return srv->n_connections() == 4; }, 2000));
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::make_unique<Client>(srv->port()));
    ASSERT_TRUE(slow.back()->send("GET /slow HTTP/1.1\r\nX-Partial: "));
    ASSERT_TRUE(wait_for([&] { return srv->n_connections() == 5 + i; }, 2000));
  }
  // 8 new clients whose requests stay in flight: the 4 idle connections go
  // first, oldest first, then the 4 slow ones, oldest first.
  for (int i = 0; i < 8; ++i) {
    fresh.push_back(std::make_unique<Client>(srv->port()));
    ASSERT_TRUE(fresh.back()->send(get("/n" + std::to_string(i))));
    ASSERT_TRUE(cap.wait(static_cast<size_t>(i) + 1)) << i;
    if (i < 4) {
      EXPECT_TRUE(idle[static_cast<size_t>(i)]->wait_closed(2000)) << i;
    } else {
      Resp r;
      ASSERT_TRUE(slow[static_cast<size_t>(i - 4)]->read(&r)) << i;
      expect_json_error(r, 503);
    }
  }
  EXPECT_EQ(srv->n_evicted(), 8);
  // Now every connection has a request in flight: a new one gets 503.
  Client last(srv->port());
  Resp r;
  ASSERT_TRUE(last.read(&r));
  expect_json_error(r, 503);
  for (size_t i = 0; i < 8; ++i) {
    cap.resps[i]->send(200, "text/plain", "ok");
    ASSERT_TRUE(fresh[i]->read(&r));
    EXPECT_EQ(r.body, "ok");
  }
}

TEST(HttpServer, PerClientLimitClosesThatClientsIdleConnections) {
  Captured cap;
  HttpServerConfig cfg = test_config();
  cfg.max_connections_per_client = 2;
  auto srv = start_server(cfg, cap.handler(false));
  ASSERT_TRUE(srv);
  Client a(srv->port()), b(srv->port());
  ASSERT_TRUE(wait_for([&] { return srv->n_connections() == 2; }, 2000));
  Client c(srv->port());  // a (idle, the oldest) makes room
  EXPECT_TRUE(a.wait_closed(2000));
  ASSERT_TRUE(b.send(get("/b")));
  ASSERT_TRUE(c.send(get("/c")));
  ASSERT_TRUE(cap.wait(2));
  Client d(srv->port());  // both in flight: 429
  Resp r;
  ASSERT_TRUE(d.read(&r));
  expect_json_error(r, 429);
  for (auto& resp : cap.resps) resp->send(200, "text/plain", "ok");
}

TEST(HttpServer, StopAcceptingRefusesNewConnections) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  const int port = srv->port();
  Client kept(port);
  Resp r;
  ASSERT_TRUE(kept.send(get("/1")));
  ASSERT_TRUE(kept.read(&r));
  srv->stop_accepting();
  EXPECT_LT(connect_to(port), 0);
  ASSERT_TRUE(kept.send(get("/2")));
  ASSERT_TRUE(kept.read(&r));
  expect_json_error(r, 503);
  EXPECT_TRUE(kept.wait_closed(2000));
  srv->stop_accepting();  // idempotent
}

TEST(HttpServer, ShutdownWithOpenConnectionsFiresOnClose) {
  Captured cap;
  auto srv = start_server(test_config(), cap.handler(false));
  ASSERT_TRUE(srv);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>(srv->port()));
    ASSERT_TRUE(clients.back()->send(get("/hang")));
  }
  Client idle(srv->port());
  ASSERT_TRUE(cap.wait(3));
  EXPECT_EQ(srv->n_in_flight(), 3);
  auto t0 = Clock::now();
  srv->shutdown();
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_EQ(cap.closes.load(), 3);
  for (auto& c : clients) EXPECT_TRUE(c->wait_closed(1000));
  EXPECT_TRUE(idle.wait_closed(1000));
  EXPECT_FALSE(cap.resps[0]->write("x"));
  cap.resps[1]->send(200, "text/plain", "late");  // no-op, no crash
  srv->shutdown();  // idempotent
  srv.reset();
  cap.resps[2]->start_stream(200, "text/plain");  // server gone: still a no-op
  EXPECT_TRUE(cap.resps[2]->closed());
}

TEST(HttpServer, ManyConcurrentClients) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  const int port = srv->port();
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      Client c(port);
      if (!c.ok()) return;
      for (int i = 0; i < 20; ++i) {
        std::string body = "t" + std::to_string(t) + "i" + std::to_string(i);
        Resp r;
        if (!c.send(post("/m", body)) || !c.read(&r)) return;
        if (r.status == 200 && r.body == "POST /m |" + body) ++good;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 64 * 20);
}

TEST(HttpServer, ManyConcurrentStreamsFromOneEngineThread) {
  constexpr int kStreams = 32, kChunks = 40;
  Captured cap;
  auto srv = start_server(test_config(), cap.handler(true));
  ASSERT_TRUE(srv);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<Client>(srv->port()));
    ASSERT_TRUE(clients.back()->send(get("/s")));
  }
  ASSERT_TRUE(cap.wait(kStreams));
  // Like an engine step loop: one token for every stream per step.
  std::thread engine([&] {
    for (int step = 0; step < kChunks; ++step) {
      for (int i = 0; i < kStreams; ++i) cap.resps[i]->write("data: " + std::to_string(step) + "\n\n");
    }
    for (int i = 0; i < kStreams; ++i) cap.resps[i]->end_stream();
  });
  std::atomic<int> good{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < kStreams; ++i) {
    readers.emplace_back([&, i] {
      Resp r;
      if (!clients[i]->read(&r)) return;
      std::string expect;
      for (int step = 0; step < kChunks; ++step) expect += "data: " + std::to_string(step) + "\n\n";
      if (r.body == expect) ++good;
    });
  }
  engine.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(good.load(), kStreams);
  EXPECT_TRUE(wait_for([&] { return srv->n_in_flight() == 0; }, 1000));
}

TEST(HttpServer, BindErrorsAreReported) {
  auto srv = start_server(test_config(), echo_handler);
  ASSERT_TRUE(srv);
  HttpServerConfig cfg = test_config();
  cfg.port = srv->port();
  auto r = HttpServer::start(cfg, echo_handler);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot bind 127.0.0.1:" + std::to_string(cfg.port)), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("in use"), std::string::npos) << r.status().message();

  cfg.host = "not-an-address.invalid";
  cfg.port = 0;
  EXPECT_FALSE(HttpServer::start(cfg, echo_handler).is_ok());

  cfg.host = "localhost";
  auto ok = HttpServer::start(cfg, echo_handler);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  Client c((*ok)->port());
  Resp resp;
  ASSERT_TRUE(c.send(get("/l")));
  ASSERT_TRUE(c.read(&resp));
  EXPECT_EQ(resp.status, 200);
}

TEST(HttpServer, Ipv6Loopback) {
  HttpServerConfig cfg = test_config();
  cfg.host = "::1";
  auto r = HttpServer::start(cfg, echo_handler);
  if (!r.is_ok()) GTEST_SKIP() << "no IPv6 loopback: " << r.status().message();
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>((*r)->port()));
  a.sin6_addr = in6addr_loopback;
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_TRUE(send_all(fd, get("/six")));
  std::string got;
  char tmp[4096];
  while (got.find("GET /six |") == std::string::npos) {
    ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) break;
    got.append(tmp, static_cast<size_t>(n));
  }
  ::close(fd);
  EXPECT_NE(got.find("X-Peer: [::1]:"), std::string::npos) << got;
  EXPECT_NE(got.find("GET /six |"), std::string::npos) << got;
}

}  // namespace
}  // namespace ember
