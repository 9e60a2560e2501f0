// Readers for the reference fixtures in tests/data/quant/ (written by
// tools/gen_quant_fixtures.py; formats documented there).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ember::testing {

inline std::string quant_fixture_path(const std::string& name) {
  return std::string(EMBER_SOURCE_DIR) + "/tests/data/quant/" + name;
}

inline bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

inline uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// quant_input.bin: rows of floats.
struct QuantInput {
  uint32_t nrows = 0, n_per_row = 0;
  std::vector<float> data;  // [nrows, n_per_row]
};

inline std::string load_quant_input(QuantInput* in) {
  std::vector<uint8_t> raw;
  const std::string path = quant_fixture_path("quant_input.bin");
  if (!read_file(path, &raw)) return "cannot read " + path;
  if (raw.size() < 12 || std::memcmp(raw.data(), "EQIN", 4) != 0) return "bad header in " + path;
  in->nrows = read_u32(&raw[4]);
  in->n_per_row = read_u32(&raw[8]);
  const size_t n = static_cast<size_t>(in->nrows) * in->n_per_row;
  if (raw.size() != 12 + 4 * n) return "bad size of " + path;
  in->data.resize(n);
  std::memcpy(in->data.data(), &raw[12], 4 * n);
  return "";
}

// quant_<type>.bin: llama.cpp's quantized bytes for quant_input.bin.
struct QuantExpected {
  DType type{};
  uint32_t nrows = 0, n_per_row = 0;
  std::vector<uint8_t> bytes;
};

inline std::string load_quant_expected(const std::string& type_name, QuantExpected* q) {
  std::vector<uint8_t> raw;
  const std::string path = quant_fixture_path("quant_" + type_name + ".bin");
  if (!read_file(path, &raw)) return "cannot read " + path;
  if (raw.size() < 20 || std::memcmp(raw.data(), "EQQT", 4) != 0) return "bad header in " + path;
  q->type = static_cast<DType>(read_u32(&raw[4]));
  q->nrows = read_u32(&raw[8]);
  q->n_per_row = read_u32(&raw[12]);
  const uint32_t nbytes = read_u32(&raw[16]);
  if (raw.size() != 20 + static_cast<size_t>(nbytes)) return "bad size of " + path;
  q->bytes.assign(raw.begin() + 20, raw.end());
  return "";
}

// dequant_<type>.bin: quantized blocks and gguf-py's float32 output.
struct DequantCase {
  DType type{};
  std::vector<uint8_t> bytes;
  std::vector<float> expected;
};

inline std::string load_dequant_case(const std::string& type_name, DequantCase* c) {
  std::vector<uint8_t> raw;
  const std::string path = quant_fixture_path("dequant_" + type_name + ".bin");
  if (!read_file(path, &raw)) return "cannot read " + path;
  if (raw.size() < 16 || std::memcmp(raw.data(), "EQDQ", 4) != 0) return "bad header in " + path;
  c->type = static_cast<DType>(read_u32(&raw[4]));
  const uint32_t n = read_u32(&raw[8]);
  const uint32_t nbytes = read_u32(&raw[12]);
  if (raw.size() != 16 + static_cast<size_t>(nbytes) + 4 * static_cast<size_t>(n)) return "bad size of " + path;
  c->bytes.assign(raw.begin() + 16, raw.begin() + 16 + nbytes);
  c->expected.resize(n);
  std::memcpy(c->expected.data(), &raw[16 + nbytes], 4 * static_cast<size_t>(n));
  return "";
}

// Every type with a reference quantizer/dequantizer, by fixture name.
// Types with per-byte quantizer fixtures (F16/BF16 are covered by the stress
// hashes).
inline const std::vector<std::string>& quantized_type_names() {
  static const std::vector<std::string> kNames = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1",
                                                  "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K",
                                                  "mxfp4"};
  return kNames;
}

inline const std::vector<std::string>& quant_type_names() {
  static const std::vector<std::string> kNames = {"f16",  "bf16", "q4_0", "q4_1", "q5_0",
                                                  "q5_1", "q8_0", "q8_1", "q2_K", "q3_K",
                                                  "q4_K", "q5_K", "q6_K", "q8_K", "mxfp4"};
  return kNames;
}

}  // namespace ember::testing
