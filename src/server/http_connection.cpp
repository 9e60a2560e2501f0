// The response side of the HTTP transport (see http_connection.h): status
// lines and headers, the OpenAI-shaped error bodies, and HttpResponse over a
// connection's shared output queue (Content-Length and chunked framing, HEAD,
// the backlog limit, the 500 / abort a response dropped unfinished gets).
#include "server/http_connection.h"

#include <unistd.h>

#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ember {

const char* http_reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string http_error_json(const std::string& message, const std::string& type) {
  nlohmann::json j = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  return j.dump();
}

namespace transport {

namespace {

bool valid_header_text(const std::string& s) {
  return s.find_first_of("\r\n") == std::string::npos && s.find('\0') == std::string::npos;
}

// Framing headers are the transport's business; handlers cannot override them.
bool reserved_header(const std::string& name) {
  std::string l = name;
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return l == "content-length" || l == "transfer-encoding" || l == "connection";
}

// Builds a status line plus headers (ending with the blank line).
std::string build_head(int status, const std::string& content_type,
                       const std::vector<std::pair<std::string, std::string>>& extra, bool keep_alive,
                       const std::string& framing) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\n", status, http_reason_phrase(status));
  if (!content_type.empty() && valid_header_text(content_type)) h += "Content-Type: " + content_type + "\r\n";
  h += framing;
  for (const auto& [k, v] : extra) {
    if (k.empty() || !valid_header_text(k) || !valid_header_text(v) || k.find(':') != std::string::npos ||
        reserved_header(k)) {
      continue;
    }
    h += k;
    h += ": ";
    h += v;
    h += "\r\n";
  }
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

class ResponseImpl final : public HttpResponse {
 public:
  ResponseImpl(std::shared_ptr<ConnShared> c, bool head, bool http11, bool keep_alive)
      : c_(std::move(c)), head_(head), http11_(http11), keep_alive_(keep_alive) {}

  ~ResponseImpl() override {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lk(c_->mu);
      if (phase_ == Phase::kDone || c_->closed) {
        if (phase_ != Phase::kDone) c_->on_close = nullptr;
      } else if (phase_ == Phase::kNew) {
        std::string r = http_error_response(500, "the request handler produced no response");
        c_->out += r;
        c_->ended = true;
        c_->close_after = true;
        c_->on_close = nullptr;
        wake = true;
      } else {  // streaming, never ended: abort the connection
        c_->on_close = nullptr;
        c_->closed = true;
        c_->drop = true;
        wake = true;
      }
      phase_ = Phase::kDone;
    }
    if (wake) c_->wake();
  }

  void send(int status, const std::string& content_type, std::string body,
            const std::vector<std::pair<std::string, std::string>>& extra_headers) override {
    bool keep = keep_alive_ && !c_->waker->stopping.load();
    bool no_body = status == 204 || status == 304 || (status >= 100 && status < 200);
    std::string framing = no_body ? std::string() : fmt::format("Content-Length: {}\r\n", body.size());
    std::string data = build_head(status, content_type, extra_headers, keep, framing);
    if (!head_ && !no_body) data += body;
    std::function<void()> dead;  // destroyed after the lock: it may own the last reference to its owner
    {
      std::lock_guard<std::mutex> lk(c_->mu);
      if (phase_ != Phase::kNew) return;
      phase_ = Phase::kDone;
      if (c_->closed) return;
      if (append_locked(data)) {
        c_->ended = true;
        c_->close_after = !keep;
        dead = std::move(c_->on_close);
        c_->on_close = nullptr;
      }
    }
    c_->wake();
  }

  void start_stream(int status, const std::string& content_type,
                    const std::vector<std::pair<std::string, std::string>>& extra_headers) override {
    bool keep = keep_alive_ && http11_ && !c_->waker->stopping.load();
    chunked_ = http11_;
    std::string framing = chunked_ ? "Transfer-Encoding: chunked\r\n" : "";
    framing += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
    std::string data = build_head(status, content_type, extra_headers, keep, framing);
    {
      std::lock_guard<std::mutex> lk(c_->mu);
      if (phase_ != Phase::kNew) return;
      phase_ = Phase::kStreaming;
      close_after_ = !keep;
      if (c_->closed) return;
      append_locked(data);
    }
    c_->wake();
  }

  bool write(std::string data) override {
    bool ok;
    {
      std::lock_guard<std::mutex> lk(c_->mu);
      if (phase_ != Phase::kStreaming || c_->closed) return false;
      if (data.empty() || head_) return true;
      if (chunked_) {
        std::string framed = fmt::format("{:x}\r\n", data.size());
        framed += data;
        framed += "\r\n";
        ok = append_locked(framed);
      } else {
        ok = append_locked(data);
      }
    }
    c_->wake();
    return ok;
  }

  void end_stream() override {
    std::function<void()> dead;  // destroyed after the lock (see send())
    {
      std::lock_guard<std::mutex> lk(c_->mu);
      if (phase_ != Phase::kStreaming) return;
      phase_ = Phase::kDone;
      if (c_->closed) return;
      if (!chunked_ || head_ || append_locked("0\r\n\r\n")) {
        c_->ended = true;
        c_->close_after = close_after_;
        dead = std::move(c_->on_close);
        c_->on_close = nullptr;
      }
    }
    c_->wake();
  }

  bool closed() const override {
    std::lock_guard<std::mutex> lk(c_->mu);
    return c_->closed;
  }

  void on_close(std::function<void()> fn) override {
    if (!fn) return;
    {
      std::lock_guard<std::mutex> lk(c_->mu);
      if (phase_ == Phase::kDone && !c_->closed) return;  // ended normally: never fires
      if (!c_->closed) {
        c_->on_close = std::move(fn);
        return;
      }
      if (fired_) return;
      fired_ = true;
    }
    fn();
  }

 private:
  enum class Phase { kNew, kStreaming, kDone };

  // Appends to the connection's queue, or marks it for dropping when the
  // unsent backlog would exceed the limit. Caller holds c_->mu.
  bool append_locked(const std::string& data) {
    if (c_->out.size() + c_->loop_unsent + data.size() > c_->max_backlog) {
      c_->closed = true;
      c_->drop = true;
      c_->out.clear();
      return false;
    }
    c_->out += data;
    return true;
  }

  std::shared_ptr<ConnShared> c_;
  const bool head_;
  const bool http11_;
  const bool keep_alive_;
  // Guarded by c_->mu:
  Phase phase_ = Phase::kNew;
  bool chunked_ = false;
  bool close_after_ = false;
  bool fired_ = false;
};

}  // namespace

std::string http_error_response(int status, const std::string& message) {
  std::string body = http_error_json(message, status >= 500 ? "server_error" : "invalid_request_error");
  return build_head(status, "application/json", {}, false, fmt::format("Content-Length: {}\r\n", body.size())) +
         body;
}

Waker::~Waker() {
  if (efd >= 0) ::close(efd);
}

void Waker::kick() {
  uint64_t one = 1;
  ssize_t r = ::write(efd, &one, sizeof(one));
  (void)r;  // a full eventfd counter already wakes the loop
}

void Waker::notify(uint64_t id) {
  if (!alive.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lk(mu);
    pending.push_back(id);
  }
  kick();
}

std::shared_ptr<HttpResponse> make_http_response(std::shared_ptr<ConnShared> conn, bool head, bool http11,
                                                 bool keep_alive) {
  return std::make_shared<ResponseImpl>(std::move(conn), head, http11, keep_alive);
}

}  // namespace transport
}  // namespace ember
