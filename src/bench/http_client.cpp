// Blocking HTTP/1.1 client; see http_client.h. Every socket wait goes through
// poll() against one deadline, so a stalled server cannot hold a request past
// its timeout; every length and size read from the server is validated.
#include "bench/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// Milliseconds left until the deadline (>= 0), for poll().
int ms_left(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (d <= 0) return 0;
  return static_cast<int>(std::min<long long>(d, 1 << 30));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on fd until the deadline, or until cancel_fd (if >= 0)
// is readable. Returns ok when fd is ready.
Status wait_fd(int fd, short events, Clock::time_point deadline, const char* what, int cancel_fd) {
  for (;;) {
    const int left = ms_left(deadline);
    if (left == 0) return Status::errorf("timed out {}", what);
    pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int r = ::poll(p, cancel_fd >= 0 ? 2 : 1, left);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::errorf("poll failed {}: {}", what, std::strerror(errno));
    }
    if (r == 0) continue;  // loop re-checks the deadline
    if (cancel_fd >= 0 && p[1].revents) return Status::errorf("cancelled {}", what);
    return Status::ok();
  }
}

Result<int> connect_to(const std::string& host, int port, Clock::time_point connect_deadline, int cancel_fd) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  const int gai = ::getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
  if (gai != 0) return Status::errorf("cannot resolve '{}': {}", host, gai_strerror(gai));
  std::string last_err = "no addresses";
  int result = -1;
  for (addrinfo* ai = res; ai && result < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_err = std::strerror(errno);
      continue;
    }
    const int fl = ::fcntl(fd, F_GETFL, 0);
    ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      Status st = wait_fd(fd, POLLOUT, connect_deadline, "connecting", cancel_fd);
      if (!st) {
        last_err = st.message();
        ::close(fd);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err ? -1 : 0;
      errno = err;
    }
    if (rc < 0) {
      last_err = std::strerror(errno);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    result = fd;
  }
  ::freeaddrinfo(res);
  if (result < 0) return Status::errorf("cannot connect to {}:{}: {}", host, port, last_err);
  return result;
}

Status send_all(int fd, std::string_view data, Clock::time_point deadline, int cancel_fd) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      EMBER_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, "sending the request", cancel_fd));
      continue;
    }
    return Status::errorf("sending the request failed: {}", n < 0 ? std::strerror(errno) : "connection closed");
  }
  return Status::ok();
}

// Buffered reader over the socket, bounded by the deadline.
class Reader {
 public:
  Reader(int fd, Clock::time_point deadline, int cancel_fd) : fd_(fd), deadline_(deadline), cancel_fd_(cancel_fd) {}

  // Reads more bytes into buf_. Returns false at EOF.
  Result<bool> fill() {
    char tmp[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        EMBER_RETURN_IF_ERROR(wait_fd(fd_, POLLIN, deadline_, "waiting for the response", cancel_fd_));
        continue;
      }
      return Status::errorf("reading the response failed: {}", std::strerror(errno));
    }
  }

  // One line without its CRLF/LF; fails beyond max bytes or at EOF.
  Result<std::string> line(size_t max, const char* what) {
    for (;;) {
      const size_t nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        if (nl - pos_ > max) return Status::errorf("{} too long", what);
        std::string s = buf_.substr(pos_, nl - pos_);
        if (!s.empty() && s.back() == '\r') s.pop_back();
        pos_ = nl + 1;
        compact();
        return s;
      }
      if (buf_.size() - pos_ > max) return Status::errorf("{} too long", what);
      auto more = fill();
      if (!more) return more.status();
      if (!*more) return Status::errorf("connection closed while reading {}", what);
    }
  }

  size_t available() const { return buf_.size() - pos_; }
  std::string_view peek() const { return std::string_view(buf_).substr(pos_); }
  void consume(size_t n) {
    pos_ += n;
    compact();
  }

 private:
  void compact() {
    if (pos_ > 65536 && pos_ * 2 > buf_.size()) {
      buf_.erase(0, pos_);
      pos_ = 0;
    } else if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
  }
  int fd_;
  Clock::time_point deadline_;
  int cancel_fd_;
  std::string buf_;
  size_t pos_ = 0;
};

// Parses an unsigned decimal (Content-Length) or hex (chunk size) number.
bool parse_uint(std::string_view s, int base, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = v * base + d;
  }
  *out = v;
  return true;
}

class BodySink {
 public:
  BodySink(HttpClientResponse* resp, const HttpBodyCallback& cb, size_t max) : resp_(resp), cb_(cb), max_(max) {}
  Status put(std::string_view data) {
    if (data.empty()) return Status::ok();
    if (cb_) {
      if (!cb_(resp_->status, data)) return Status::error("aborted by the caller");
      return Status::ok();
    }
    if (resp_->body.size() + data.size() > max_) return Status::errorf("response body larger than {} bytes", max_);
    resp_->body.append(data);
    return Status::ok();
  }

 private:
  HttpClientResponse* resp_;
  const HttpBodyCallback& cb_;
  size_t max_;
};

Status read_chunked(Reader& r, BodySink& sink) {
  for (;;) {
    auto size_line = r.line(1024, "a chunk size line");
    if (!size_line) return size_line.status();
    std::string_view s = *size_line;
    const size_t semi = s.find(';');  // chunk extensions are ignored
    if (semi != std::string_view::npos) s = s.substr(0, semi);
    const std::string t = trim(s);
    uint64_t n = 0;
    if (!parse_uint(t, 16, &n) || n > (uint64_t{1} << 40))
      return Status::errorf("bad chunk size '{}'", t.substr(0, 40));
    if (n == 0) {
      // Trailers until the empty line; a server that closes right after the
      // last chunk is accepted.
      for (int i = 0; i < 64; ++i) {
        auto tl = r.line(8192, "a trailer");
        if (!tl) return Status::ok();
        if (tl->empty()) return Status::ok();
      }
      return Status::error("too many trailers");
    }
    uint64_t left = n;
    while (left > 0) {
      if (r.available() == 0) {
        auto more = r.fill();
        if (!more) return more.status();
        if (!*more) return Status::error("connection closed inside a chunk");
      }
      const size_t take = static_cast<size_t>(std::min<uint64_t>(left, r.available()));
      EMBER_RETURN_IF_ERROR(sink.put(r.peek().substr(0, take)));
      r.consume(take);
      left -= take;
    }
    auto crlf = r.line(2, "a chunk terminator");
    if (!crlf) return crlf.status();
    if (!crlf->empty()) return Status::error("missing CRLF after a chunk");
  }
}

Status read_length(Reader& r, BodySink& sink, uint64_t length) {
  uint64_t left = length;
  while (left > 0) {
    if (r.available() == 0) {
      auto more = r.fill();
      if (!more) return more.status();
      if (!*more) return Status::errorf("connection closed after {} of {} body bytes", length - left, length);
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(left, r.available()));
    EMBER_RETURN_IF_ERROR(sink.put(r.peek().substr(0, take)));
    r.consume(take);
    left -= take;
  }
  return Status::ok();
}

Status read_to_close(Reader& r, BodySink& sink) {
  for (;;) {
    if (r.available() > 0) {
      const size_t n = r.available();
      EMBER_RETURN_IF_ERROR(sink.put(r.peek().substr(0, n)));
      r.consume(n);
    }
    auto more = r.fill();
    if (!more) return more.status();
    if (!*more) return Status::ok();
  }
}

}  // namespace

const std::string* HttpClientResponse::header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

Result<HttpUrl> parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    return Status::errorf("URL '{}' must start with http:// (https is not supported)", url);
  std::string rest = url.substr(scheme.size());
  HttpUrl u;
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) u.path = rest.substr(slash);
  while (!u.path.empty() && u.path.back() == '/') u.path.pop_back();
  if (hostport.empty()) return Status::errorf("URL '{}' has no host", url);
  std::string port_s;
  if (hostport[0] == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return Status::errorf("URL '{}': unterminated [IPv6] host", url);
    u.host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') return Status::errorf("URL '{}': bad host", url);
      port_s = hostport.substr(close + 2);
    }
  } else {
    const size_t colon = hostport.rfind(':');
    u.host = hostport.substr(0, colon);
    if (colon != std::string::npos) port_s = hostport.substr(colon + 1);
  }
  if (u.host.empty()) return Status::errorf("URL '{}' has no host", url);
  if (!port_s.empty() || hostport.back() == ':') {
    uint64_t p = 0;
    if (!parse_uint(port_s, 10, &p) || p < 1 || p > 65535) return Status::errorf("URL '{}': bad port", url);
    u.port = static_cast<int>(p);
  }
  return u;
}

Result<HttpClientResponse> http_request(const HttpClientRequest& req, const HttpBodyCallback& on_body) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(std::max(0.001, req.timeout_s)));
  const auto connect_deadline = std::min(
      deadline, start + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.001, req.connect_timeout_s))));
  if (req.host.empty()) return Status::error("no host");
  if (req.method.empty() || req.method.find_first_of(" \r\n") != std::string::npos)
    return Status::errorf("bad method '{}'", req.method);
  if (req.target.empty() || req.target[0] != '/' || req.target.find_first_of(" \r\n") != std::string::npos)
    return Status::errorf("bad request target '{}'", req.target);

  auto fd_r = connect_to(req.host, req.port, connect_deadline, req.cancel_fd);
  if (!fd_r) return fd_r.status();
  Fd fd(*fd_r);

  std::string head = req.method + " " + req.target + " HTTP/1.1\r\n";
  const bool v6 = req.host.find(':') != std::string::npos;
  head += "Host: " + (v6 ? "[" + req.host + "]" : req.host) + ":" + std::to_string(req.port) + "\r\n";
  head += "Connection: close\r\n";
  bool has_accept = false;
  for (const auto& [k, v] : req.headers) {
    if (k.find_first_of(":\r\n") != std::string::npos || v.find_first_of("\r\n") != std::string::npos)
      return Status::errorf("bad header '{}'", k);
    if (lower(k) == "accept") has_accept = true;
    head += k + ": " + v + "\r\n";
  }
  if (!has_accept) head += "Accept: */*\r\n";
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT")
    head += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  head += "\r\n";
  EMBER_RETURN_IF_ERROR(send_all(fd.get(), head, deadline, req.cancel_fd));
  EMBER_RETURN_IF_ERROR(send_all(fd.get(), req.body, deadline, req.cancel_fd));

  Reader r(fd.get(), deadline, req.cancel_fd);
  HttpClientResponse resp;
  // Status line and headers; 1xx interim responses are skipped.
  for (int interim = 0;; ++interim) {
    if (interim > 8) return Status::error("too many interim (1xx) responses");
    auto status_line = r.line(8192, "the status line");
    if (!status_line) return status_line.status();
    const std::string& sl = *status_line;
    if (sl.compare(0, 7, "HTTP/1.") != 0 || sl.size() < 12 || sl[8] != ' ')
      return Status::errorf("bad status line '{}'", sl.substr(0, 80));
    uint64_t code = 0;
    if (!parse_uint(std::string_view(sl).substr(9, 3), 10, &code) || code < 100 || code > 999)
      return Status::errorf("bad status line '{}'", sl.substr(0, 80));
    resp.status = static_cast<int>(code);
    resp.reason = sl.size() > 13 ? sl.substr(13) : "";
    resp.headers.clear();
    size_t header_bytes = 0;
    for (;;) {
      auto hl = r.line(req.max_header_bytes, "a header line");
      if (!hl) return hl.status();
      if (hl->empty()) break;
      header_bytes += hl->size();
      if (header_bytes > req.max_header_bytes || resp.headers.size() > 256)
        return Status::error("response headers too large");
      const size_t colon = hl->find(':');
      if (colon == std::string::npos || colon == 0) return Status::errorf("bad header line '{}'", hl->substr(0, 80));
      resp.headers.emplace_back(lower(trim(std::string_view(*hl).substr(0, colon))),
                                trim(std::string_view(*hl).substr(colon + 1)));
    }
    if (resp.status >= 200 || resp.status == 101) break;
  }

  BodySink sink(&resp, on_body, req.max_body_bytes);
  Status st;
  const bool no_body = req.method == "HEAD" || resp.status == 204 || resp.status == 304 || resp.status < 200;
  const std::string* te = resp.header("transfer-encoding");
  const std::string* cl = resp.header("content-length");
  if (no_body) {
    st = Status::ok();
  } else if (te && lower(*te).find("chunked") != std::string::npos) {
    st = read_chunked(r, sink);
  } else if (cl) {
    uint64_t n = 0;
    if (!parse_uint(*cl, 10, &n)) return Status::errorf("bad Content-Length '{}'", cl->substr(0, 40));
    if (!on_body && n > req.max_body_bytes) return Status::errorf("response body larger than {} bytes", req.max_body_bytes);
    st = read_length(r, sink, n);
  } else {
    st = read_to_close(r, sink);
  }
  if (!st) return st.with_context(fmt::format("HTTP {} response body", resp.status));
  return resp;
}

}  // namespace ember
