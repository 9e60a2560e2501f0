// Byte identity of `ember quantize` and `ember gen-model` output: the GGUF
// images that convert_model (serialized as cmd_quantize writes them) and
// write_random_model produce for tiny models of every architecture, Hugging
// Face fixtures (Q/K permutation, Gemma norms) and the default model, in
// every target type and with the per-tensor overrides, hashed (FNV-1a 64)
// and compared with tests/data/transform/convert_golden.json. The hashes were
// recorded from main@3d87a69, before the per-tensor quantization plan
// replaced name matching, so the plan is proven to change no byte.
// EMBER_UPDATE_GOLDEN=1 rewrites the fixture (only after a deliberate change
// of the output format).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/io/gguf.h"
#include "transform/convert.h"
#include "transform/gen_model.h"

namespace ember {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixture = EMBER_SOURCE_DIR "/tests/data/transform/convert_golden.json";
const std::string kModelData = EMBER_SOURCE_DIR "/tests/data/model/";
const std::string kDefaultModel = EMBER_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";

uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }

std::string file_hash(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  uint64_t h = 1469598103934665603ull;
  size_t total = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const size_t n = static_cast<size_t>(f.gcount());
    h = fnv1a(reinterpret_cast<const uint8_t*>(buf.data()), n, h);
    total += n;
  }
  return fmt::format("{} {}", hex(h), total);
}

// The file cmd_quantize writes for `src` converted with `o` (hash and size),
// or the error message.
std::string convert_hash(std::unique_ptr<ModelFile> src, const ConvertOptions& o, ThreadPool& pool,
                         const fs::path& dir) {
  auto conv = convert_model(std::move(src), o, pool);
  if (!conv) return "error: " + conv.status().message();
  GgufWriter w;
  for (const auto& [k, v] : (*conv)->metadata.entries())
    if (k.rfind("ember.hf.", 0) != 0) w.add(k, v);
  for (const auto& [name, t] : (*conv)->tensors) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    Status st = w.add_tensor_ref(name, t.type, ne, t.data, t.nbytes);
    if (!st) return "error: " + st.message();
  }
  const std::string path = (dir / "converted.gguf").string();
  if (Status st = w.write(path); !st) return "error: " + st.message();
  std::string h = file_hash(path);
  fs::remove(path);
  return h;
}

GenModelShape tiny_shape(const std::string& arch, int n_embd) {
  auto s = gen_model_arch_defaults(arch);
  EXPECT_TRUE(s.is_ok()) << arch;
  GenModelShape t = *s;
  t.n_layer = 2;
  t.n_embd = n_embd;
  t.n_ff = n_embd == 64 ? 96 : 512;
  t.n_head = 4;
  t.n_head_kv = 2;
  t.head_dim = arch == "gemma3" || arch == "qwen3" ? n_embd / 2 : 0;
  t.n_vocab = 300;
  t.n_ctx = 256;
  if (arch == "llama") t.rope_scale_factor = 8;
  if (arch == "gemma3") t.sliding_window = 8;
  return t;
}

class ConvertGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_convert_golden_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    update_ = std::getenv("EMBER_UPDATE_GOLDEN") != nullptr;
    if (fs::exists(kFixture)) {
      std::ifstream f(kFixture);
      fixture_ = json::parse(f);
    } else {
      ASSERT_TRUE(update_) << "missing fixture " << kFixture;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  void check(const std::string& section, const std::string& key, const std::string& got) {
    if (update_) {
      fixture_[section][key] = got;
      return;
    }
    ASSERT_TRUE(fixture_.contains(section) && fixture_[section].contains(key)) << section << "/" << key
                                                                               << " not in the fixture";
    EXPECT_EQ(got, fixture_[section][key].get<std::string>()) << section << "/" << key;
    ++checked_;
  }

  void save() {
    if (!update_) return;
    fs::create_directories(fs::path(kFixture).parent_path());
    std::ofstream f(kFixture);
    f << fixture_.dump(1) << "\n";
  }

  std::string gen(const GenModelShape& s, DType type, uint64_t seed, const std::string& name) {
    GenModelOptions o;
    o.type = type;
    o.seed = seed;
    const std::string p = (dir_ / name).string();
    auto st = write_random_model(s, o, p, pool_);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    return p;
  }

  std::unique_ptr<ModelFile> open(const std::string& path) {
    auto f = open_model_file(path);
    EXPECT_TRUE(f.is_ok()) << path << ": " << f.status().message();
    return f.is_ok() ? std::move(f.value()) : nullptr;
  }

  ThreadPool pool_{2};
  fs::path dir_;
  json fixture_ = json::object();
  bool update_ = false;
  int checked_ = 0;
};

const DType kAllTargets[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                             DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                             DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

TEST_F(ConvertGolden, GenModelFiles) {
  for (const std::string arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
    for (int n_embd : {64, 256}) {
      for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ2_K}) {
        const std::string key = fmt::format("{}_{}_{}", arch, n_embd, dtype_name(t));
        SCOPED_TRACE(key);
        const std::string p = gen(tiny_shape(arch, n_embd), t, 11, key + ".gguf");
        check("gen_model", key, file_hash(p));
      }
    }
  }
  GenModelShape moe = tiny_shape("llama", 64);
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  check("gen_model", "llama_moe_q8_0", file_hash(gen(moe, DType::kQ8_0, 3, "moe.gguf")));
  GenModelShape tied = tiny_shape("llama", 64);
  tied.tied_embeddings = true;
  check("gen_model", "llama_tied_q4_0", file_hash(gen(tied, DType::kQ4_0, 5, "tied.gguf")));
  save();
  if (!update_) {
    EXPECT_GT(checked_, 40);
  }
}

TEST_F(ConvertGolden, QuantizeGenModelFiles) {
  for (const std::string arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
    for (int n_embd : {64, 256}) {
      for (DType src_type : {DType::kF32, DType::kQ8_0}) {
        if (src_type == DType::kQ8_0 && n_embd == 64) continue;
        const std::string src = gen(tiny_shape(arch, n_embd), src_type, 21,
                                    fmt::format("{}_{}_{}.gguf", arch, n_embd, dtype_name(src_type)));
        for (DType t : kAllTargets) {
          const std::string key = fmt::format("{}_{}_{}_to_{}", arch, n_embd, dtype_name(src_type), dtype_name(t));
          SCOPED_TRACE(key);
          ConvertOptions o;
          o.type = t;
          check("quantize", key, convert_hash(open(src), o, pool_, dir_));
        }
        ConvertOptions o;
        o.type = DType::kQ4_0;
        o.output_type = DType::kQ8_0;
        o.token_embd_type = DType::kQ6_K;
        const std::string base = fmt::format("{}_{}_{}", arch, n_embd, dtype_name(src_type));
        check("quantize", base + "_q4_0_out_q8_0_embd_q6_K", convert_hash(open(src), o, pool_, dir_));
        o.type = DType::kQ4_K;
        o.output_type.reset();
        o.token_embd_type = DType::kQ8_0;
        check("quantize", base + "_q4_K_embd_q8_0", convert_hash(open(src), o, pool_, dir_));
        o.allow_fallback = false;
        check("quantize", base + "_q4_K_no_fallback", convert_hash(open(src), o, pool_, dir_));
      }
    }
  }
  GenModelShape untied = tiny_shape("llama", 256);
  untied.tied_embeddings = false;
  GenModelShape tied = untied;
  tied.tied_embeddings = true;
  for (const auto& [name, s] : {std::pair{"untied", untied}, std::pair{"tied", tied}}) {
    const std::string src = gen(s, DType::kF16, 9, std::string(name) + ".gguf");
    ConvertOptions o;
    o.type = DType::kQ5_K;
    o.output_type = DType::kQ6_K;
    o.token_embd_type = DType::kQ4_0;
    check("quantize", fmt::format("llama_{}_q5_K_out_q6_K_embd_q4_0", name), convert_hash(open(src), o, pool_, dir_));
  }
  save();
  if (!update_) {
    EXPECT_GT(checked_, 150);
  }
}

TEST_F(ConvertGolden, QuantizeHuggingFaceFixtures) {
  for (const std::string folder : {"hf_llama_sharded", "hf_qwen2", "hf_qwen3", "hf_gemma3"}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
      const std::string key = fmt::format("{}_to_{}", folder, dtype_name(t));
      SCOPED_TRACE(key);
      ConvertOptions o;
      o.type = t;
      check("quantize_hf", key, convert_hash(open(kModelData + folder), o, pool_, dir_));
    }
    ConvertOptions o;
    o.type = DType::kQ5_0;
    o.output_type = DType::kQ8_0;
    check("quantize_hf", folder + "_q5_0_out_q8_0", convert_hash(open(kModelData + folder), o, pool_, dir_));
  }
  save();
  if (!update_) {
    EXPECT_EQ(checked_, 32);
  }
}

TEST_F(ConvertGolden, QuantizeDefaultModel) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "default model not installed";
  ConvertOptions o;
  o.type = DType::kQ4_K;  // rows of 640: k-quant fallbacks
  check("quantize_default", "q4_K", convert_hash(open(kDefaultModel), o, pool_, dir_));
  o.type = DType::kQ6_K;
  o.token_embd_type = DType::kQ8_0;
  check("quantize_default", "q6_K_embd_q8_0", convert_hash(open(kDefaultModel), o, pool_, dir_));
  save();
}

}  // namespace
}  // namespace ember
