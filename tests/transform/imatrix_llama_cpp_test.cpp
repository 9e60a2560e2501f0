// Cross-tool imatrix compatibility with llama.cpp's own tools
// (tests/data/transform/llama_imatrix.{gguf,dat} and
// llama_quantize_imatrix_hashes.txt, made by
// tools/gen_imatrix_llama_cpp_fixture.sh with llama-imatrix and
// llama-quantize on a tiny gen-model llama): ember reads both of
// llama-imatrix's formats to the same importance, and quantizing the same
// model with that importance gives every block tensor the bytes
// llama-quantize --pure --imatrix wrote (FNV-1a 64 of each tensor) in Q4_K,
// Q2_K and Q4_0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "transform/gen_model.h"
#include "transform/imatrix.h"
#include "transform/quantizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

const std::string kData = EMBER_SOURCE_DIR "/tests/data/transform/";

uint64_t fnv1a64(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
  return h;
}

TEST(ImatrixLlamaCpp, ReadsBothFormatsAndQuantizesToTheSameBytes) {
  auto g = read_imatrix(kData + "llama_imatrix.gguf");
  auto d = read_imatrix(kData + "llama_imatrix.dat");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_FALSE(g->legacy);
  EXPECT_TRUE(d->legacy);
  ASSERT_EQ(g->entries.size(), 14u);  // the 7 matrices of 2 blocks (no output head by default)
  ASSERT_EQ(d->entries.size(), g->entries.size());
  for (const auto& [name, e] : g->entries) {
    SCOPED_TRACE(name);
    auto a = g->importance(name), b = d->importance(name);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->size(), b->size());
    for (size_t j = 0; j < a->size(); ++j) ASSERT_NEAR((*a)[j], (*b)[j], 1e-5 * (1 + std::fabs((*a)[j])));
  }

  // The fixture's model: the shape and seed of the script (and of imatrix_test.cpp).
  const fs::path dir = fs::temp_directory_path() / ("ember_imatrix_llama_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ThreadPool pool(2);
  GenModelShape s = *gen_model_arch_defaults("llama");
  s.n_layer = 2, s.n_embd = 256, s.n_ff = 512, s.n_head = 4, s.n_head_kv = 2, s.n_vocab = 300, s.n_ctx = 256;
  GenModelOptions o;
  o.type = DType::kF32;
  o.seed = 3;
  const std::string path = (dir / "tiny.gguf").string();
  ASSERT_TRUE(write_random_model(s, o, path, pool).is_ok());

  std::map<std::string, std::map<std::string, uint64_t>> want;  // type -> tensor -> hash
  std::ifstream f(kData + "llama_quantize_imatrix_hashes.txt");
  ASSERT_TRUE(f.good());
  for (std::string line; std::getline(f, line);) {
    std::istringstream ls(line);
    std::string type, name, stored, hex;
    ASSERT_TRUE(ls >> type >> name >> stored >> hex) << line;
    want[type][name] = std::stoull(hex, nullptr, 16);
  }
  ASSERT_EQ(want.size(), 3u);
  RtnQuantizer rtn;
  ImatrixQuantizer imq;
  for (const auto& [type, hashes] : want) {
    SCOPED_TRACE(type);
    ConvertOptions opts;
    ASSERT_TRUE(dtype_from_name(type, &opts.type));
    auto src = open_model_file(path);
    ASSERT_TRUE(src.is_ok());
    auto plan = plan_quantization(**src, opts);
    ASSERT_TRUE(plan.is_ok());
    std::map<std::string, std::vector<float>> importance;
    auto n = apply_imatrix(*g, &*plan, &importance);
    ASSERT_TRUE(n.is_ok());
    EXPECT_EQ(*n, 14);
    auto out = execute_quant_plan(
        std::move(src.value()), *plan,
        [&](QuantMethod m) -> Quantizer* { return m == QuantMethod::kRtn ? static_cast<Quantizer*>(&rtn) : &imq; },
        pool, [&](const QuantPlanEntry& e) -> const float* {
          auto it = importance.find(e.name);
          return it == importance.end() ? nullptr : it->second.data();
        });
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    int checked = 0;
    for (const auto& [name, h] : hashes) {
      const TensorView* t = (*out)->tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(fnv1a64(t->data, t->nbytes), h) << name;
      ++checked;
    }
    EXPECT_EQ(checked, 18);  // 7 matrices + 2 norms per block
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ember
