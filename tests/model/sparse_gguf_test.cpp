// Sparse int8 / int4 tensors (kSQ8 | C, kSQ4 | C, quant/sparse.h) in GGUF:
// a round trip, and malformed tensors (masks over the row capacity, a value
// of -128, a non-finite scale, a truncated file, an id in a family's range
// that is no capacity) as load errors that name the tensor and the reason.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/io/gguf.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace ember {
namespace {

// rows x n Q8_0 rows of about half zeros, stored sparse.
struct Sparse {
  DType type;
  std::vector<uint8_t> bytes;
};

Sparse make_sparse(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> f(rows * n);
  for (float& v : f) v = rng() % 2 ? g(rng) : 0.f;
  std::vector<uint8_t> q(dtype_row_size(DType::kQ8_0, n) * rows);
  const size_t qrb = dtype_row_size(DType::kQ8_0, n);
  for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0_ref(f.data() + r * n, q.data() + r * qrb, n);
  Sparse s{dtype_sq8(sparse_capacity_q8_0(q.data(), rows, n)), {}};
  const size_t rb = dtype_row_size(s.type, n);
  s.bytes.resize(rb * rows);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(sparse_from_q8_0_row(q.data() + r * qrb, s.bytes.data() + r * rb, n, dtype_sparse_capacity(s.type)).is_ok());
  return s;
}

// A GGUF image with one sparse tensor: it loads; broken ones fail naming the
// tensor and the reason.
std::vector<uint8_t> gguf_image(DType t, int64_t rows, int64_t n, const std::vector<uint8_t>& bytes) {
  GgufWriter w;
  EXPECT_TRUE(w.add_tensor("blk.0.ffn_up.weight", t, {n, rows}, bytes.data(), bytes.size()).is_ok());
  return w.serialize();
}

std::string load_error(const std::vector<uint8_t>& image) {
  auto f = GgufFile::parse(image.data(), image.size(), "sparse.gguf");
  return f.is_ok() ? std::string() : f.status().message();
}

// The id of type t in a GGUF image replaced by `wrong`; the load error.
std::string error_with_type_id(std::vector<uint8_t> image, DType t, uint32_t wrong) {
  const uint32_t id = static_cast<uint32_t>(t);
  size_t at = 0;
  for (size_t i = 0; i + 4 <= image.size(); ++i)
    if (std::memcmp(image.data() + i, &id, 4) == 0) {
      at = i;
      break;
    }
  EXPECT_GT(at, 0u);
  std::memcpy(image.data() + at, &wrong, 4);
  return load_error(image);
}

TEST(SparseGguf, RoundTripAndMalformedTensors) {
  const int64_t rows = 6, n = 256;
  const Sparse s = make_sparse(rows, n, 9);
  const std::vector<uint8_t> good = gguf_image(s.type, rows, n, s.bytes);
  auto f = GgufFile::parse(good.data(), good.size(), "sparse.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const GgufTensorInfo* info = (*f)->find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->view.type, s.type);
  EXPECT_EQ(0, std::memcmp(info->view.data, s.bytes.data(), s.bytes.size()));

  const size_t rb = dtype_row_size(s.type, n);
  {  // a mask keeping more values than the row capacity: row 2, every mask full
    std::vector<uint8_t> bad = s.bytes;
    std::memset(bad.data() + 2 * rb, 0xff, 4 * 8);
    const std::string e = load_error(gguf_image(s.type, rows, n, bad));
    EXPECT_NE(e.find("blk.0.ffn_up.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("sparse row 2"), std::string::npos) << e;
    EXPECT_NE(e.find("over the row capacity"), std::string::npos) << e;
  }
  {  // a kept value of -128
    std::vector<uint8_t> bad = s.bytes;
    const SparseRow r = sparse_row(bad.data() + rb, n);
    ASSERT_GT(std::popcount(sparse_mask(r, 0)), 0);
    bad[rb + 4 * 12] = 0x80;
    const std::string e = load_error(gguf_image(s.type, rows, n, bad));
    EXPECT_NE(e.find("-128"), std::string::npos) << e;
  }
  {  // truncated: the data section ends inside the tensor
    std::vector<uint8_t> cut(good.begin(), good.end() - static_cast<std::ptrdiff_t>(rb));
    const std::string e = load_error(cut);
    EXPECT_NE(e.find("extends past end of file"), std::string::npos) << e;
  }
  // An id in the family's range but not a capacity (65 per 64).
  const std::string e = error_with_type_id(good, s.type, static_cast<uint32_t>(kSQ8) + 65);
  EXPECT_NE(e.find("unsupported tensor type id 1089"), std::string::npos) << e;
}

TEST(SparseGguf, Int4RoundTripAndMalformedTensors) {
  const int64_t rows = 6, n = 256, nb = n / 64;
  std::mt19937 rng(21);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> f(rows * n);
  for (float& v : f) v = rng() % 3 ? 0.f : g(rng);
  const size_t qrb = dtype_row_size(DType::kQ4_0, n);
  std::vector<uint8_t> q(qrb * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row_q4_0_ref(f.data() + r * n, q.data() + r * qrb, n);
  const DType t = dtype_sq4(sparse_capacity_q4_0(q.data(), rows, n));
  ASSERT_TRUE(dtype_is_sq4(t));
  const size_t rb = dtype_row_size(t, n);
  std::vector<uint8_t> bytes(rb * rows);
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_TRUE(sparse_from_q4_0_row(q.data() + r * qrb, bytes.data() + r * rb, n, dtype_sparse_capacity(t)).is_ok());
  const std::vector<uint8_t> good = gguf_image(t, rows, n, bytes);
  auto file = GgufFile::parse(good.data(), good.size(), "sparse.gguf");
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  EXPECT_EQ((*file)->find_tensor("blk.0.ffn_up.weight")->view.type, t);
  {  // every mask of row 3 full: 4 blocks x 32 bytes, over nb * C / 2
    std::vector<uint8_t> bad = bytes;
    std::memset(bad.data() + 3 * rb, 0xff, nb * 8);
    const std::string e = load_error(gguf_image(t, rows, n, bad));
    EXPECT_NE(e.find("blk.0.ffn_up.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("sparse row 3"), std::string::npos) << e;
    EXPECT_NE(e.find("over the row capacity"), std::string::npos) << e;
  }
  {  // an infinite scale (f16 0x7c00) in row 1, block 2
    std::vector<uint8_t> bad = bytes;
    const uint16_t inf = 0x7c00;
    std::memcpy(bad.data() + rb + nb * 8 + 2 * 4, &inf, 2);
    const std::string e = load_error(gguf_image(t, rows, n, bad));
    EXPECT_NE(e.find("sparse row 1: block 2 has a non-finite scale"), std::string::npos) << e;
  }
  // Odd capacities are not sq4 types; past 64 neither.
  EXPECT_NE(error_with_type_id(good, t, static_cast<uint32_t>(kSQ4) + 7).find("unsupported tensor type id 1159"),
            std::string::npos);
  EXPECT_NE(error_with_type_id(good, t, static_cast<uint32_t>(kSQ4) + 66).find("unsupported tensor type id 1218"),
            std::string::npos);
}

}  // namespace
}  // namespace ember
