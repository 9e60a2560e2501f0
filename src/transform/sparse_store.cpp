// The pruned block matrices stored sparse; see sparse_store.h.
#include "transform/sparse_store.h"

#include <atomic>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "quant/sparse.h"
#include "transform/quant_plan.h"

namespace ember {
namespace {

// The matrices prune.h prunes: blk.<l>.<role>.weight.
bool is_block_matrix(const std::string& name) {
  static const std::regex re(R"(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight)");
  return std::regex_match(name, re);
}

constexpr int kMaxGainfulCapacity = 56;  // 12 + C < 68 bytes (two Q8_0 blocks) per 64 inputs

}  // namespace

Result<SparseStoreReport> store_block_matrices_sparse(ModelFile* file, ThreadPool& pool) {
  SparseStoreReport rep;
  std::vector<std::string> names;
  for (const auto& [name, t] : file->tensors)
    if (t.n_dims == 2 && is_block_matrix(name)) names.push_back(name);
  for (const std::string& name : names) {
    const TensorView t = *file->tensor(name);
    if (t.type != DType::kQ8_0)
      return Status::errorf("tensor '{}' is {}: the sparse format stores Q8_0 matrices (give --type q8_0 or a Q8_0 "
                            "source)", name, dtype_name(t.type));
    if (t.ne[0] % kSparseBlock != 0)
      return Status::errorf("tensor '{}': rows of {} are not a multiple of 64 (the sparse block)", name, t.ne[0]);
    const int64_t n = t.ne[0], rows = t.nrows();
    const int cap = sparse_capacity_q8_0(t.data, rows, n);
    if (cap > kMaxGainfulCapacity) {
      ++rep.kept_dense;
      continue;
    }
    const DType st = dtype_sq8(cap);
    const size_t rb = dtype_row_size(st, n), qrb = t.row_bytes();
    const size_t bytes = rb * static_cast<size_t>(rows);
    auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
    std::atomic<bool> failed{false};
    pool.parallel_for(rows, 64, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r)
        if (!sparse_from_q8_0_row(static_cast<const uint8_t*>(t.data) + r * qrb, buf.get() + r * rb, n, cap).is_ok())
          failed = true;
    });
    if (failed) return Status::errorf("tensor '{}': a row does not fit the sparse format", name);
    rep.dense_bytes += t.nbytes;
    rep.sparse_bytes += bytes;
    ++rep.matrices;
    replace_tensor(file, name, st, std::move(buf), bytes);
  }
  return rep;
}

}  // namespace ember
