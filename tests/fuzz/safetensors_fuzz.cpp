// libFuzzer target for the safetensors header parser (built with
// -DEMBER_BUILD_FUZZ=ON).
//
// Build and run (from the repo root):
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_BUILD_FUZZ=ON -DEMBER_BUILD_TESTS=OFF \
//     -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang && ninja -C build-fuzz safetensors_fuzz
//   mkdir -p /tmp/st_corpus && cp tests/data/model/hf_qwen2/model.safetensors /tmp/st_corpus/
//   build-fuzz/safetensors_fuzz /tmp/st_corpus -max_total_time=60 -rss_limit_mb=1024 -max_len=65536
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "model/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> buf(data, data + size);
  auto r = ember::SafetensorsFile::parse(buf.data(), buf.size(), "fuzz");
  if (!r.is_ok()) return 0;
  const uint8_t* lo = buf.data();
  const uint8_t* hi = buf.data() + buf.size();
  for (const ember::SafetensorsTensor& t : r.value()->tensors()) {
    if (t.nbytes == 0) continue;
    if (t.data < lo || t.nbytes > static_cast<size_t>(hi - t.data)) std::abort();
    volatile uint8_t x = t.data[0];
    x = t.data[t.nbytes - 1];
    (void)x;
    auto v = ember::safetensors_view(t, t.name, "fuzz");
    if (v.is_ok() && v.value().nbytes != t.nbytes) std::abort();
  }
  return 0;
}
