// Test helper: the matmul driver gives a token the same bits whether it is
// multiplied alone (the one-token path: vec_dot_rows) or in a batch (tile
// kernels), for 1-3 threads. Used by the decode tests of every weight family.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"

namespace ember {

// w: rows x n weights of type t; x: tokens x n activations.
inline void expect_decode_equals_batch(DType t, const std::vector<uint8_t>& wbytes, int64_t rows, int64_t n,
                                       const std::vector<float>& x, int64_t tokens) {
  const TensorView w = matrix_view(t, rows, n, wbytes);
  for (int nt : {1, 2, 3}) {
    ThreadPool pool(nt);
    MatmulScratch scratch;
    std::vector<float> batch(static_cast<size_t>(rows * tokens)), single(batch.size());
    matmul(w, x.data(), n, batch.data(), rows, tokens, pool, scratch);
    for (int64_t tk = 0; tk < tokens; ++tk)
      matmul(w, x.data() + tk * n, n, single.data() + tk * rows, rows, 1, pool, scratch);
    for (size_t i = 0; i < batch.size(); ++i)
      ASSERT_EQ(std::memcmp(&batch[i], &single[i], sizeof(float)), 0)
          << dtype_name(t) << " threads=" << nt << " i=" << i << ": " << batch[i] << " vs " << single[i];
  }
}

}  // namespace ember
