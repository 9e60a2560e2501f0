// Safetensors reader tests: files written by the safetensors library
// (tools/gen_format_fixtures.py), a sharded folder, and one corrupt header or
// index per validation rule.
#include <gtest/gtest.h>

#include <cmath>

#include "core/fp16.h"
#include "format_test_util.h"
#include "model/io/safetensors.h"

namespace ember {
namespace {

using nlohmann::json;
using test::StTensor;

const std::string kData = EMBER_SOURCE_DIR "/tests/data/model";

Result<std::unique_ptr<SafetensorsFile>> parse(const std::vector<uint8_t>& img) {
  return SafetensorsFile::parse(img.data(), img.size(), "mem.safetensors");
}

void expect_error(const std::vector<uint8_t>& img, const std::string& want) {
  auto r = parse(img);
  ASSERT_FALSE(r.is_ok()) << "expected an error containing: " << want;
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("mem.safetensors: ", 0), 0u) << m;
  EXPECT_NE(m.find(want), std::string::npos) << "message: " << m << "\nwanted: " << want;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

std::vector<uint8_t> f32_bytes(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Safetensors, ReadsLibraryWrittenFile) {
  auto r = SafetensorsFile::open(kData + "/hf_qwen2/model.safetensors");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const SafetensorsFile& f = *r.value();
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const json exp = json::parse(test::read_file(kData + "/hf_qwen2/expected.json"));
  EXPECT_EQ(f.tensors().size(), exp["tensors"].size());  // no lm_head: tied
  const SafetensorsTensor* q = f.find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->dtype, "BF16");
  EXPECT_TRUE(q->supported);
  EXPECT_EQ(q->type, DType::kBF16);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(q->nbytes, 32u * 32 * 2);
  auto v = safetensors_view(*q, "blk.1.attn_q.weight", f.path());
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v.value().name, "blk.1.attn_q.weight");
  EXPECT_EQ(v.value().n_dims, 2);
  EXPECT_EQ(v.value().shape_string(), "[32, 32]");
  const json& e = exp["tensors"]["blk.1.attn_q.weight"];
  const uint16_t* h = static_cast<const uint16_t*>(v.value().data);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bf16_to_f32(h[i]), e["first"][i].get<double>());
  // Non-square: GGML order reverses the PyTorch shape.
  const SafetensorsTensor* k = f.find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(safetensors_view(*k, "x", "f").value().shape_string(), "[32, 8]");
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, ShardedFolder) {
  auto r = open_safetensors_dir(kData + "/hf_llama_sharded");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files.size(), 2u);
  const json index = json::parse(test::read_file(kData + "/hf_llama_sharded/model.safetensors.index.json"));
  EXPECT_EQ(r->tensors.size(), index["weight_map"].size());
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    auto t = r->tensors.find(it.key());
    ASSERT_NE(t, r->tensors.end()) << it.key();
    EXPECT_NE(t->second.file->path().find(it.value().get<std::string>()), std::string::npos);
    EXPECT_EQ(t->second.tensor->dtype, "F16");
  }
}

TEST(Safetensors, FolderWithoutIndex) {
  test::TempDir dir("st");
  test::write_file(dir.path() / "b.safetensors", test::make_safetensors({{"y", "F32", {1}, f32_bytes({2})}}));
  test::write_file(dir.path() / "a.safetensors", test::make_safetensors({{"x", "F32", {1}, f32_bytes({1})}}));
  auto r = open_safetensors_dir(dir.str());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files.size(), 2u);
  EXPECT_EQ(r->tensors.size(), 2u);
  // The same tensor in two files is an error.
  test::write_file(dir.path() / "c.safetensors", test::make_safetensors({{"x", "F32", {1}, f32_bytes({3})}}));
  auto dup = open_safetensors_dir(dir.str());
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.status().message().find("tensor 'x' is in both"), std::string::npos) << dup.status().message();

  test::TempDir empty("st_empty");
  auto none = open_safetensors_dir(empty.str());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no *.safetensors files"), std::string::npos);
  EXPECT_FALSE(open_safetensors_dir(empty.str() + "/missing").is_ok());
}

TEST(Safetensors, IndexErrors) {
  test::TempDir dir("st_index");
  test::write_file(dir.path() / "s1.safetensors", test::make_safetensors({{"x", "F32", {1}, f32_bytes({1})}}));
  auto with_index = [&](const std::string& text) {
    test::write_file(dir.path() / "model.safetensors.index.json", text);
    auto r = open_safetensors_dir(dir.str());
    return r.is_ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_EQ(with_index(R"({"weight_map": {"x": "s1.safetensors"}})"), "ok");
  EXPECT_NE(with_index(R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})")
                .find("weight_map puts 'y' in s1.safetensors, but that file does not hold it"),
            std::string::npos);
  EXPECT_NE(with_index(R"({"weight_map": {"x": "s2.safetensors"}})").find("s2.safetensors: cannot open"),
            std::string::npos);
  EXPECT_NE(with_index(R"({"weight_map": {"x": "../s1.safetensors"}})").find("names an invalid file"),
            std::string::npos);
  EXPECT_NE(with_index(R"({"weight_map": {"x": 5}})").find("weight_map entry 'x' is not a string"),
            std::string::npos);
  EXPECT_NE(with_index(R"({"metadata": {}})").find("missing or non-object 'weight_map'"), std::string::npos);
  EXPECT_NE(with_index(R"({"weight_map": {}})").find("weight_map is empty"), std::string::npos);
  EXPECT_NE(with_index("{oops").find("invalid JSON"), std::string::npos);
  EXPECT_NE(with_index("").find("invalid JSON"), std::string::npos);
}

TEST(Safetensors, ValidHandMadeFile) {
  std::vector<uint8_t> f16(6 * 2), bf(2 * 2);
  for (int i = 0; i < 6; ++i) {
    const uint16_t h = f32_to_f16(static_cast<float>(i));
    std::memcpy(&f16[2 * i], &h, 2);
  }
  auto img = test::make_safetensors({{"a", "F16", {2, 3}, f16},
                                     {"b", "BF16", {2}, bf},
                                     {"s", "F32", {}, f32_bytes({7})},
                                     {"e", "F32", {0, 4}, {}},
                                     {"i", "I64", {1}, std::vector<uint8_t>(8)}},
                                    json{{"k", "v"}});
  auto r = parse(img);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const SafetensorsFile& f = *r.value();
  EXPECT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("k"), "v");
  auto a = safetensors_view(*f.find("a"), "a", "f");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a.value().type, DType::kF16);
  EXPECT_EQ(a.value().shape_string(), "[3, 2]");
  EXPECT_EQ(f16_to_f32(static_cast<const uint16_t*>(a.value().data)[5]), 5.0f);
  auto s = safetensors_view(*f.find("s"), "s", "f");  // rank 0 -> [1]
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s.value().shape_string(), "[1]");
  EXPECT_EQ(*static_cast<const float*>(s.value().data), 7.0f);
  // Known but unsupported dtypes parse; making a view fails clearly.
  const SafetensorsTensor* i = f.find("i");
  ASSERT_TRUE(i);
  EXPECT_FALSE(i->supported);
  auto iv = safetensors_view(*i, "i", "m.safetensors");
  ASSERT_FALSE(iv.is_ok());
  EXPECT_EQ(iv.status().message(), "m.safetensors: tensor 'i': dtype I64 is not supported (only F32, F16 and BF16)");
  EXPECT_FALSE(safetensors_view(*f.find("e"), "e", "f").is_ok());  // zero dimension
  auto big = test::make_safetensors({{"r5", "F32", {1, 1, 1, 1, 1}, f32_bytes({1})}});
  auto rb = parse(big);
  ASSERT_TRUE(rb.is_ok());
  auto v5 = safetensors_view(rb.value()->tensors()[0], "r5", "f");
  ASSERT_FALSE(v5.is_ok());
  EXPECT_NE(v5.status().message().find("rank 5 exceeds 4"), std::string::npos);
}

TEST(SafetensorsErrors, HeaderFraming) {
  expect_error({1, 2, 3}, "file too small for a safetensors header (3 bytes)");
  test::Bytes b;
  b.u64(100).raw("{}", 2);
  expect_error(b.b, "header length 100 exceeds the 2 bytes after the length field");
  test::Bytes b2;
  b2.u64(~0ull).zeros(8);
  expect_error(b2.b, "header length 18446744073709551615 exceeds");
  expect_error(test::make_safetensors_raw("[1, 2]", {}), "header is not a JSON object (must start with '{')");
  expect_error(test::make_safetensors_raw("{\"a\"", {}), "header: invalid JSON");
  expect_error(test::make_safetensors_raw("{\"a\": 1} x", {}), "header: invalid JSON");
  expect_error(test::make_safetensors_raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                          R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                          std::vector<uint8_t>(8)),
               "header: duplicate key 'a'");
  std::string deep = "{\"__metadata__\": ";
  for (int i = 0; i < 50; ++i) deep += "[";
  for (int i = 0; i < 50; ++i) deep += "]";
  deep += "}";
  expect_error(test::make_safetensors_raw(deep, {}), "nested deeper than 8 levels");
}

TEST(SafetensorsErrors, Entries) {
  auto one = [](const std::string& entry, size_t data = 16) {
    return test::make_safetensors_raw("{\"t\": " + entry + "}", std::vector<uint8_t>(data));
  };
  expect_error(one("5"), "tensor 't': entry is not an object");
  expect_error(one(R"({"shape": [1], "data_offsets": [0, 4]})"), "tensor 't': missing or non-string 'dtype'");
  expect_error(one(R"({"dtype": "F32", "data_offsets": [0, 4]})"), "tensor 't': missing or non-array 'shape'");
  expect_error(one(R"({"dtype": "F32", "shape": [1]})"), "'data_offsets' must be an array of two integers");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})"),
               "'data_offsets' must be an array of two integers");
  expect_error(one(R"({"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]})"), "tensor 't': unknown dtype 'Q4'");
  expect_error(one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"),
               "tensor 't': shape[0] is not a non-negative integer");
  expect_error(one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"),
               "tensor 't': shape[0] is not a non-negative integer");
  expect_error(one(R"({"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]})"),
               "tensor 't': rank 9 exceeds 8");
  expect_error(one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]})"),
               "tensor 't': element count overflows");
  expect_error(one(R"({"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 4]})"),
               "tensor 't': byte size overflows");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, -4]})"),
               "'data_offsets' must be non-negative integers");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})"), "data_offsets [8, 4] are reversed");
  expect_error(one(R"({"dtype": "F32", "shape": [8], "data_offsets": [0, 32]})"),
               "tensor 't': data [offset 70, size 32] extends past end of file (size 86)");
  expect_error(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})"),
               "tensor 't': data_offsets [0, 4] hold 4 bytes but F32 x 2 needs 8");
  expect_error(test::make_safetensors_raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                          std::vector<uint8_t>(16)),
               "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": {"k": 1})"),
               "__metadata__ value for 'k' is not a string");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": [])"),
               "__metadata__ is not an object");
  expect_error(test::make_safetensors_raw(R"({"": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                                          std::vector<uint8_t>(4)),
               "tensor with an empty name");
}

TEST(SafetensorsErrors, OpenNamesTheFile) {
  test::TempDir dir("st");
  const std::string p = (dir.path() / "x.safetensors").string();
  test::write_file(p, std::string("\x05\0\0\0\0\0\0\0{}", 10));
  auto r = SafetensorsFile::open(p);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind(p + ": ", 0), 0u) << r.status().message();
}

// Mutations of a valid image never crash and never yield out-of-range views.
TEST(SafetensorsErrors, Mutations) {
  const std::string text = test::read_file(kData + "/hf_qwen2/model.safetensors");
  std::vector<uint8_t> img(text.begin(), text.end());
  uint64_t hlen = 0;
  std::memcpy(&hlen, img.data(), 8);
  img.resize(8 + hlen + 64);  // header plus a little data keeps this fast
  uint32_t state = 7;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int iter = 0; iter < 600; ++iter) {
    std::vector<uint8_t> m = img;
    const int n = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < n; ++k) {
      const size_t pos = next() % (8 + hlen);
      static const char kChars[] = "0123456789{}[]\",:-e.FBI";
      m[pos] = static_cast<uint8_t>(next() % 2 ? kChars[next() % (sizeof(kChars) - 1)] : next());
    }
    if (iter % 5 == 0) m.resize(next() % m.size());
    auto r = parse(m);
    if (!r.is_ok()) continue;
    for (const SafetensorsTensor& t : r.value()->tensors()) {
      ASSERT_GE(t.data, m.data());
      ASSERT_LE(t.data + t.nbytes, m.data() + m.size());
    }
  }
}

}  // namespace
}  // namespace ember
