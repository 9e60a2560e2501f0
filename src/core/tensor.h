// TensorView: a non-owning view of a typed tensor (weights in a mapped file
// or activations in a buffer). Dimensions follow GGML order: ne[0] is the
// innermost (contiguous) dimension, so a weight matrix [n_out, n_in] has
// ne[0] = n_in, ne[1] = n_out.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace ember {

struct TensorView {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  const void* data = nullptr;
  size_t nbytes = 0;

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return dtype_row_size(type, ne[0]); }
  const uint8_t* row(int64_t i) const { return static_cast<const uint8_t*>(data) + i * row_bytes(); }
  std::string shape_string() const;
};

}  // namespace ember
