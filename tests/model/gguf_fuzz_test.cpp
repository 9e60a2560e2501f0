// Deterministic mutation fuzzing of the GGUF parser: a small valid image made
// with GgufWriter is truncated at every length, has bytes flipped and has
// length-like fields overwritten with huge values. parse() must return an
// error or a file whose views all lie inside the buffer - never crash, hang
// or allocate absurdly. (Run under -DEMBER_SANITIZE=ON to catch out-of-bounds
// reads; tests/fuzz/gguf_fuzz.cpp is the libFuzzer version.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "model/io/gguf.h"

namespace ember {
namespace {

std::vector<uint8_t> seed_image() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 2);
  w.add_float32("llama.rope.freq_base", 10000.0f);
  w.add_bool("flag", true);
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "bc"});
  w.add_float32_array("tokenizer.ggml.scores", {0.f, -1.f, -2.f, -3.f});
  w.add_int32_array("ids", {1, 2, 3});
  GgufValue nested;
  nested.type = GgufType::kArray;
  nested.elem_type = GgufType::kArray;
  GgufValue inner;
  inner.type = GgufType::kArray;
  inner.elem_type = GgufType::kUint8;
  inner.ints = {1, 2};
  nested.items = {inner, inner};
  w.add("nested", nested);
  w.add_uint64("big", 1ull << 40);
  static const std::vector<uint8_t> f32(64 * 4, 0x3f), q8(34 * 2, 7), q4k(144, 9);
  EXPECT_TRUE(w.add_tensor("a", DType::kF32, {8, 8}, f32.data(), f32.size()).is_ok());
  EXPECT_TRUE(w.add_tensor("b", DType::kQ8_0, {64}, q8.data(), q8.size()).is_ok());
  EXPECT_TRUE(w.add_tensor("c", DType::kQ4_K, {256}, q4k.data(), q4k.size()).is_ok());
  return w.serialize();
}

// Parses `img` (an exactly sized heap copy, so sanitizers see over-reads) and
// checks the invariants of a successful parse.
void check(const std::vector<uint8_t>& img) {
  std::vector<uint8_t> buf(img);
  auto r = GgufFile::parse(buf.data(), buf.size(), "fuzz.gguf");
  if (!r.is_ok()) {
    ASSERT_EQ(r.status().message().rfind("fuzz.gguf: ", 0), 0u) << r.status().message();
    return;
  }
  const GgufFile& f = *r.value();
  ASSERT_TRUE(f.version() == 2 || f.version() == 3);
  const uint8_t* lo = buf.data();
  const uint8_t* hi = buf.data() + buf.size();
  for (const GgufTensorInfo& t : f.tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(t.view.data);
    ASSERT_GE(p, lo);
    ASSERT_LE(t.view.nbytes, static_cast<size_t>(hi - p));
    ASSERT_GE(t.view.n_dims, 1);
    ASSERT_LE(t.view.n_dims, 4);
    ASSERT_EQ(t.view.nbytes, dtype_row_size(t.view.type, t.view.ne[0]) * static_cast<size_t>(t.view.nrows()));
    ASSERT_EQ(f.find_tensor(t.view.name), &t);
  }
  for (const auto& kv : f.metadata().entries()) ASSERT_EQ(f.metadata().find(kv.first), &kv.second);
}

TEST(GgufFuzz, SeedImageIsValid) {
  auto img = seed_image();
  auto r = GgufFile::parse(img.data(), img.size(), "seed");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value()->tensors().size(), 3u);
}

TEST(GgufFuzz, EveryTruncation) {
  const auto img = seed_image();
  size_t ok = 0;
  for (size_t n = 0; n < img.size(); ++n) {
    std::vector<uint8_t> t(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(n));
    check(t);
    if (HasFatalFailure()) return;
    ok += GgufFile::parse(t.data(), t.size(), "t").is_ok();
  }
  // Only cuts inside the final tensor's padding can leave a valid file.
  EXPECT_LT(ok, 32u);
}

TEST(GgufFuzz, RandomMutations) {
  const auto img = seed_image();
  std::mt19937_64 rng(12345);
  const uint64_t kHuge[] = {0,          1,           0x7f,        0xff,        0xffff,      0x7fffffff,
                            0xffffffff, 1ull << 32,  1ull << 40,  1ull << 62,  1ull << 63,  ~0ull,
                            ~0ull - 31, img.size(),  img.size() - 1};
  const auto start = std::chrono::steady_clock::now();
  int n_ok = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::vector<uint8_t> m = img;
    const int kind = static_cast<int>(rng() % 4);
    const int n_mut = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_mut && !m.empty(); ++k) {
      const size_t pos = rng() % m.size();
      if (kind == 0) {  // byte flips
        m[pos] = static_cast<uint8_t>(rng());
      } else if (kind == 1) {  // bit flip
        m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else if (kind == 2) {  // a length-like field set to an extreme value
        const uint64_t v = kHuge[rng() % std::size(kHuge)];
        const size_t width = rng() % 2 ? 8 : 4;
        if (pos + width <= m.size()) std::memcpy(&m[pos], &v, width);
      } else {  // truncate and flip
        m.resize(pos);
        if (!m.empty()) m[rng() % m.size()] ^= 0xff;
      }
    }
    check(m);
    if (HasFatalFailure()) return;
    n_ok += GgufFile::parse(m.data(), m.size(), "x").is_ok();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 3.0);
  EXPECT_GT(n_ok, 0);  // some mutations (e.g. inside tensor data) stay valid
}

}  // namespace
}  // namespace ember
