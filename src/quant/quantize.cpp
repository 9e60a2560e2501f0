// Type dispatch for the scalar reference quantizers/dequantizers and the
// row-batched quantize_rows entry point (see quantize.h).
#include "quant/quantize.h"

#include <cstring>
#include <limits>

#include "quant/sparse.h"

namespace ember {
namespace {

using QuantizeFn = void (*)(const float*, void*, int64_t);
using DequantizeFn = void (*)(const void*, float*, int64_t);

void quantize_row_f32_copy(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequantize_row_f32_copy(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

struct RefFns {
  QuantizeFn quantize = nullptr;
  DequantizeFn dequantize = nullptr;
};

RefFns ref_fns(DType t) {
  // Sparse int8 / int4: dequantize only (their quantizers need a capacity: quant/sparse.h).
  if (dtype_is_sq8(t)) return {nullptr, dequantize_row_sq8_ref};
  if (dtype_is_sq4(t)) return {nullptr, dequantize_row_sq4_ref};
  switch (t) {
    case DType::kF32: return {quantize_row_f32_copy, dequantize_row_f32_copy};
    case DType::kF16: return {quantize_row_f16_ref, dequantize_row_f16_ref};
    case DType::kBF16: return {quantize_row_bf16_ref, dequantize_row_bf16_ref};
    case DType::kQ4_0: return {quantize_row_q4_0_ref, dequantize_row_q4_0_ref};
    case DType::kQ4_1: return {quantize_row_q4_1_ref, dequantize_row_q4_1_ref};
    case DType::kQ5_0: return {quantize_row_q5_0_ref, dequantize_row_q5_0_ref};
    case DType::kQ5_1: return {quantize_row_q5_1_ref, dequantize_row_q5_1_ref};
    case DType::kQ8_0: return {quantize_row_q8_0_ref, dequantize_row_q8_0_ref};
    case DType::kQ8_1: return {quantize_row_q8_1_ref, dequantize_row_q8_1_ref};
    case DType::kQ2_K: return {quantize_row_q2_K_ref, dequantize_row_q2_K_ref};
    case DType::kQ3_K: return {quantize_row_q3_K_ref, dequantize_row_q3_K_ref};
    case DType::kQ4_K: return {quantize_row_q4_K_ref, dequantize_row_q4_K_ref};
    case DType::kQ5_K: return {quantize_row_q5_K_ref, dequantize_row_q5_K_ref};
    case DType::kQ6_K: return {quantize_row_q6_K_ref, dequantize_row_q6_K_ref};
    case DType::kQ8_K: return {quantize_row_q8_K_ref, dequantize_row_q8_K_ref};
    case DType::kMXFP4: return {quantize_row_mxfp4_ref, dequantize_row_mxfp4_ref};
    default: return {};
  }
}

}  // namespace

bool can_quantize(DType t) { return ref_fns(t).quantize != nullptr; }
bool can_dequantize(DType t) { return ref_fns(t).dequantize != nullptr; }

void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n) {
  const RefFns f = ref_fns(t);
  if (f.dequantize) {
    f.dequantize(src, dst, n);
  } else {
    // Unsupported type (callers check can_dequantize): make misuse visible.
    for (int64_t i = 0; i < n; ++i) dst[i] = std::numeric_limits<float>::quiet_NaN();
  }
}

void quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  const RefFns f = ref_fns(t);
  if (f.quantize) f.quantize(src, dst, n);  // unsupported: no-op (callers check can_quantize)
}

Status quantize_rows(DType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row) {
  const RefFns f = ref_fns(t);
  if (!f.quantize) return Status::errorf("quantize_rows: cannot quantize to type {}", dtype_name(t));
  const int64_t bs = dtype_block_size(t);
  if (n_per_row <= 0 || n_per_row % bs != 0)
    return Status::errorf("quantize_rows: row length {} is not a positive multiple of the {} block size {}",
                          n_per_row, dtype_name(t), bs);
  if (nrows < 0) return Status::errorf("quantize_rows: negative row count {}", nrows);
  if (nrows > 0 && (src == nullptr || dst == nullptr)) return Status::error("quantize_rows: null buffer");
  const size_t row_size = dtype_row_size(t, n_per_row);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < nrows; ++r) f.quantize(src + r * n_per_row, out + static_cast<size_t>(r) * row_size, n_per_row);
  return Status::ok();
}

}  // namespace ember
