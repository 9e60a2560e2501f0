// The pruned block matrices stored sparse; see sparse_store.h.
#include "transform/sparse_store.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/mmap_file.h"
#include "quant/sparse.h"
#include "transform/quant_plan.h"

namespace ember {
namespace {

// The matrices prune.h prunes: blk.<l>.<role>.weight.
bool is_block_matrix(const std::string& name) {
  static const std::regex re(R"(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight)");
  return std::regex_match(name, re);
}

}  // namespace

Result<SparseStoreReport> store_block_matrices_sparse(ModelFile* file, ThreadPool& pool, const SparseStoreOptions& o) {
  SparseStoreReport rep;
  std::vector<std::string> names;
  for (const auto& [name, t] : file->tensors)
    if (t.n_dims == 2 && is_block_matrix(name)) names.push_back(name);
  std::vector<std::pair<uintptr_t, uintptr_t>> files;  // read once, at the first matrix stored sparse
  for (const std::string& name : names) {
    const TensorView t = *file->tensor(name);
    const int64_t n = t.ne[0], rows = t.nrows();
    auto st = sparse_type_for(t.type, t.data, rows, n);
    if (!st) {
      if (!o.strict) continue;
      return Status::errorf("tensor '{}': {}; give --type q8_0 or q4_0 (or --sparse-bits), or a source in one of them",
                            name, st.status().message());
    }
    ++rep.candidates;
    const size_t rb = dtype_row_size(*st, n), qrb = t.row_bytes();
    if (static_cast<double>(rb) > o.max_ratio * static_cast<double>(qrb)) {  // too dense to gain enough
      ++rep.kept_dense;
      continue;
    }
    const size_t bytes = rb * static_cast<size_t>(rows);
    auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
    std::atomic<bool> failed{false};
    pool.parallel_for(rows, 64, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r)
        if (!sparse_from_dense_row(*st, static_cast<const uint8_t*>(t.data) + r * qrb, buf.get() + r * rb, n).is_ok())
          failed = true;
    });
    if (failed) return Status::errorf("tensor '{}': a row does not fit the sparse format", name);
    rep.dense_bytes += t.nbytes;
    rep.sparse_bytes += bytes;
    ++(dtype_is_sq4(*st) ? rep.matrices4 : rep.matrices);
    replace_tensor(file, name, *st, std::move(buf), bytes);
    // The dense rows just read are not read again: their pages leave the
    // resident set when they lie in the mapped file.
    if (files.empty()) files = file_mappings();
    rep.released_bytes += release_file_pages(t.data, t.nbytes, files);
  }
  return rep;
}

}  // namespace ember
