// Test helper: TensorViews of weight matrices [rows, n] held in byte
// buffers (the buffer owns the bytes and must outlive the view), and of a
// range of their rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ember {

inline TensorView matrix_view(DType t, int64_t rows, int64_t n, const std::vector<uint8_t>& bytes) {
  TensorView w;
  w.type = t;
  w.n_dims = 2;
  w.ne[0] = n;
  w.ne[1] = rows;
  w.data = bytes.data();
  w.nbytes = bytes.size();
  return w;
}

// Rows [r0, r1) of w.
inline TensorView row_range(const TensorView& w, int64_t r0, int64_t r1) {
  TensorView v = w;
  v.ne[1] = r1 - r0;
  v.data = w.row(r0);
  v.nbytes = static_cast<size_t>(r1 - r0) * w.row_bytes();
  return v;
}

}  // namespace ember
