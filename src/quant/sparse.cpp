// Sparse int8 rows: reference conversions and validation (quant/sparse.h).
#include "quant/sparse.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {

int sparse_capacity_q8_0(const void* rows, int64_t nrows, int64_t n) {
  const int64_t nb = n / kSparseBlock;
  const size_t row_bytes = dtype_row_size(DType::kQ8_0, n);
  int64_t densest = 0;
  for (int64_t r = 0; r < nrows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(rows) + r * row_bytes);
    int64_t nz = 0;
    for (int64_t i = 0; i < n / kQK; ++i)
      for (int j = 0; j < kQK; ++j) nz += blk[i].qs[j] != 0;
    densest = std::max(densest, nz);
  }
  return static_cast<int>(std::max<int64_t>(1, (densest + nb - 1) / nb));
}

Status sparse_from_q8_0_row(const void* q8_0, void* dst, int64_t n, int capacity) {
  if (n % kSparseBlock != 0) return Status::error(fmt::format("sparse row: n = {} is not a multiple of 64", n));
  const int64_t nb = n / kSparseBlock;
  const auto* blk = static_cast<const BlockQ8_0*>(q8_0);
  auto* out = static_cast<uint8_t*>(dst);
  int8_t* values = reinterpret_cast<int8_t*>(out + nb * 12);
  const int64_t cap = nb * capacity;
  int64_t k = 0;
  for (int64_t b = 0; b < nb; ++b) {
    uint64_t mask = 0;
    for (int h = 0; h < 2; ++h) {
      const BlockQ8_0& q = blk[2 * b + h];
      std::memcpy(out + nb * 8 + (2 * b + h) * 2, &q.d, 2);
      for (int j = 0; j < kQK; ++j) {
        if (q.qs[j] == 0) continue;
        if (k == cap)
          return Status::error(
              fmt::format("sparse row: more than {} nonzeros ({} per 64 inputs)", cap, capacity));
        if (q.qs[j] == -128) return Status::error("sparse row: a Q8_0 value of -128 (sparse values lie in [-127, 127])");
        mask |= uint64_t{1} << (32 * h + j);
        values[k++] = q.qs[j];
      }
    }
    std::memcpy(out + b * 8, &mask, 8);
  }
  std::memset(values + k, 0, static_cast<size_t>(cap - k));
  return Status::ok();
}

Status quantize_row_sq8_ref(const float* src, void* dst, int64_t n, int capacity) {
  if (n % kSparseBlock != 0) return Status::error(fmt::format("sparse row: n = {} is not a multiple of 64", n));
  std::vector<BlockQ8_0> q(static_cast<size_t>(n / kQK));
  quantize_row_q8_0_ref(src, q.data(), n);
  return sparse_from_q8_0_row(q.data(), dst, n, capacity);
}

void dequantize_row_sq8_ref(const void* src, float* dst, int64_t n) {
  const SparseRow r = sparse_row(src, n);
  const int64_t nb = n / kSparseBlock;
  const int8_t* v = r.values;
  for (int64_t b = 0; b < nb; ++b) {
    const uint64_t m = sparse_mask(r, b);
    for (int h = 0; h < 2; ++h) {
      f16_t dh;
      std::memcpy(&dh, r.scales + (2 * b + h) * 2, 2);
      const float d = f16_to_f32(dh);
      for (int j = 0; j < 32; ++j) {
        const int i = 32 * h + j;
        dst[b * kSparseBlock + i] = (m >> i) & 1 ? d * static_cast<float>(*v++) : 0.0f;
      }
    }
  }
}

Status validate_sparse_rows(DType t, const void* data, int64_t nrows, int64_t n) {
  if (!dtype_is_sparse(t)) return Status::error("validate_sparse_rows: not a sparse type");
  const int64_t nb = n / kSparseBlock;
  const int64_t cap = nb * dtype_sparse_capacity(t);
  const size_t row_bytes = dtype_row_size(t, n);
  for (int64_t row = 0; row < nrows; ++row) {
    const SparseRow r = sparse_row(static_cast<const uint8_t*>(data) + row * row_bytes, n);
    int64_t k = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const int pc = std::popcount(sparse_mask(r, b));
      if (k + pc > cap)
        return Status::error(fmt::format(
            "sparse row {}: block {} brings the kept values to {}, over the row capacity {} ({} per 64 inputs)", row,
            b, k + pc, cap, dtype_sparse_capacity(t)));
      for (int h = 0; h < 2; ++h) {
        f16_t dh;
        std::memcpy(&dh, r.scales + (2 * b + h) * 2, 2);
        if (!std::isfinite(f16_to_f32(dh)))
          return Status::error(fmt::format("sparse row {}: block {} has a non-finite scale", row, b));
      }
      for (int j = 0; j < pc; ++j)
        if (r.values[k + j] == -128)
          return Status::error(
              fmt::format("sparse row {}: block {} holds the value -128 (outside [-127, 127])", row, b));
      k += pc;
    }
  }
  return Status::ok();
}

}  // namespace ember
