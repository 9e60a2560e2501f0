// GGUF reader/writer tests: round trips of every value and tensor type, a
// file written by gguf-py (tools/gen_format_fixtures.py), the default model,
// and one hand-made corrupt image per validation rule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "format_test_util.h"
#include "model/io/gguf.h"

namespace ember {
namespace {

using test::Bytes;

const char* kDefaultModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
const char* kRefGguf = EMBER_SOURCE_DIR "/tests/data/model/ref_types.gguf";

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                               DType::kQ5_1, DType::kQ8_0, DType::kQ8_1, DType::kQ2_K, DType::kQ3_K,
                               DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kI8,
                               DType::kI16,  DType::kI32,  DType::kI64,  DType::kF64,  DType::kBF16};

using test::int_array;

GgufValue float_array(GgufType et, std::vector<double> v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = et;
  a.count = v.size();
  a.nums = std::move(v);
  return a;
}

GgufValue string_array(std::vector<std::string> v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kString;
  a.count = v.size();
  a.strings = std::move(v);
  return a;
}

GgufValue nested(std::vector<GgufValue> items) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kArray;
  a.count = items.size();
  a.items = std::move(items);
  return a;
}

Result<std::unique_ptr<GgufFile>> parse(const std::vector<uint8_t>& img) {
  return GgufFile::parse(img.data(), img.size(), "mem.gguf");
}

// Parses and expects an error containing `want`; the message must start with the name.
void expect_error(const std::vector<uint8_t>& img, const std::string& want) {
  auto r = parse(img);
  ASSERT_FALSE(r.is_ok()) << "expected an error containing: " << want;
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("mem.gguf: ", 0), 0u) << m;
  EXPECT_NE(m.find(want), std::string::npos) << "message: " << m << "\nwanted: " << want;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// --------------------------------------------------------------------------
// Metadata

TEST(Metadata, SetReplacesAndTypedGetters) {
  Metadata m;
  m.set("a", Metadata::make_int(5, GgufType::kUint32));
  m.set("b", Metadata::make_float(2.5));
  m.set("c", Metadata::make_string("x"));
  m.set("d", Metadata::make_bool(true));
  m.set("e", Metadata::make_int(-1, GgufType::kUint64));  // 2^64 - 1
  m.set("a", Metadata::make_int(7, GgufType::kInt32));
  ASSERT_EQ(m.entries().size(), 5u);
  EXPECT_EQ(m.entries()[0].first, "a");
  EXPECT_EQ(m.get_int("a"), 7);
  EXPECT_EQ(m.find("a")->type, GgufType::kInt32);
  EXPECT_EQ(m.get_float("a"), 7.0);  // ints accepted
  EXPECT_EQ(m.get_float("b"), 2.5);
  EXPECT_FALSE(m.get_int("b").has_value());
  EXPECT_EQ(*m.get_string("c"), "x");
  EXPECT_EQ(m.get_string("a"), nullptr);
  EXPECT_EQ(m.get_bool("d"), true);
  EXPECT_FALSE(m.get_bool("a").has_value());
  EXPECT_FALSE(m.get_int("e").has_value());  // above INT64_MAX
  EXPECT_DOUBLE_EQ(*m.get_float("e"), 18446744073709551615.0);
  EXPECT_EQ(m.find("zz"), nullptr);
  EXPECT_FALSE(m.get_int("zz").has_value());
}

// --------------------------------------------------------------------------
// Round trips

GgufWriter make_all_types_writer(std::vector<std::vector<uint8_t>>* payloads) {
  GgufWriter w;
  w.add("v.u8", Metadata::make_int(250, GgufType::kUint8));
  w.add("v.i8", Metadata::make_int(-120, GgufType::kInt8));
  w.add("v.u16", Metadata::make_int(65000, GgufType::kUint16));
  w.add("v.i16", Metadata::make_int(-32000, GgufType::kInt16));
  w.add_uint32("v.u32", 4000000000u);
  w.add_int32("v.i32", -2000000000);
  w.add_float32("v.f32", 0.1f);
  w.add_bool("v.bool", true);
  w.add("v.bool0", Metadata::make_bool(false));
  w.add_string("v.str", std::string("with\0nul", 8));
  w.add_string("v.empty", "");
  w.add_uint64("v.u64", 0xfedcba9876543210ull);
  w.add("v.i64", Metadata::make_int(std::numeric_limits<int64_t>::min(), GgufType::kInt64));
  w.add("v.f64", Metadata::make_float(1.0 / 3.0, GgufType::kFloat64));
  w.add("a.u8", int_array(GgufType::kUint8, {0, 255}));
  w.add("a.i8", int_array(GgufType::kInt8, {-128, 127}));
  w.add("a.u16", int_array(GgufType::kUint16, {65535}));
  w.add("a.i16", int_array(GgufType::kInt16, {-32768, 1}));
  w.add("a.u32", int_array(GgufType::kUint32, {4294967295ll}));
  w.add_int32_array("a.i32", {-5, 6});
  w.add("a.u64", int_array(GgufType::kUint64, {-1}));
  w.add("a.i64", int_array(GgufType::kInt64, {std::numeric_limits<int64_t>::max()}));
  w.add_float32_array("a.f32", {1.5f, -2.0f});
  w.add("a.f64", float_array(GgufType::kFloat64, {1e-300}));
  w.add("a.bool", int_array(GgufType::kBool, {1, 0, 1}));
  w.add_string_array("a.str", {"x", "", "yz"});
  w.add("a.empty", int_array(GgufType::kInt32, {}));
  w.add("a.nested", nested({int_array(GgufType::kInt32, {1, 2}), int_array(GgufType::kInt32, {})}));
  w.add("a.nested2", nested({nested({string_array({"deep"})})}));
  for (size_t k = 0; k < std::size(kAllTypes); ++k) {
    const DType t = kAllTypes[k];
    const int64_t bs = dtype_block_size(t);
    const std::vector<int64_t> ne = {bs * 2, 3};
    const size_t nbytes = dtype_row_size(t, ne[0]) * 3;
    payloads->push_back(test::pattern_bytes(nbytes, static_cast<int>(k)));
    EXPECT_TRUE(w.add_tensor(std::string("t.") + dtype_name(t), t, ne, payloads->back().data(), nbytes).is_ok());
  }
  return w;
}

void check_all_types(const GgufFile& f, const std::vector<std::vector<uint8_t>>& payloads) {
  const Metadata& m = f.metadata();
  EXPECT_EQ(m.get_int("v.u8"), 250);
  EXPECT_EQ(m.find("v.u8")->type, GgufType::kUint8);
  EXPECT_EQ(m.get_int("v.i8"), -120);
  EXPECT_EQ(m.get_int("v.u16"), 65000);
  EXPECT_EQ(m.get_int("v.i16"), -32000);
  EXPECT_EQ(m.get_int("v.u32"), 4000000000ll);
  EXPECT_EQ(m.find("v.u32")->type, GgufType::kUint32);
  EXPECT_EQ(m.get_int("v.i32"), -2000000000);
  EXPECT_EQ(m.get_float("v.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(m.get_bool("v.bool"), true);
  EXPECT_EQ(m.get_bool("v.bool0"), false);
  EXPECT_EQ(*m.get_string("v.str"), std::string("with\0nul", 8));
  EXPECT_EQ(*m.get_string("v.empty"), "");
  EXPECT_EQ(static_cast<uint64_t>(m.find("v.u64")->i), 0xfedcba9876543210ull);
  EXPECT_EQ(m.get_int("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.get_float("v.f64"), 1.0 / 3.0);
  EXPECT_EQ(m.find("a.u8")->ints, (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(m.find("a.u8")->elem_type, GgufType::kUint8);
  EXPECT_EQ(m.find("a.i8")->ints, (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(m.find("a.u16")->ints, (std::vector<int64_t>{65535}));
  EXPECT_EQ(m.find("a.i16")->ints, (std::vector<int64_t>{-32768, 1}));
  EXPECT_EQ(m.find("a.u32")->ints, (std::vector<int64_t>{4294967295ll}));
  EXPECT_EQ(m.find("a.i32")->ints, (std::vector<int64_t>{-5, 6}));
  EXPECT_EQ(m.find("a.u64")->ints, (std::vector<int64_t>{-1}));
  EXPECT_EQ(m.find("a.i64")->ints, (std::vector<int64_t>{std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(m.find("a.f32")->nums, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(m.find("a.f64")->nums, (std::vector<double>{1e-300}));
  EXPECT_EQ(m.find("a.bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(m.find("a.bool")->elem_type, GgufType::kBool);
  EXPECT_EQ(m.find("a.str")->strings, (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(m.find("a.str")->count, 3u);
  EXPECT_EQ(m.find("a.empty")->count, 0u);
  EXPECT_EQ(m.find("a.empty")->elem_type, GgufType::kInt32);
  const GgufValue* n = m.find("a.nested");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->items.size(), 2u);
  EXPECT_EQ(n->items[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n->items[1].count, 0u);
  const GgufValue* n2 = m.find("a.nested2");
  ASSERT_TRUE(n2 && n2->items.size() == 1 && n2->items[0].items.size() == 1);
  EXPECT_EQ(n2->items[0].items[0].strings, (std::vector<std::string>{"deep"}));

  ASSERT_EQ(f.tensors().size(), std::size(kAllTypes));
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  for (size_t k = 0; k < std::size(kAllTypes); ++k) {
    const GgufTensorInfo& ti = f.tensors()[k];
    const DType t = kAllTypes[k];
    EXPECT_EQ(ti.view.name, std::string("t.") + dtype_name(t));
    EXPECT_EQ(f.find_tensor(ti.view.name), &ti);
    EXPECT_EQ(ti.view.type, t);
    EXPECT_EQ(ti.view.n_dims, 2);
    EXPECT_EQ(ti.view.ne[0], dtype_block_size(t) * 2);
    EXPECT_EQ(ti.view.ne[1], 3);
    EXPECT_EQ(ti.offset % f.alignment(), 0u);
    ASSERT_EQ(ti.view.nbytes, payloads[k].size());
    EXPECT_EQ(std::memcmp(ti.view.data, payloads[k].data(), ti.view.nbytes), 0) << ti.view.name;
    EXPECT_EQ(static_cast<const uint8_t*>(ti.view.data), f.data() + f.data_offset() + ti.offset);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(Gguf, RoundTripEveryValueAndTensorType) {
  std::vector<std::vector<uint8_t>> payloads;
  payloads.reserve(64);
  GgufWriter w = make_all_types_writer(&payloads);
  std::vector<uint8_t> img = w.serialize();
  ASSERT_FALSE(img.empty());
  auto f = parse(img);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f.value()->version(), 3u);
  EXPECT_EQ(f.value()->alignment(), 32u);
  EXPECT_EQ(f.value()->metadata().find("general.alignment"), nullptr);  // default not written
  check_all_types(*f.value(), payloads);
}

TEST(Gguf, RoundTripCustomAlignmentThroughFile) {
  std::vector<std::vector<uint8_t>> payloads;
  payloads.reserve(64);
  GgufWriter w = make_all_types_writer(&payloads);
  w.set_alignment(256);
  test::TempDir dir("gguf");
  const std::string path = (dir.path() / "x.gguf").string();
  ASSERT_TRUE(w.write(path).is_ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f.value()->alignment(), 256u);
  EXPECT_EQ(f.value()->metadata().get_int("general.alignment"), 256);
  EXPECT_EQ(f.value()->path(), path);
  check_all_types(*f.value(), payloads);
  // The file and the in-memory image are identical.
  const std::string bytes = test::read_file(path);
  std::vector<uint8_t> img = w.serialize();
  ASSERT_EQ(bytes.size(), img.size());
  EXPECT_EQ(std::memcmp(bytes.data(), img.data(), img.size()), 0);
}

TEST(Gguf, TensorRefIsNotCopied) {
  std::vector<float> data(64, 1.0f);
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor_ref("w", DType::kF32, {64}, data.data(), data.size() * 4).is_ok());
  data[5] = 42.0f;  // changed after add: the written file must see it
  auto img = w.serialize();
  auto f = parse(img);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const float* p = static_cast<const float*>(f.value()->tensors()[0].view.data);
  EXPECT_EQ(p[5], 42.0f);
  EXPECT_EQ(p[4], 1.0f);
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  std::vector<uint8_t> buf(4096);
  EXPECT_FALSE(w.add_tensor("a", DType::kQ4_K, {100}, buf.data(), 100).is_ok());  // not a block multiple
  EXPECT_FALSE(w.add_tensor("a", DType::kF32, {4}, buf.data(), 15).is_ok());      // wrong size
  EXPECT_FALSE(w.add_tensor("a", DType::kF32, {}, buf.data(), 4).is_ok());
  EXPECT_FALSE(w.add_tensor("a", DType::kF32, {1, 1, 1, 1, 1}, buf.data(), 4).is_ok());
  EXPECT_FALSE(w.add_tensor("a", DType::kF32, {0}, buf.data(), 0).is_ok());
  EXPECT_FALSE(w.add_tensor("", DType::kF32, {1}, buf.data(), 4).is_ok());
  EXPECT_FALSE(w.add_tensor("a", static_cast<DType>(99), {1}, buf.data(), 4).is_ok());
  EXPECT_TRUE(w.add_tensor("a", DType::kF32, {4}, buf.data(), 16).is_ok());
  Status dup = w.add_tensor("a", DType::kF32, {4}, buf.data(), 16);
  EXPECT_FALSE(dup.is_ok());
  EXPECT_NE(dup.message().find("'a'"), std::string::npos);
  w.set_alignment(48);
  EXPECT_TRUE(w.serialize().empty());
  test::TempDir dir("gguf");
  Status st = w.write((dir.path() / "bad.gguf").string());
  EXPECT_FALSE(st.is_ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "bad.gguf"));
  EXPECT_FALSE(w.write((dir.path() / "no_such_dir" / "x.gguf").string()).is_ok());
}

TEST(Gguf, AddReplacesExistingKey) {
  GgufWriter w;
  w.add_uint32("k", 1);
  w.add_uint32("k", 2);
  auto f = parse(w.serialize());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f.value()->metadata().entries().size(), 1u);
  EXPECT_EQ(f.value()->metadata().get_int("k"), 2);
}

// --------------------------------------------------------------------------
// A file written by gguf-py

TEST(Gguf, ReadsFileWrittenByGgufPy) {
  auto r = GgufFile::open(kRefGguf);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const GgufFile& f = *r.value();
  const Metadata& m = f.metadata();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(*m.get_string("general.architecture"), "llama");
  EXPECT_EQ(m.get_int("t.u8"), 200);
  EXPECT_EQ(m.get_int("t.i8"), -100);
  EXPECT_EQ(m.get_int("t.u16"), 60000);
  EXPECT_EQ(m.get_int("t.i16"), -30000);
  EXPECT_EQ(m.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(m.get_int("t.i32"), -2000000000);
  EXPECT_EQ(m.get_float("t.f32"), 1.5);
  EXPECT_EQ(m.get_bool("t.bool"), true);
  EXPECT_EQ(*m.get_string("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(static_cast<uint64_t>(m.find("t.u64")->i), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(m.get_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(m.get_float("t.f64"), 2.718281828459045);
  EXPECT_EQ(m.find("t.arr_u8")->ints, (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(m.find("t.arr_u8")->elem_type, GgufType::kUint8);
  EXPECT_EQ(m.find("t.arr_i16")->ints, (std::vector<int64_t>{-5, 7}));
  EXPECT_EQ(m.find("t.arr_i32")->ints, (std::vector<int64_t>{-1, 0, 1, 2147483647}));
  EXPECT_EQ(m.find("t.arr_u64")->ints, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(m.find("t.arr_f32")->nums, (std::vector<double>{0.5, -0.25}));
  EXPECT_EQ(m.find("t.arr_f64")->nums, (std::vector<double>{1e300, -2.5}));
  EXPECT_EQ(m.find("t.arr_bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(m.find("t.arr_str")->strings, (std::vector<std::string>{"a", "", "\xc3\xbcnicode"}));
  const GgufValue* nested = m.find("t.arr_nested");
  ASSERT_TRUE(nested && nested->items.size() == 3);
  EXPECT_EQ(nested->items[2].ints, (std::vector<int64_t>{4, 5, 6}));
  const GgufValue* ns = m.find("t.arr_nested_str");
  ASSERT_TRUE(ns && ns->items.size() == 2);
  EXPECT_EQ(ns->items[0].strings, (std::vector<std::string>{"x", "y"}));

  ASSERT_EQ(f.tensors().size(), 5u);
  const TensorView& t0 = f.find_tensor("f32_tensor")->view;
  EXPECT_EQ(t0.type, DType::kF32);
  EXPECT_EQ(t0.shape_string(), "[3, 4]");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(static_cast<const float*>(t0.data)[i], i * 0.25f - 1.0f);
  const TensorView& t1 = f.find_tensor("f16_tensor")->view;
  EXPECT_EQ(t1.type, DType::kF16);
  EXPECT_EQ(t1.shape_string(), "[32, 2]");
  EXPECT_EQ(t1.nbytes, 128u);
  const TensorView& t2 = f.find_tensor("q8_tensor")->view;
  EXPECT_EQ(t2.type, DType::kQ8_0);
  EXPECT_EQ(t2.shape_string(), "[64, 2]");
  ASSERT_EQ(t2.nbytes, 136u);
  EXPECT_EQ(std::memcmp(t2.data, test::pattern_bytes(136, 1).data(), 136), 0);
  const TensorView& t3 = f.find_tensor("q4k_tensor")->view;
  EXPECT_EQ(t3.type, DType::kQ4_K);
  EXPECT_EQ(t3.shape_string(), "[256, 3]");
  ASSERT_EQ(t3.nbytes, 432u);
  EXPECT_EQ(std::memcmp(t3.data, test::pattern_bytes(432, 2).data(), 432), 0);
  const TensorView& t4 = f.find_tensor("i32_tensor")->view;
  EXPECT_EQ(t4.type, DType::kI32);
  EXPECT_EQ(static_cast<const int32_t*>(t4.data)[0], -2);
  EXPECT_EQ(static_cast<const int32_t*>(t4.data)[4], 2);
  for (const GgufTensorInfo& ti : f.tensors()) {
    EXPECT_EQ(ti.offset % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ti.view.data) % 64, 0u);  // mmap is page aligned
  }
}

// --------------------------------------------------------------------------
// The default model

TEST(Gguf, DefaultModel) {
  if (!std::filesystem::exists(kDefaultModel)) GTEST_SKIP() << "no " << kDefaultModel;
  auto r = GgufFile::open(kDefaultModel);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const GgufFile& f = *r.value();
  const Metadata& m = f.metadata();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), 6525120u);
  EXPECT_EQ(*m.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(m.get_int("gemma3.block_count"), 18);
  EXPECT_EQ(m.get_int("gemma3.embedding_length"), 640);
  EXPECT_EQ(m.get_int("gemma3.context_length"), 32768);
  EXPECT_EQ(m.get_int("gemma3.feed_forward_length"), 2048);
  EXPECT_EQ(m.get_int("gemma3.attention.head_count"), 4);
  EXPECT_EQ(m.get_int("gemma3.attention.head_count_kv"), 1);
  EXPECT_EQ(m.get_int("gemma3.attention.key_length"), 256);
  EXPECT_EQ(m.get_int("gemma3.attention.sliding_window"), 512);
  EXPECT_EQ(m.get_float("gemma3.rope.freq_base"), 1000000.0);
  EXPECT_NEAR(*m.get_float("gemma3.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
  EXPECT_EQ(*m.get_string("tokenizer.ggml.model"), "llama");
  const GgufValue* tokens = m.find("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  EXPECT_EQ(tokens->count, 262144u);
  EXPECT_EQ(tokens->strings.size(), 262144u);
  EXPECT_EQ(m.find("tokenizer.ggml.scores")->nums.size(), 262144u);
  EXPECT_EQ(m.get_int("tokenizer.ggml.bos_token_id"), 2);
  EXPECT_EQ(m.get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(f.tensors().size(), 236u);
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(emb->view.type, DType::kQ8_0);
  EXPECT_EQ(emb->view.shape_string(), "[640, 262144]");
  EXPECT_EQ(emb->view.nbytes, 262144u * 20 * 34);
  EXPECT_EQ(emb->offset + f.data_offset(), 6527680u);
  const GgufTensorInfo* q = f.find_tensor("blk.0.attn_output.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->view.type, DType::kQ4_K);
  EXPECT_EQ(q->view.shape_string(), "[1024, 640]");
}

// --------------------------------------------------------------------------
// Corrupt images: one per rule

// A valid image with one f32 tensor "w" [4] and a u32 key; the fields below
// are patched by the tests.
std::vector<uint8_t> valid_image() {
  Bytes b;
  b.header(3, 1, 1).str("k").u32(4).u32(7);
  b.tensor_info("w", {4}, 0, 0);
  b.pad_to(32);
  for (int i = 0; i < 4; ++i) b.f32(static_cast<float>(i));
  return b.b;
}

TEST(GgufErrors, ValidBaseImageParses) {
  const std::vector<uint8_t> img = valid_image();  // must outlive the views
  auto r = parse(img);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(static_cast<const float*>(r.value()->tensors()[0].view.data)[3], 3.0f);
}

TEST(GgufErrors, Header) {
  expect_error({}, "not a GGUF file (only 0 bytes)");
  expect_error({'G', 'G', 'U', 'X', 3, 0, 0, 0}, "bad magic");
  expect_error(Bytes().header(1, 0, 0).b, "GGUF version 1 is not supported");
  expect_error(Bytes().header(4, 0, 0).b, "unsupported GGUF version 4");
  expect_error(Bytes().header(0x03000000, 0, 0).b, "big-endian");
  std::vector<uint8_t> img = Bytes().header(3, 0, 0).b;
  img.resize(12);
  expect_error(img, "header: truncated tensor count at offset 8");
  expect_error(Bytes().header(3, 0, 1'000'000'000'000ull).b, "metadata count 1000000000000 is impossible");
  expect_error(Bytes().header(3, 1ull << 60, 0).b, "tensor count 1152921504606846976 is impossible");
  // v2 parses like v3.
  Bytes v2;
  v2.header(2, 0, 1).str("a").u32(8).str("b");
  auto r = parse(v2.b);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value()->version(), 2u);
  EXPECT_EQ(r.value()->data_offset(), v2.b.size());  // no tensors, no padding: clamped to the size
}

TEST(GgufErrors, Metadata) {
  expect_error(Bytes().header(3, 0, 1).u64(1ull << 40).zeros(16).b,
               "metadata entry 0: key length 1099511627776 at offset 24 exceeds the 16 bytes left");
  expect_error(Bytes().header(3, 0, 1).str("").u32(4).u32(0).b, "metadata entry 0: empty key");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(13).zeros(8).b, "metadata key 'k': invalid value type 13");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(8).u64(1000).zeros(8).b,
               "metadata key 'k': string length 1000 at offset 37 exceeds the 8 bytes left");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(4).u8(1).b, "metadata key 'k': truncated value at offset 37");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(9).u32(4).u64(1ull << 61).zeros(8).b,
               "metadata key 'k': array of 2305843009213693952 uint32 elements");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(9).u32(77).u64(1).zeros(8).b,
               "metadata key 'k': invalid array element type 77");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(9).u32(8).u64(2).str("a").u64(99).b,
               "metadata key 'k': element 1: string length 99");
  Bytes deep;
  deep.header(3, 0, 1).str("k").u32(9);
  for (int i = 0; i < 20; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  expect_error(deep.b, "arrays nested deeper than 8 levels");
  expect_error(Bytes().header(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2).b, "duplicate metadata key 'k'");
  expect_error(Bytes().header(3, 0, 1).str("general.alignment").u32(4).u32(48).b,
               "'general.alignment': must be a power of two");
  expect_error(Bytes().header(3, 0, 1).str("general.alignment").u32(8).str("32").b,
               "'general.alignment': must be a power of two");
  expect_error(Bytes().header(3, 0, 1).str("general.alignment").u32(4).u32(0).b,
               "'general.alignment': must be a power of two");
}

TEST(GgufErrors, TensorInfo) {
  auto img = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    Bytes b;
    b.header(3, 1, 0).tensor_info(name, ne, type, off).pad_to(32).zeros(4096);
    return b.b;
  };
  expect_error(img("", {4}, 0, 0), "tensor info 0: empty name");
  expect_error(img("w", {}, 0, 0), "tensor 'w': n_dims 0 is out of range (1..4)");
  expect_error(img("w", {1, 1, 1, 1, 1}, 0, 0), "tensor 'w': n_dims 5 is out of range (1..4)");
  expect_error(img("w", {4, 0}, 0, 0), "tensor 'w': dimension ne[1] = 0 is out of range");
  expect_error(img("w", {1ull << 63}, 0, 0), "tensor 'w': dimension ne[0] = 9223372036854775808 is out of range");
  expect_error(img("w", {1ull << 40, 1ull << 40}, 0, 0), "tensor 'w': element count overflows (ne[1]");
  expect_error(img("w", {4}, 5, 0), "tensor 'w': unknown or unsupported tensor type id 5");
  expect_error(img("w", {4}, 1000, 0), "tensor 'w': unknown or unsupported tensor type id 1000");
  expect_error(img("w", {100}, 12, 0), "tensor 'w': ne[0] = 100 is not a multiple of the q4_K block size 256");
  expect_error(img("w", {4}, 0, 16), "tensor 'w': data offset 16 is not a multiple of the alignment 32");
  expect_error(img("w", {1ull << 61, 2}, 0, 0), "tensor 'w': byte size overflows");
  expect_error(img("w", {4096}, 0, 0), "tensor 'w': data [offset 64, size 16384] extends past end of file (size 4160)");
  expect_error(img("w", {4}, 0, 1ull << 63),
               "tensor 'w': data [offset 9223372036854775872, size 16] extends past end of file (size 4160)");
  expect_error(img("w", {4}, 0, ~uint64_t{31}),
               "tensor 'w': data offset 18446744073709551584 extends past end of file (size 4160)");
  std::vector<uint8_t> t = img("w", {4}, 0, 0);
  t.resize(56);
  expect_error(t, "tensor 'w': truncated data offset at offset 49 (needs 8 bytes, 7 left)");
  Bytes dup;
  dup.header(3, 2, 0).tensor_info("w", {4}, 0, 0).tensor_info("w", {4}, 0, 32).pad_to(32).zeros(64);
  expect_error(dup.b, "duplicate tensor name 'w'");
  Bytes overlap;
  overlap.header(3, 2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {4}, 0, 32).pad_to(32).zeros(128);
  expect_error(overlap.b, "tensors 'a' [offset 96, size 64] and 'b' [offset 128] overlap");
  expect_error(Bytes().header(3, 1, 0).u64(70000).zeros(70000).b, "name length 70000 at offset 24 exceeds the limit");
}

TEST(GgufErrors, ErrorsNameTheFile) {
  test::TempDir dir("gguf");
  std::vector<uint8_t> img = valid_image();
  img.resize(img.size() - 1);  // last float truncated
  const std::string path = (dir.path() / "trunc.gguf").string();
  test::write_file(path, img);
  auto r = GgufFile::open(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            path + ": tensor 'w': data [offset 96, size 16] extends past end of file (size 111)");
  auto missing = GgufFile::open((dir.path() / "missing.gguf").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("missing.gguf: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace ember
