// libFuzzer target for the GGUF parser (built with -DEMBER_BUILD_FUZZ=ON).
//
// Build and run (from the repo root):
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_BUILD_FUZZ=ON -DEMBER_BUILD_TESTS=OFF \
//     -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang && ninja -C build-fuzz gguf_fuzz
//   mkdir -p /tmp/gguf_corpus && cp tests/data/model/ref_types.gguf /tmp/gguf_corpus/
//   build-fuzz/gguf_fuzz /tmp/gguf_corpus -max_total_time=60 -rss_limit_mb=1024 -max_len=65536
//
// Every input must give an error or a file whose tensor views lie inside the
// input; anything else (crash, ASan report, huge allocation) is a bug.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly sized copy so ASan sees reads past the end.
  std::vector<uint8_t> buf(data, data + size);
  auto r = ember::GgufFile::parse(buf.data(), buf.size(), "fuzz");
  if (!r.is_ok()) return 0;
  const uint8_t* lo = buf.data();
  const uint8_t* hi = buf.data() + buf.size();
  for (const ember::GgufTensorInfo& t : r.value()->tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(t.view.data);
    if (p < lo || t.view.nbytes > static_cast<size_t>(hi - p)) std::abort();
    // Touch the first and last byte of every view.
    volatile uint8_t x = p[0];
    x = p[t.view.nbytes - 1];
    (void)x;
  }
  return 0;
}
