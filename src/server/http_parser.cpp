// Incremental HTTP/1.x request parser: request line, headers, Content-Length
// and chunked bodies, trailers; strict validation with the status code the
// server should answer (400, 413, 417, 431, 501, 505).
#include "server/http_parser.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace ember {

namespace {

constexpr size_t kMaxChunkLine = 4096;

bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

std::string to_lower(std::string s) {
  for (char& c : s) c = lower(c);
  return s;
}

std::string trim(const std::string& s, size_t b, size_t e) {
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

// Splits a comma-separated header value into lower-cased, trimmed tokens.
std::vector<std::string> split_tokens(const std::string& v) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= v.size()) {
    size_t e = v.find(',', b);
    if (e == std::string::npos) e = v.size();
    std::string t = to_lower(trim(v, b, e));
    if (!t.empty()) out.push_back(std::move(t));
    b = e + 1;
  }
  return out;
}

}  // namespace

void HttpRequestParser::reset() {
  phase_ = Phase::kRequestLine;
  req_ = HttpRequest{};
  version_minor_ = 1;
  keep_alive_ = true;
  expect_continue_ = false;
  header_bytes_ = 0;
  scanned_ = 0;
  body_remaining_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

bool HttpRequestParser::wants_continue() const {
  return expect_continue_ && phase_ > Phase::kHeaders && phase_ != Phase::kDone;
}

HttpRequestParser::State HttpRequestParser::fail(int status, std::string msg) {
  error_status_ = status;
  error_message_ = std::move(msg);
  return State::kError;
}

HttpRequestParser::State HttpRequestParser::feed(const char* data, size_t len, size_t* consumed) {
  size_t pos = 0;
  *consumed = 0;
  if (error_status_ != 0) return State::kError;
  for (;;) {
    if (phase_ == Phase::kDone) {
      *consumed = pos;
      return State::kComplete;
    }
    if (phase_ == Phase::kBody || phase_ == Phase::kChunkData) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(body_remaining_, len - pos));
      req_.body.append(data + pos, take);
      pos += take;
      body_remaining_ -= take;
      if (body_remaining_ > 0) {
        *consumed = pos;
        return State::kNeedMore;
      }
      phase_ = phase_ == Phase::kBody ? Phase::kDone : Phase::kChunkDataEnd;
      continue;
    }

    // Line-oriented phases.
    const bool header_phase =
        phase_ == Phase::kRequestLine || phase_ == Phase::kHeaders || phase_ == Phase::kTrailers;
    const size_t limit = header_phase ? (max_header_bytes_ > header_bytes_ ? max_header_bytes_ - header_bytes_ : 0)
                                      : kMaxChunkLine;
    const char* start = data + pos;
    const size_t avail = len - pos;
    const size_t from = std::min(scanned_, avail);
    const void* nl = avail > from ? std::memchr(start + from, '\n', avail - from) : nullptr;
    const size_t line_len = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) + 1 : avail;
    if (line_len > limit) {
      if (header_phase) return fail(431, "request header section too large");
      return fail(400, "malformed chunked body: chunk header line too long");
    }
    if (!nl) {
      scanned_ = avail;
      *consumed = pos;
      return State::kNeedMore;
    }
    scanned_ = 0;
    pos += line_len;
    if (header_phase) header_bytes_ += line_len;
    size_t n = line_len - 1;
    if (n > 0 && start[n - 1] == '\r') --n;

    switch (phase_) {
      case Phase::kRequestLine:
        if (n == 0) break;  // tolerate empty lines before the request line
        if (!parse_request_line(start, n)) return State::kError;
        phase_ = Phase::kHeaders;
        break;
      case Phase::kHeaders:
        if (n == 0) {
          if (!finish_headers()) return State::kError;
        } else if (!parse_header_line(start, n)) {
          return State::kError;
        }
        break;
      case Phase::kChunkSize: {
        uint64_t size = 0;
        size_t i = 0;
        for (; i < n; ++i) {
          char c = lower(start[i]);
          int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
          if (d < 0) break;
          if (i >= 15) return fail(400, "malformed chunked body: chunk size too large");
          size = size * 16 + static_cast<uint64_t>(d);
        }
        if (i == 0) return fail(400, "malformed chunked body: bad chunk size");
        for (; i < n && (start[i] == ' ' || start[i] == '\t'); ++i) {
        }
        if (i < n && start[i] != ';') return fail(400, "malformed chunked body: bad chunk size");
        if (size > max_body_bytes_ || req_.body.size() + size > max_body_bytes_) {
          return fail(413, "request body too large");
        }
        if (size == 0) {
          phase_ = Phase::kTrailers;
        } else {
          body_remaining_ = size;
          phase_ = Phase::kChunkData;
        }
        break;
      }
      case Phase::kChunkDataEnd:
        if (n != 0) return fail(400, "malformed chunked body: missing CRLF after chunk data");
        phase_ = Phase::kChunkSize;
        break;
      case Phase::kTrailers:
        if (n == 0) {
          phase_ = Phase::kDone;
        } else if (std::memchr(start, ':', n) == nullptr) {
          return fail(400, "malformed trailer field");
        }
        break;  // trailer fields are validated loosely and dropped
      case Phase::kBody:
      case Phase::kChunkData:
      case Phase::kDone:
        // Handled before a line is read (the checks at the top of the loop).
        EMBER_CHECK_MSG(false, "HttpRequestParser: a body phase in the line switch");
        break;
    }
  }
}

bool HttpRequestParser::parse_request_line(const char* p, size_t n) {
  std::string line(p, n);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos || sp1 == 0 || sp2 == sp1 + 1 ||
      line.find(' ', sp2 + 1) != std::string::npos) {
    fail(400, "malformed request line");
    return false;
  }
  std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string version = line.substr(sp2 + 1);
  for (unsigned char c : method) {
    if (!is_tchar(c)) {
      fail(400, "malformed request line: bad method");
      return false;
    }
  }
  for (unsigned char c : target) {
    if (c <= 0x20 || c == 0x7f) {
      fail(400, "malformed request line: bad request target");
      return false;
    }
  }
  if (version == "HTTP/1.1") {
    version_minor_ = 1;
    keep_alive_ = true;
  } else if (version == "HTTP/1.0") {
    version_minor_ = 0;
    keep_alive_ = false;
  } else if (version.size() == 8 && version.compare(0, 5, "HTTP/") == 0 && version[5] >= '0' &&
             version[5] <= '9' && version[6] == '.' && version[7] >= '0' && version[7] <= '9') {
    fail(505, "HTTP version not supported: " + version);
    return false;
  } else {
    fail(400, "malformed request line: bad HTTP version");
    return false;
  }

  // Origin form "/p?q"; absolute form "http://host/p?q" is reduced to its path.
  std::string rest = target;
  if (target[0] != '/') {
    std::string lt = to_lower(target.substr(0, 8));
    size_t scheme = lt.rfind("http://", 0) == 0 ? 7 : lt.rfind("https://", 0) == 0 ? 8 : 0;
    if (scheme != 0) {
      size_t slash = target.find_first_of("/?", scheme);
      rest = slash == std::string::npos ? "/" : target.substr(slash);
      if (!rest.empty() && rest[0] == '?') rest = "/" + rest;
    } else if (!(target == "*" && method == "OPTIONS") && method != "CONNECT") {
      fail(400, "malformed request line: bad request target");
      return false;
    }
  }
  size_t q = rest.find('?');
  req_.method = std::move(method);
  req_.target = std::move(target);
  req_.path = rest.substr(0, q);
  req_.query = q == std::string::npos ? std::string() : rest.substr(q + 1);
  return true;
}

bool HttpRequestParser::parse_header_line(const char* p, size_t n) {
  if (p[0] == ' ' || p[0] == '\t') {
    fail(400, "malformed header: obsolete line folding");
    return false;
  }
  size_t colon = 0;
  while (colon < n && p[colon] != ':') {
    if (!is_tchar(static_cast<unsigned char>(p[colon]))) {
      fail(400, "malformed header name");
      return false;
    }
    ++colon;
  }
  if (colon == 0 || colon == n) {
    fail(400, "malformed header line");
    return false;
  }
  for (size_t i = colon + 1; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      fail(400, "malformed header value");
      return false;
    }
  }
  std::string line(p, n);
  req_.headers.emplace_back(to_lower(line.substr(0, colon)), trim(line, colon + 1, n));
  return true;
}

bool HttpRequestParser::finish_headers() {
  bool have_cl = false, have_te = false, chunked = false;
  uint64_t content_length = 0;
  std::string te_all;
  for (const auto& [name, value] : req_.headers) {
    if (name == "content-length") {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail(400, "invalid Content-Length");
        return false;
      }
      uint64_t v = std::stoull(value);
      if (have_cl && v != content_length) {
        fail(400, "conflicting Content-Length headers");
        return false;
      }
      have_cl = true;
      content_length = v;
    } else if (name == "transfer-encoding") {
      have_te = true;
      if (!te_all.empty()) te_all += ",";
      te_all += value;
    } else if (name == "connection") {
      for (const std::string& t : split_tokens(value)) {
        if (t == "close") keep_alive_ = false;
        if (t == "keep-alive" && version_minor_ == 0) keep_alive_ = true;
      }
    } else if (name == "expect") {
      if (to_lower(value) != "100-continue") {
        fail(417, "unsupported expectation: " + value);
        return false;
      }
      expect_continue_ = version_minor_ == 1;
    }
  }
  if (have_te) {
    std::vector<std::string> codings = split_tokens(te_all);
    if (codings.size() != 1 || codings[0] != "chunked") {
      fail(codings.empty() || codings.back() != "chunked" ? 400 : 501,
           "unsupported Transfer-Encoding: " + te_all);
      return false;
    }
    chunked = true;
  }
  if (have_cl && have_te) {
    fail(400, "both Content-Length and Transfer-Encoding present");
    return false;
  }
  if (have_cl && content_length > max_body_bytes_) {
    fail(413, "request body too large");
    return false;
  }
  if (chunked) {
    phase_ = Phase::kChunkSize;
  } else if (content_length > 0) {
    body_remaining_ = content_length;
    req_.body.reserve(static_cast<size_t>(std::min<uint64_t>(content_length, 256 << 10)));  // trust data, not claims
    phase_ = Phase::kBody;
  } else {
    expect_continue_ = false;
    phase_ = Phase::kDone;
  }
  return true;
}

}  // namespace ember
