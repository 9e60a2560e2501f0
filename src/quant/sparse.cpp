// Sparse int8 / int4 rows: reference conversions and validation (quant/sparse.h).
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

namespace {

// Q4_0 level of input j (< 32) of a block.
inline int q4_0_level(const BlockQ4_0& q, int j) { return j < 16 ? q.qs[j] & 0xF : q.qs[j - 16] >> 4; }

}  // namespace

int sparse_capacity_q4_0(const void* rows, int64_t nrows, int64_t n) {
  const int64_t nb = n / kSparseBlock;
  const size_t row_bytes = dtype_row_size(DType::kQ4_0, n);
  int64_t densest = 0;  // value bytes of the densest row
  for (int64_t r = 0; r < nrows; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(rows) + r * row_bytes);
    int64_t bytes = 0;
    for (int64_t b = 0; b < nb; ++b) {
      int nz = 0;
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < kQK; ++j) nz += q4_0_level(blk[2 * b + h], j) != 8;
      bytes += sq4_block_bytes(nz);
    }
    densest = std::max(densest, bytes);
  }
  return static_cast<int>(2 * std::max<int64_t>(1, (densest + nb - 1) / nb));
}

Status sparse_from_q4_0_row(const void* q4_0, void* dst, int64_t n, int capacity) {
  if (n % kSparseBlock != 0) return Status::error(fmt::format("sparse row: n = {} is not a multiple of 64", n));
  if (capacity < 2 || capacity > kSparseBlock || capacity % 2)
    return Status::error(fmt::format("sparse row: sq4 capacity {} is not even in [2, 64]", capacity));
  const int64_t nb = n / kSparseBlock;
  const auto* blk = static_cast<const BlockQ4_0*>(q4_0);
  auto* out = static_cast<uint8_t*>(dst);
  uint8_t* values = out + nb * 12;
  const int64_t cap = nb * capacity / 2;  // value bytes
  std::memset(values, 0, static_cast<size_t>(cap));
  int64_t used = 0;
  for (int64_t b = 0; b < nb; ++b) {
    uint64_t mask = 0;
    uint8_t q[kSparseBlock];
    int k = 0;
    for (int h = 0; h < 2; ++h) {
      const BlockQ4_0& qb = blk[2 * b + h];
      std::memcpy(out + nb * 8 + (2 * b + h) * 2, &qb.d, 2);
      for (int j = 0; j < kQK; ++j) {
        const int level = q4_0_level(qb, j);
        if (level == 8) continue;
        mask |= uint64_t{1} << (32 * h + j);
        q[k++] = static_cast<uint8_t>(level);
      }
    }
    if (used + sq4_block_bytes(k) > cap)
      return Status::error(fmt::format("sparse row: the kept 4-bit values need more than {} bytes ({} values per 64 "
                                       "inputs)", cap, capacity));
    for (int i = 0; i < k; ++i) values[used + i / 2] |= static_cast<uint8_t>(q[i] << (4 * (i % 2)));
    used += sq4_block_bytes(k);
    std::memcpy(out + b * 8, &mask, 8);
  }
  return Status::ok();
}

Result<DType> sparse_type_for(DType dense, const void* rows, int64_t nrows, int64_t n) {
  if (dense != DType::kQ8_0 && dense != DType::kQ4_0)
    return Status::errorf("the sparse formats store Q8_0 (int8 values) or Q4_0 (4-bit values) matrices, not {}",
                          dtype_name(dense));
  if (n % kSparseBlock != 0) return Status::errorf("rows of {} are not a multiple of 64 (the sparse block)", n);
  return dense == DType::kQ4_0 ? dtype_sq4(sparse_capacity_q4_0(rows, nrows, n))
                               : dtype_sq8(sparse_capacity_q8_0(rows, nrows, n));
}

Status sparse_from_dense_row(DType st, const void* src, void* dst, int64_t n) {
  if (dtype_is_sq4(st)) return sparse_from_q4_0_row(src, dst, n, dtype_sparse_capacity(st));
  if (dtype_is_sq8(st)) return sparse_from_q8_0_row(src, dst, n, dtype_sparse_capacity(st));
  return Status::error("sparse_from_dense_row: not a sparse type");
}

Status quantize_row_sq8_ref(const float* src, void* dst, int64_t n, int capacity) {
  if (n % kSparseBlock != 0) return Status::error(fmt::format("sparse row: n = {} is not a multiple of 64", n));
  std::vector<BlockQ8_0> q(static_cast<size_t>(n / kQK));
  quantize_row_q8_0_ref(src, q.data(), n);
  return sparse_from_q8_0_row(q.data(), dst, n, capacity);
}

Status quantize_row_sq4_ref(const float* src, void* dst, int64_t n, int capacity) {
  if (n % kSparseBlock != 0) return Status::error(fmt::format("sparse row: n = {} is not a multiple of 64", n));
  std::vector<BlockQ4_0> q(static_cast<size_t>(n / kQK));
  quantize_row_q4_0_ref(src, q.data(), n);
  return sparse_from_q4_0_row(q.data(), dst, n, capacity);
}

namespace {

// dst[i] = d[b][h] * value(k) for kept inputs (k counting the block's kept
// inputs), 0 elsewhere; value_bytes(kept) advances to the next block.
template <typename Value, typename Bytes>
void dequantize_sparse(const void* src, float* dst, int64_t n, Value&& value, Bytes&& value_bytes) {
  const SparseRow r = sparse_row(src, n);
  const auto* v = reinterpret_cast<const uint8_t*>(r.values);
  for (int64_t b = 0; b < n / kSparseBlock; ++b) {
    const uint64_t m = sparse_mask(r, b);
    int k = 0;
    for (int i = 0; i < kSparseBlock; ++i) {
      f16_t dh;
      std::memcpy(&dh, r.scales + (2 * b + i / 32) * 2, 2);
      dst[b * kSparseBlock + i] = (m >> i) & 1 ? f16_to_f32(dh) * static_cast<float>(value(v, k++)) : 0.0f;
    }
    v += value_bytes(k);
  }
}

}  // namespace

void dequantize_row_sq8_ref(const void* src, float* dst, int64_t n) {
  dequantize_sparse(
      src, dst, n, [](const uint8_t* v, int k) { return static_cast<int8_t>(v[k]); }, [](int kept) { return kept; });
}

void dequantize_row_sq4_ref(const void* src, float* dst, int64_t n) {
  dequantize_sparse(src, dst, n, sq4_value, sq4_block_bytes);
}

namespace {

// Value bytes of the kept values of blocks [b0, b1) of a row.
int64_t value_bytes(bool int4, const SparseRow& r, int64_t b0, int64_t b1) {
  int64_t bytes = 0;
  for (int64_t b = b0; b < b1; ++b) {
    const int pc = std::popcount(sparse_mask(r, b));
    bytes += int4 ? sq4_block_bytes(pc) : pc;
  }
  return bytes;
}

}  // namespace

int sparse_slice_capacity(DType t, const void* rows, int64_t nrows, int64_t n, int64_t c0, int64_t m) {
  const bool int4 = dtype_is_sq4(t);
  const int64_t b0 = c0 / kSparseBlock, mb = m / kSparseBlock;
  const size_t row_bytes = dtype_row_size(t, n);
  int64_t most = 0;
  for (int64_t row = 0; row < nrows; ++row) {
    const SparseRow r = sparse_row(static_cast<const uint8_t*>(rows) + row * row_bytes, n);
    most = std::max(most, value_bytes(int4, r, b0, b0 + mb));
  }
  const int64_t per_block = mb > 0 ? (most + mb - 1) / mb : 0;  // value bytes per 64 inputs
  return static_cast<int>(int4 ? std::clamp<int64_t>(2 * per_block, 2, 64) : std::clamp<int64_t>(per_block, 1, 64));
}

Status sparse_slice_row(DType t, const void* src, int64_t n, int64_t c0, int64_t m, DType dst, void* out) {
  if (!dtype_is_sparse(t) || dtype_is_sq4(t) != dtype_is_sq4(dst) || !dtype_is_sparse(dst))
    return Status::error(fmt::format("sparse slice: {} -> {} is not within one sparse family", dtype_name(t),
                                     dtype_name(dst)));
  if (n % kSparseBlock != 0 || c0 < 0 || m <= 0 || c0 % kSparseBlock != 0 || m % kSparseBlock != 0 || c0 + m > n)
    return Status::error(
        fmt::format("sparse slice: inputs [{}, {}) of {} do not fall on 64-input blocks", c0, c0 + m, n));
  const bool int4 = dtype_is_sq4(t);
  const int64_t nb = m / kSparseBlock, b0 = c0 / kSparseBlock;
  const SparseRow r = sparse_row(src, n);
  const int64_t skip = value_bytes(int4, r, 0, b0), bytes = value_bytes(int4, r, b0, b0 + nb);
  const int64_t cap = nb * dtype_sparse_capacity(dst) / (int4 ? 2 : 1);
  if (bytes > cap)
    return Status::error(fmt::format("sparse slice: {} bytes of kept values, over {}'s {} for {} inputs", bytes,
                                     dtype_name(dst), cap, m));
  auto* o = static_cast<uint8_t*>(out);
  std::memcpy(o, r.masks + b0 * 8, static_cast<size_t>(nb * 8));
  std::memcpy(o + nb * 8, r.scales + b0 * 4, static_cast<size_t>(nb * 4));
  std::memcpy(o + nb * 12, reinterpret_cast<const uint8_t*>(r.values) + skip, static_cast<size_t>(bytes));
  std::memset(o + nb * 12 + bytes, 0, static_cast<size_t>(cap - bytes));
  return Status::ok();
}

Status validate_sparse_rows(DType t, const void* data, int64_t nrows, int64_t n) {
  if (!dtype_is_sparse(t)) return Status::error("validate_sparse_rows: not a sparse type");
  const bool int4 = dtype_is_sq4(t);
  const int64_t nb = n / kSparseBlock;
  const int64_t cap = nb * dtype_sparse_capacity(t) / (int4 ? 2 : 1);  // value bytes
  const size_t row_bytes = dtype_row_size(t, n);
  for (int64_t row = 0; row < nrows; ++row) {
    const SparseRow r = sparse_row(static_cast<const uint8_t*>(data) + row * row_bytes, n);
    int64_t k = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const int pc = std::popcount(sparse_mask(r, b));
      const int bytes = int4 ? sq4_block_bytes(pc) : pc;
      if (k + bytes > cap)
        return Status::error(fmt::format(
            "sparse row {}: block {} brings the kept values to {} bytes, over the row capacity {} ({} values per 64 "
            "inputs)", row, b, k + bytes, cap, dtype_sparse_capacity(t)));
      for (int h = 0; h < 2; ++h) {
        f16_t dh;
        std::memcpy(&dh, r.scales + (2 * b + h) * 2, 2);
        if (!std::isfinite(f16_to_f32(dh)))
          return Status::error(fmt::format("sparse row {}: block {} has a non-finite scale", row, b));
      }
      if (!int4)
        for (int j = 0; j < pc; ++j)
          if (r.values[k + j] == -128)
            return Status::error(
                fmt::format("sparse row {}: block {} holds the value -128 (outside [-127, 127])", row, b));
      k += bytes;
    }
  }
  return Status::ok();
}

}  // namespace ember
