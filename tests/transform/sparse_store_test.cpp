// transform/sparse_store.h: the block matrices of a dense Q8_0 / Q4_0 model
// whose weights are exactly 2:4 (random weights, llama layout) stored in the
// sparse formats, as `--detect-sparsity` does at load (lenient, here at most 80%
// of the dense bytes) and `ember prune --format sparse` does in the file
// (strict): every block linear becomes sq8_c32 / sq4_c32 (capacity 32 of 64:
// the mask is the 2-bit positions), the head stays dense; the logits (a
// prompt through the tile, then decode steps) are close to the dense
// model's (the same weights summed in another order). An unpruned model is
// left alone by the lenient form; a Q4_K model is skipped by the lenient
// form and an error naming the type in the strict one. A sparse file's
// matrices move at load (Model::interleave_weights) out of the file mapping
// into 2 MiB-aligned buffers (kernels/cpu/cpu_backend.cpp, huge pages),
// bytes and logits unchanged; matrices made sparse at load stay where they
// are, and their dense pages in the mapped file leave the resident set.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "core/page_present.h"
#include "model/io/gguf.h"
#include "model/io/model_file.h"
#include "model/model.h"
#include "model/prompt_steps_logits.h"
#include "quant/blocks.h"
#include "quant/sparse.h"
#include "transform/gen_model.h"
#include "transform/quant_plan.h"
#include "transform/sparse_store.h"

namespace ember {
namespace {

class SparseStore : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ember_sparse_store_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(DType type) {
    GenModelShape s;
    s.arch = "llama";
    s.n_layer = 2;
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_vocab = 400;
    GenModelOptions o;
    o.type = type;
    o.seed = 5;
    o.weight_std = 0.05f;
    const std::string p = (dir_ / (std::string(dtype_name(type)) + ".gguf")).string();
    auto st = write_random_model(s, o, p, pool_);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    return p;
  }

  // The file at `path` with inputs 4k + 1 and 4k + 2 of every block linear
  // set to zero (Q8_0: the value 0; Q4_0: the level 8): exactly 2:4.
  std::unique_ptr<ModelFile> pruned_2_4(const std::string& path) {
    auto f = open_model_file(path);
    EXPECT_TRUE(f.is_ok());
    std::unique_ptr<ModelFile> file = std::move(f.value());
    static const std::regex re(R"(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight)");
    std::vector<std::string> names;
    for (const auto& [name, t] : file->tensors)
      if (std::regex_match(name, re)) names.push_back(name);
    EXPECT_EQ(names.size(), 14u);
    for (const std::string& name : names) {
      const TensorView t = *file->tensor(name);
      auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[t.nbytes]);
      std::memcpy(buf.get(), t.data, t.nbytes);
      const int64_t blocks = static_cast<int64_t>(t.nelements() / 32);
      for (int64_t b = 0; b < blocks; ++b)
        for (int j = 0; j < 32; ++j) {
          if (j % 4 != 1 && j % 4 != 2) continue;
          if (t.type == DType::kQ8_0) {
            reinterpret_cast<BlockQ8_0*>(buf.get())[b].qs[j] = 0;
          } else {
            uint8_t& q = reinterpret_cast<BlockQ4_0*>(buf.get())[b].qs[j % 16];
            q = j < 16 ? static_cast<uint8_t>((q & 0xF0) | 8) : static_cast<uint8_t>((q & 0x0F) | 0x80);
          }
        }
      replace_tensor(file.get(), name, t.type, std::move(buf), t.nbytes);
    }
    return file;
  }

  std::vector<float> run(const Model& m) { return prompt_steps_logits(m, pool_); }

  // `file` written as dir_/name; its path, or "" (and a test failure).
  std::string save(const ModelFile& file, const std::string& name) {
    GgufWriter w;
    w.add_metadata(file.metadata);
    for (const auto& [tname, t] : file.tensors) {
      const Status st = w.add_tensor_ref(tname, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
      EXPECT_TRUE(st.is_ok()) << st.message();
      if (!st.is_ok()) return "";
    }
    const std::string path = (dir_ / name).string();
    const Status st = w.write(path);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return st.is_ok() ? path : "";
  }

  std::filesystem::path dir_;
  ThreadPool pool_{2};
};

TEST_F(SparseStore, Exact2_4IsStoredSparse) {
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(type));
    const std::string path = write(type);
    const DType want = type == DType::kQ4_0 ? dtype_sq4(32) : dtype_sq8(32);
    auto dense = Model::from_file(pruned_2_4(path));
    ASSERT_TRUE(dense.is_ok());
    std::unique_ptr<ModelFile> detected_file = pruned_2_4(path);
    SparseStoreOptions lenient;
    lenient.max_ratio = 0.8;
    lenient.strict = false;
    auto r = store_block_matrices_sparse(detected_file.get(), pool_, lenient);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->candidates, 14);
    EXPECT_EQ(r->matrices + r->matrices4, 14);
    EXPECT_EQ(type == DType::kQ4_0 ? r->matrices4 : r->matrices, 14);
    EXPECT_LT(r->sparse_bytes, r->dense_bytes);
    auto detected = Model::from_file(std::move(detected_file));
    ASSERT_TRUE(detected.is_ok());
    EXPECT_EQ((*detected)->weights().layers[1].down.weight->type, want);
    EXPECT_EQ((*detected)->weights().output.weight->type, type);  // the head is no block matrix
    const std::vector<float> a = run(**dense), b = run(**detected);
    ASSERT_EQ(a.size(), b.size());
    float amax = 0, dmax = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      amax = std::max(amax, std::fabs(a[i]));
      dmax = std::max(dmax, std::fabs(a[i] - b[i]));
    }
    EXPECT_GT(amax, 0.f);
    EXPECT_LT(dmax, 1e-3f * amax) << "the sparse model's logits drift from the dense one's";
  }
}

TEST_F(SparseStore, UnprunedModelIsLeftAloneAndOtherTypesAreStrictErrors) {
  auto file = open_model_file(write(DType::kQ8_0));
  ASSERT_TRUE(file.is_ok());
  SparseStoreOptions lenient;
  lenient.max_ratio = 0.8;
  lenient.strict = false;
  auto r = store_block_matrices_sparse(file.value().get(), pool_, lenient);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->candidates, 14);
  EXPECT_EQ(r->matrices + r->matrices4, 0);
  EXPECT_EQ(r->kept_dense, 14);
  EXPECT_EQ(file.value()->tensor("blk.0.attn_q.weight")->type, DType::kQ8_0);
  auto k = open_model_file(write(DType::kQ4_K));
  ASSERT_TRUE(k.is_ok());
  auto lk = store_block_matrices_sparse(k.value().get(), pool_, lenient);
  ASSERT_TRUE(lk.is_ok());
  EXPECT_EQ(lk->candidates, 0);
  auto sk = store_block_matrices_sparse(k.value().get(), pool_);
  ASSERT_FALSE(sk.is_ok());
  EXPECT_NE(sk.status().message().find("q4_K"), std::string::npos) << sk.status().message();
}

TEST_F(SparseStore, DetectedMatricesLeaveTheirDensePagesOutOfTheResidentSet) {
  // An exactly 2:4 dense Q8_0 file, mapped as `--detect-sparsity` finds it.
  const std::string path = save(*pruned_2_4(write(DType::kQ8_0)), "dense_2_4.gguf");
  ASSERT_FALSE(path.empty());
  auto file = open_model_file(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const TensorView dense_down = *file.value()->tensor("blk.1.ffn_down.weight");
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uint8_t* mid = static_cast<const uint8_t*>(dense_down.data) + dense_down.nbytes / 2 / page * page;
  SparseStoreOptions lenient;
  lenient.max_ratio = 0.8;
  lenient.strict = false;
  auto r = store_block_matrices_sparse(file.value().get(), pool_, lenient);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->matrices, 14);
  // Every matrix but its partial first and last pages.
  EXPECT_GE(r->released_bytes + 2 * 14 * page, r->dense_bytes);
  EXPECT_LE(r->released_bytes, r->dense_bytes);
  EXPECT_FALSE(page_present(mid)) << "a replaced dense matrix is still resident";
  // The head (no block matrix) was not replaced: the model runs as before.
  auto m = Model::from_file(std::move(file.value()));
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ((*m)->weights().layers[1].down.weight->type, dtype_sq8(32));
  EXPECT_FALSE(run(**m).empty());
}

TEST_F(SparseStore, SparseFileMatricesMoveIntoHugePagesAtLoad) {
  // An exactly 2:4 Q8_0 model stored sparse (strict), written as a file.
  std::unique_ptr<ModelFile> file = pruned_2_4(write(DType::kQ8_0));
  ASSERT_TRUE(store_block_matrices_sparse(file.get(), pool_, SparseStoreOptions{}).is_ok());
  const std::string path = save(*file, "sq8.gguf");
  ASSERT_FALSE(path.empty());

  auto m = Model::load(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const TensorView* down = (*m)->weights().layers[1].down.weight;
  ASSERT_EQ(down->type, dtype_sq8(32));
  const void* mapped = down->data;
  const auto* mapped_bytes = static_cast<const uint8_t*>(mapped);
  const std::vector<uint8_t> bytes(mapped_bytes, mapped_bytes + down->nbytes);
  const std::vector<float> before = run(**m);
  (*m)->interleave_weights(2);
  EXPECT_NE(down->data, mapped);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(down->data) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(down->type, dtype_sq8(32));
  EXPECT_EQ(std::memcmp(down->data, bytes.data(), bytes.size()), 0);
  const std::vector<float> after = run(**m);
  ASSERT_EQ(before.size(), after.size());
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);

  // Made sparse at load (--detect-sparsity): already in memory, not copied.
  std::unique_ptr<ModelFile> detected_file = pruned_2_4(write(DType::kQ8_0));
  ASSERT_TRUE(store_block_matrices_sparse(detected_file.get(), pool_, SparseStoreOptions{}).is_ok());
  auto detected = Model::from_file(std::move(detected_file));
  ASSERT_TRUE(detected.is_ok());
  const TensorView* d = (*detected)->weights().layers[1].down.weight;
  const void* at = d->data;
  (*detected)->interleave_weights(2);
  EXPECT_EQ(d->data, at);
}

}  // namespace
}  // namespace ember
