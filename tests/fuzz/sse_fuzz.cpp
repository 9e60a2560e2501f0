// libFuzzer target for the Server-Sent Events parser of the serving
// benchmark (src/bench/sse.h; built with -DEMBER_BUILD_FUZZ=ON).
//
// Build and run (from the repo root):
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_BUILD_FUZZ=ON -DEMBER_BUILD_TESTS=OFF \
//     -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang && ninja -C build-fuzz sse_fuzz
//   mkdir -p /tmp/sse_corpus && printf '\xef\xbb\xbfdata: {"a":1}\r\n\r\nevent: x\rdata: y\n: c\n\ndata: [DONE]\n\n' \
//     > /tmp/sse_corpus/stream
//   build-fuzz/sse_fuzz /tmp/sse_corpus -max_total_time=60 -rss_limit_mb=1024 -max_len=4096
//
// The input is a response body from an untrusted server. Every input must
// give the same events whether it arrives at once or in pieces of any size
// (the piece sizes come from the input's first bytes; the line limit is far
// above the input size, so it never trips). Anything else (crash, ASan/UBSan
// report, differing events) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "bench/sse.h"

namespace {

std::vector<ember::SseEvent> run(std::string_view body, const std::vector<size_t>& pieces) {
  ember::SseParser p;
  std::vector<ember::SseEvent> out;
  size_t pos = 0, k = 0;
  while (pos < body.size()) {
    size_t n = pieces.empty() ? body.size() - pos : pieces[k++ % pieces.size()];
    if (n > body.size() - pos) n = body.size() - pos;
    if (!p.feed(body.substr(pos, n), &out)) std::abort();
    pos += n;
  }
  p.finish(&out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::vector<size_t> pieces = {static_cast<size_t>(data[0] % 8 + 1), static_cast<size_t>(data[1] % 3 + 1)};
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  const auto whole = run(body, {});
  const auto split = run(body, pieces);
  if (whole.size() != split.size()) std::abort();
  for (size_t i = 0; i < whole.size(); ++i) {
    if (whole[i].event != split[i].event || whole[i].data != split[i].data || whole[i].id != split[i].id) {
      std::abort();
    }
  }
  return 0;
}
