// libFuzzer target for the HTTP/1.x request parser of `ember serve`
// (src/server/http_parser.h; built with -DEMBER_BUILD_FUZZ=ON).
//
// Build and run (from the repo root):
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_BUILD_FUZZ=ON -DEMBER_BUILD_TESTS=OFF \
//     -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang && ninja -C build-fuzz http_parser_fuzz
//   mkdir -p /tmp/http_corpus && printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}' \
//     > /tmp/http_corpus/post && printf 'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n' \
//     > /tmp/http_corpus/chunked
//   build-fuzz/http_parser_fuzz /tmp/http_corpus -max_total_time=60 -rss_limit_mb=1024 -max_len=8192
//
// The input is a byte stream from a client (pipelined requests included),
// parsed the way the event loop does it: whatever has arrived is fed, the
// unconsumed tail is fed again with the next bytes, and the parser is reset
// after each complete request. Every input must give the same requests and
// the same final state whether it arrives at once or in pieces (the piece
// sizes come from the input's first bytes), every error must carry a 4xx/5xx
// status and a message, and the size limits must hold. Anything else (crash,
// ASan/UBSan report, a check failure) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/http_parser.h"

namespace {

constexpr size_t kMaxHeader = 512;
constexpr size_t kMaxBody = 1024;

struct Outcome {
  std::vector<std::string> requests;  // one line per complete request
  ember::HttpRequestParser::State last = ember::HttpRequestParser::State::kNeedMore;
  int error_status = 0;
};

std::string describe(ember::HttpRequestParser& p) {
  const ember::HttpRequest& r = p.request();
  std::string s = r.method + ' ' + r.target + ' ' + r.path + '?' + r.query + (p.http11() ? " 1.1" : " 1.0") +
                  (p.keep_alive() ? " keep" : " close");
  for (const auto& [k, v] : r.headers) s += '\n' + k + ": " + v;
  return s + "\n\n" + r.body;
}

// Feeds `stream` in pieces of the given sizes (cycled; 0 means the rest).
Outcome run(const std::string& stream, const std::vector<size_t>& pieces) {
  Outcome out;
  ember::HttpRequestParser p(kMaxHeader, kMaxBody);
  std::string in;
  size_t off = 0, arrived = 0, k = 0;
  while (arrived < stream.size() || off < in.size()) {
    if (arrived < stream.size()) {
      size_t n = pieces.empty() || pieces[k % pieces.size()] == 0 ? stream.size() - arrived
                                                                  : pieces[k % pieces.size()];
      ++k;
      if (n > stream.size() - arrived) n = stream.size() - arrived;
      in.append(stream, arrived, n);
      arrived += n;
    }
    // Parse what has arrived, request after request (as the event loop does).
    for (;;) {
      size_t used = 0;
      auto st = p.feed(in.data() + off, in.size() - off, &used);
      if (used > in.size() - off) std::abort();
      off += used;
      out.last = st;
      if (st == ember::HttpRequestParser::State::kError) {
        out.error_status = p.error_status();
        if (out.error_status < 400 || out.error_status > 599 || p.error_message().empty()) std::abort();
        return out;
      }
      if (st == ember::HttpRequestParser::State::kNeedMore) break;
      const ember::HttpRequest& r = p.request();
      if (r.body.size() > kMaxBody || r.method.empty()) std::abort();
      out.requests.push_back(describe(p));
      p.reset();
      if (off == in.size()) break;
    }
    if (arrived == stream.size()) break;  // everything fed; the rest needs more bytes
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first two bytes choose the piece sizes: 1..16 bytes, or 1..4 and 17.
  if (size < 2) return 0;
  const std::vector<size_t> pieces = {static_cast<size_t>(data[0] % 16 + 1), static_cast<size_t>(data[1] % 4 + 1),
                                      17};
  const std::string stream(reinterpret_cast<const char*>(data + 2), size - 2);
  const Outcome whole = run(stream, {});
  const Outcome split = run(stream, pieces);
  if (whole.requests != split.requests || whole.last != split.last || whole.error_status != split.error_status) {
    std::abort();
  }
  return 0;
}
