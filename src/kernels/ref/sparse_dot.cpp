// Scalar twins of the sparse kernels (DType kSQ8 | C and kSQ4 | C,
// quant/sparse.h) against Q8_0 activations: the arithmetic every SIMD level
// reproduces bit for bit (kernels/ref/dot.h states it; the two families
// differ only in how a block's kept values are unpacked). FMA contraction is
// off; the one fma of the contract is std::fma, which rounds once like the
// vector FMA.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/ref/dot.h"
#include "quant/blocks.h"
#include "quant/sparse.h"

namespace ember::ref {
namespace {

// The contract over a row whose blocks `expand(b, wq)` writes as 64 int8
// weights (0 where not kept).
template <typename Expand>
void sparse_lanes(int64_t n, float* s, const SparseRow& r, const void* x, Expand&& expand) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const int64_t nb = n / kSparseBlock;
  float acc[16] = {};
  for (int64_t b = 0; b < nb; ++b) {
    int8_t wq[kSparseBlock];  // the block expanded under its mask
    expand(b, wq);
    for (int h = 0; h < 2; ++h) {
      const BlockQ8_0& xh = xb[2 * b + h];
      f16_t dw;
      std::memcpy(&dw, r.scales + (2 * b + h) * 2, 2);
      const float sc = f16_to_f32(dw) * f16_to_f32(xh.d);
      for (int j = 0; j < 8; ++j) {
        int32_t isum = 0;
        for (int t = 0; t < 4; ++t) isum += wq[32 * h + 4 * j + t] * xh.qs[4 * j + t];
        acc[8 * h + j] = std::fma(static_cast<float>(isum), sc, acc[8 * h + j]);
      }
    }
  }
  for (int i = 0; i < 8; ++i) acc[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) acc[i] = acc[i] + acc[i + 4];
  for (int i = 0; i < 2; ++i) acc[i] = acc[i] + acc[i + 2];
  *s = acc[0] + acc[1];
}

}  // namespace

void sq8_dot(int64_t n, float* s, const void* w, const void* x) {
  const SparseRow r = sparse_row(w, n);
  const int8_t* v = r.values;
  sparse_lanes(n, s, r, x, [&](int64_t b, int8_t* wq) {
    const uint64_t m = sparse_mask(r, b);
    for (int i = 0; i < kSparseBlock; ++i) wq[i] = (m >> i) & 1 ? *v++ : 0;
  });
}

void sq4_dot(int64_t n, float* s, const void* w, const void* x) {
  const SparseRow r = sparse_row(w, n);
  const auto* v = reinterpret_cast<const uint8_t*>(r.values);
  sparse_lanes(n, s, r, x, [&](int64_t b, int8_t* wq) {
    const uint64_t m = sparse_mask(r, b);
    int k = 0;
    for (int i = 0; i < kSparseBlock; ++i) wq[i] = (m >> i) & 1 ? sq4_value(v, k++) : 0;
    v += sq4_block_bytes(k);
  });
}

}  // namespace ember::ref
