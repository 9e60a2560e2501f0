// Round-to-nearest and importance-weighted quantizers; see quantizer.h.
#include "transform/quantizer.h"

#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"

namespace ember {

bool RtnQuantizer::supports(DType target) const {
  return convertible_to(target) && target != DType::kF32 && target != DType::kF16 && target != DType::kBF16;
}

Status RtnQuantizer::quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType target,
                                   const QuantTensorContext& ctx, uint8_t* dst) {
  if (!supports(target)) return Status::errorf("rtn cannot write {}", dtype_name(target));
  if (n_per_row % dtype_block_size(target) != 0)
    return Status::errorf("row length {} is not a multiple of {}'s block size", n_per_row, dtype_name(target));
  const size_t row_bytes = dtype_row_size(target, n_per_row);
  for (int64_t r = 0; r < n_rows; ++r) quantize_row_ref(target, src + r * n_per_row, dst + r * row_bytes, n_per_row);
  return Status::ok();
}

bool ImatrixQuantizer::supports(DType target) const { return can_quantize_imatrix(target); }

Status ImatrixQuantizer::quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType target,
                                       const QuantTensorContext& ctx, uint8_t* dst) {
  if (!ctx.importance) return Status::error("imatrix quantization without importance statistics");
  return quantize_rows_imatrix(target, src, dst, n_rows, n_per_row, ctx.importance);
}

}  // namespace ember
