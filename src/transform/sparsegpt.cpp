// SparseGPT on one matrix, with optional joint quantization; see sparsegpt.h.
#include "transform/sparsegpt.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include "quant/block_levels.h"
#include "quant/block_utils.h"
#include "quant/quantize_imatrix.h"
#include "transform/f64_vec.h"
#include "transform/gptq.h"

namespace ember {

bool sparse_quant_supports(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kQ3_K:
    case DType::kQ6_K:
      return gptq_supports(t);
    default:
      return false;
  }
}

namespace {

// Rows a thread takes at a time, and columns of the lazy update per pass
// over them (the tile of U, 128 x kColTile doubles, is 256 KiB).
constexpr int64_t kRowTile = 16;
constexpr int64_t kColTile = 256;

// Marks the n smallest of score[0..m) (ties: the lower index) in mask.
void mask_smallest(const double* score, int m, int n, uint8_t* mask) {
  int idx[64];
  std::iota(idx, idx + m, 0);
  std::partial_sort(idx, idx + n, idx + m,
                    [&](int a, int b) { return score[a] != score[b] ? score[a] < score[b] : a < b; });
  for (int i = 0; i < n; ++i) mask[idx[i]] = 1;
}

}  // namespace

Status sparsegpt_prune(float* W, int64_t n_out, int64_t n_in, const double* H, const SparseGptOptions& o,
                       const uint8_t* fixed_mask, DType type, uint8_t* dst, uint8_t* mask_out, ThreadPool& pool) {
  const bool quant = type != DType::kF32;
  if (quant && !sparse_quant_supports(type))
    return Status::errorf("pruning with quantization needs a type that stores zero exactly (q4_0, q5_0, q8_0, "
                          "q3_K, q6_K), not {}", dtype_name(type));
  const bool nm = o.prune_n > 0 || o.prune_m > 0;
  if (nm && !(o.prune_n > 0 && o.prune_n < o.prune_m && o.prune_m <= 64))
    return Status::errorf("N:M pattern {}:{} needs 0 < N < M <= 64", o.prune_n, o.prune_m);
  if (!nm && !(o.sparsity >= 0 && o.sparsity < 1)) return Status::errorf("sparsity {} is not in [0, 1)", o.sparsity);
  const int64_t m = nm ? o.prune_m : 1;
  const int64_t G = quant ? dtype_block_size(type) : 1;
  if (n_in % m != 0) return Status::errorf("row length {} is not a multiple of the N:M group {}", n_in, m);
  if (n_in % G != 0) return Status::errorf("row length {} is not a multiple of {}'s block size", n_in, dtype_name(type));
  if (quant && nm && G % m != 0)
    return Status::errorf("N:M group {} does not divide {}'s block size {}", m, dtype_name(type), G);
  if (o.block_size < 1 || o.damp < 0) return Status::error("SparseGPT: block size must be >= 1 and dampening >= 0");
  const int64_t unit = std::lcm(G, m);
  const int64_t B = (std::max<int64_t>(o.block_size, unit) + unit - 1) / unit * unit;

  GptqHinv hv;
  EMBER_RETURN_IF_ERROR(gptq_prepare_hinv(H, n_in, o.damp, false, &hv, &pool).with_context("SparseGPT"));
  const std::vector<double>& U = hv.U;
  std::vector<double> w(static_cast<size_t>(n_out * n_in));
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t c = 0; c < n_in; ++c) w[r * n_in + c] = hv.dead[c] ? 0.0 : W[r * n_in + c];
  std::vector<uint8_t> mask(static_cast<size_t>(n_out * n_in), 0);
  if (fixed_mask) std::copy(fixed_mask, fixed_mask + n_out * n_in, mask.begin());
  std::vector<double> inv_u2(static_cast<size_t>(n_in));  // 1 / U_pp^2: the metric is w^2 / U_pp^2
  for (int64_t p = 0; p < n_in; ++p) inv_u2[p] = 1.0 / (U[p * n_in + p] * U[p * n_in + p]);
  std::vector<float> qw(static_cast<size_t>(n_in));
  for (int64_t c = 0; c < n_in; ++c) qw[c] = hv.dead[c] ? 1e-12f : static_cast<float>(hv.diag[c]);
  const size_t row_bytes = quant ? dtype_row_size(type, n_in) : 0, block_bytes = quant ? dtype_row_size(type, G) : 0;
  int lo = 0, hi = 0;
  if (quant) block_level_range(type, &lo, &hi);
  std::vector<int64_t> order;
  std::vector<double> score;

  for (int64_t p1 = 0; p1 < n_in; p1 += B) {
    const int64_t p2 = std::min(n_in, p1 + B), nb = p2 - p1;
    if (!fixed_mask && !nm && o.per_row) {  // the batch's mask row by row
      const int64_t k = static_cast<int64_t>(o.sparsity * static_cast<double>(nb));
      score.resize(static_cast<size_t>(nb));
      order.resize(static_cast<size_t>(nb));
      for (int64_t r = 0; r < n_out && k > 0; ++r) {
        for (int64_t j = 0; j < nb; ++j) {
          const double x = w[r * n_in + p1 + j];
          score[j] = x * x * inv_u2[p1 + j];
        }
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
          return score[a] != score[b] ? score[a] < score[b] : a < b;
        });
        for (int64_t i = 0; i < k; ++i) mask[r * n_in + p1 + order[i]] = 1;
      }
    } else if (!fixed_mask && !nm) {  // the batch's mask over all rows
      const int64_t count = n_out * nb;
      const int64_t k = static_cast<int64_t>(o.sparsity * static_cast<double>(count));
      score.resize(static_cast<size_t>(count));
      order.resize(static_cast<size_t>(count));
      for (int64_t r = 0; r < n_out; ++r)
        for (int64_t j = 0; j < nb; ++j) {
          const double x = w[r * n_in + p1 + j];
          score[r * nb + j] = x * x * inv_u2[p1 + j];
        }
      std::iota(order.begin(), order.end(), 0);
      if (k > 0 && k < count)
        std::nth_element(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
          return score[a] != score[b] ? score[a] < score[b] : a < b;
        });
      for (int64_t i = 0; i < k; ++i) mask[(order[i] / nb) * n_in + p1 + order[i] % nb] = 1;
    }
    std::atomic<bool> no_zero{false};
    pool.parallel_for(n_out, kRowTile, [&](int64_t r0, int64_t r1, int) {
      std::vector<double> err(static_cast<size_t>((r1 - r0) * nb)), sc(static_cast<size_t>(m));
      std::vector<float> a(static_cast<size_t>(G)), b(static_cast<size_t>(G)), xg(static_cast<size_t>(G)),
          imp(static_cast<size_t>(G));
      std::vector<int> L(static_cast<size_t>(G));
      for (int64_t r = r0; r < r1; ++r) {
        double* wr = &w[r * n_in];
        uint8_t* mr = &mask[r * n_in];
        uint8_t* row = quant ? dst + r * row_bytes : nullptr;
        double* er = &err[(r - r0) * nb];
        // N:M groups [g0, g1) of the row chosen from the current values.
        auto choose_groups = [&](int64_t g0, int64_t g1) {
          for (int64_t g = g0; g < g1; g += m) {
            for (int64_t e = 0; e < m; ++e) sc[e] = wr[g + e] * wr[g + e] * inv_u2[g + e];
            mask_smallest(sc.data(), static_cast<int>(m), o.prune_n, mr + g);
          }
        };
        for (int64_t p = p1; p < p2; ++p) {
          if (quant && p % G == 0) {  // a GGUF block starts: its masks, then its scales
            if (nm && !fixed_mask) choose_groups(p, p + G);
            for (int64_t e = 0; e < G; ++e) {
              xg[e] = mr[p + e] ? 0.0f : static_cast<float>(wr[p + e]);
              imp[e] = mr[p + e] ? 1e-12f : qw[p + e];
            }
            uint8_t* blk = row + (p / G) * block_bytes;
            quantize_row_imatrix(type, xg.data(), blk, G, imp.data());
            block_affine(type, blk, a.data(), b.data());
          } else if (!quant && nm && !fixed_mask && p % m == 0) {
            choose_groups(p, p + m);
          }
          double q = wr[p];
          if (quant) {
            const int64_t e = p % G;
            const double ac = a[e], bc = b[e];
            int l = 0;
            if (mr[p]) {
              l = ac != 0 ? quant::nearest_int(static_cast<float>(-bc / ac)) : 0;
              l = std::max(lo, std::min(hi, l));
              if (ac * l + bc != 0.0) no_zero = true;
            } else {
              if (ac != 0) l = quant::nearest_int(static_cast<float>(std::clamp((wr[p] - bc) / ac, lo - 1.0, hi + 1.0)));
              l = std::max(lo, std::min(hi, l));
            }
            L[e] = l;
            q = mr[p] ? 0.0 : ac * l + bc;
            if (e == G - 1) pack_levels(type, L.data(), row + (p / G) * block_bytes);
          } else if (mr[p]) {
            q = 0.0;
          }
          const double* up = &U[p * n_in];
          const double e = (wr[p] - q) / up[p];
          er[p - p1] = e;
          wr[p] = q;
          f64_sub_scaled(wr + p + 1, e, up + p + 1, p2 - p - 1);
        }
      }
      // The lazy batch update of the later columns, w_k -= sum_p e_p U_pk
      // (p in order for every k, as one row at a time would), over tiles of
      // columns so that the tile of U stays in cache for the chunk's rows.
      for (int64_t c0 = p2; c0 < n_in; c0 += kColTile) {
        const int64_t c1 = std::min(n_in, c0 + kColTile);
        for (int64_t r = r0; r < r1; ++r) {
          double* wr = &w[r * n_in];
          const double* er = &err[(r - r0) * nb];
          for (int64_t p = p1; p < p2; ++p) f64_sub_scaled(wr + c0, er[p - p1], &U[p * n_in + c0], c1 - c0);
        }
      }
    });
    if (no_zero) return Status::errorf("{}: a block has no level that decodes to zero", dtype_name(type));
  }
  for (int64_t i = 0; i < n_out * n_in; ++i) W[i] = static_cast<float>(w[i]);
  if (mask_out) std::copy(mask.begin(), mask.end(), mask_out);
  return Status::ok();
}

}  // namespace ember
