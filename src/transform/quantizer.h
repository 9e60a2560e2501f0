// Quantizer: turns rows of f32 weights into rows of a block type. The plan
// executor (quant_plan.h) calls it for every entry whose method it serves,
// with a QuantTensorContext that says which tensor the rows belong to and,
// for calibrated methods, carries the calibration statistics of its input
// channels. RtnQuantizer (round-to-nearest with the reference quantizers,
// bit-compatible with llama.cpp's quantize_row_*_ref) and ImatrixQuantizer
// (importance-weighted rounding, bit-compatible with llama.cpp's quantizers
// given the same importance matrix) implement it; AWQ and GPTQ follow.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "transform/quant_plan.h"

namespace ember {

// What a quantizer knows about the rows it is given.
struct QuantTensorContext {
  const QuantPlanEntry* entry = nullptr;  // name, role, layer, shape, source and target
  int64_t row0 = 0;                       // index in the tensor of the first row passed
  // Calibration statistics of the tensor's input channels (n_per_row of
  // them), null when there are none (RTN; the token embedding):
  const float* importance = nullptr;  // [n_per_row] mean of x_j^2 over the calibration tokens
  const double* hessian = nullptr;    // [n_per_row, n_per_row] X^T X, row-major
};

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  virtual const char* name() const = 0;
  // Whether this quantizer can write `target` (a block type).
  virtual bool supports(DType target) const = 0;
  // Quantizes n_rows rows of n_per_row values from `src` (row-major) into
  // `dst` (n_rows * dtype_row_size(target, n_per_row) bytes). n_per_row is a
  // multiple of target's block size. Called concurrently from pool threads
  // for disjoint row ranges of one tensor: implementations keep no mutable
  // state across calls (what they precompute per tensor is read-only).
  virtual Status quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType target,
                               const QuantTensorContext& ctx, uint8_t* dst) = 0;
};

// Round-to-nearest with the reference quantizers (quant/quantize.h); ignores
// calibration statistics. Stateless; one instance may serve every thread.
class RtnQuantizer final : public Quantizer {
 public:
  const char* name() const override { return "rtn"; }
  bool supports(DType target) const override;
  Status quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType target,
                       const QuantTensorContext& ctx, uint8_t* dst) override;
};

// Importance-weighted rounding (quant/quantize_imatrix.h) with the tensor's
// ctx.importance (required: an entry without one is an error, so a plan
// cannot silently fall back). Stateless.
class ImatrixQuantizer final : public Quantizer {
 public:
  const char* name() const override { return "imatrix"; }
  bool supports(DType target) const override;
  Status quantize_rows(const float* src, int64_t n_rows, int64_t n_per_row, DType target,
                       const QuantTensorContext& ctx, uint8_t* dst) override;
};

}  // namespace ember
