// Helpers shared by the model-format tests: a little-endian byte builder for
// hand-made GGUF images, GGUF array values, a minimal safetensors writer and
// temp folders.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/metadata.h"

namespace ember::test {

// Appends little-endian fields.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& raw(const void* p, size_t n) {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    b.insert(b.end(), q, q + n);
    return *this;
  }
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& f32(float v) { return raw(&v, 4); }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s.data(), s.size()); }
  Bytes& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  Bytes& pad_to(size_t align) { return zeros((align - b.size() % align) % align); }
  // GGUF header.
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // One tensor info (dims in GGML order).
  Bytes& tensor_info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
};

// A GGUF array value of integers of element type `et`.
inline GgufValue int_array(GgufType et, std::vector<int64_t> v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = et;
  a.count = v.size();
  a.ints = std::move(v);
  return a;
}

// One tensor for make_safetensors: raw little-endian bytes.
struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

inline std::vector<uint8_t> make_safetensors(const std::vector<StTensor>& tensors,
                                             const nlohmann::json& metadata = nlohmann::json()) {
  nlohmann::json h = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const StTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  Bytes out;
  out.u64(text.size()).raw(text.data(), text.size()).raw(data.data(), data.size());
  return out.b;
}

// Raw safetensors image from a header text and a data section.
inline std::vector<uint8_t> make_safetensors_raw(const std::string& header, const std::vector<uint8_t>& data) {
  Bytes out;
  out.u64(header.size()).raw(header.data(), header.size()).raw(data.data(), data.size());
  return out.b;
}

inline void write_file(const std::filesystem::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
inline void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& b) { write_file(p, b.data(), b.size()); }
inline void write_file(const std::filesystem::path& p, const std::string& s) { write_file(p, s.data(), s.size()); }

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A fresh empty folder under the test temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("ember_" + tag + "_" + (info ? std::string(info->name()) : "x") + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline std::vector<uint8_t> pattern_bytes(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(seed)) & 0xff);
  return v;
}

}  // namespace ember::test
