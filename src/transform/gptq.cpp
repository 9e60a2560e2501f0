// GPTQ on GGUF blocks; see gptq.h.
#include "transform/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "quant/block_levels.h"
#include "quant/block_utils.h"
#include "quant/quantize_imatrix.h"
#include "transform/f64_vec.h"

namespace ember {

std::optional<GptqOptions::Scales> gptq_scales_from_name(std::string_view name) {
  if (name == "dynamic") return GptqOptions::Scales::kDynamic;
  if (name == "static") return GptqOptions::Scales::kStatic;
  if (name == "refit") return GptqOptions::Scales::kRefit;
  return std::nullopt;
}

bool gptq_supports(DType t) { return has_block_levels(t) && can_quantize_imatrix(t); }

bool gptq_inverse_cholesky(const double* H, int64_t n, double lambda, double* u, ThreadPool* pool) {
  // A = H + lambda I = R R^T with R upper triangular (Cholesky from the
  // bottom-right corner); then A^-1 = R^-T R^-1, so U = R^-1. Each R_ij of a
  // column j, and each row of U, is computed by one thread in a fixed order,
  // so the result does not depend on the thread count.
  const bool par = pool && pool->size() > 1;
  constexpr int64_t kParallelWork = 1 << 15;  // multiply-adds of a column below which one thread does it
  std::vector<double> R(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = n - 1; j >= 0; --j) {
    const double* rj = &R[j * n + j + 1];
    const int64_t len = n - j - 1;
    const double s = H[j * n + j] + lambda - f64_dot(rj, rj, len);
    if (!(s > 0) || !std::isfinite(s)) return false;
    const double d = std::sqrt(s);
    R[j * n + j] = d;
    auto column = [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) R[i * n + j] = (H[i * n + j] - f64_dot(&R[i * n + j + 1], rj, len)) / d;
    };
    if (par && j * len >= kParallelWork)
      pool->parallel_for(j, 32, column);
    else
      column(0, j, 0);
  }
  // U R = I, row by row: U_ii = 1 / R_ii, U_ij = -(sum_{k<j} U_ik R_kj) / R_jj.
  auto rows = [&](int64_t i0, int64_t i1, int) {
    std::vector<double> acc(static_cast<size_t>(n));
    for (int64_t i = i0; i < i1; ++i) {
      double* ui = u + i * n;
      std::fill(ui, ui + n, 0.0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = i; k < n; ++k) {
        ui[k] = k == i ? 1.0 / R[i * n + i] : -acc[k] / R[k * n + k];
        f64_add_scaled(&acc[k + 1], ui[k], &R[k * n + k + 1], n - k - 1);
      }
    }
  };
  if (par && n >= 64)
    pool->parallel_for(n, 8, rows);
  else
    rows(0, n, 0);
  return true;
}

Status gptq_prepare_hinv(const double* H, int64_t n_in, double damp, bool act_order, GptqHinv* out,
                         ThreadPool* pool) {
  // Dead columns, the processing order and the Hessian in that order.
  std::vector<double>& diag = out->diag;
  diag.assign(static_cast<size_t>(n_in), 0.0);
  std::vector<char>& dead = out->dead;
  dead.assign(static_cast<size_t>(n_in), 0);
  double mean_diag = 0;
  for (int64_t i = 0; i < n_in; ++i) {
    diag[i] = H[i * n_in + i];
    dead[i] = !(diag[i] > 0);
    mean_diag += dead[i] ? 1.0 : diag[i];
  }
  mean_diag /= static_cast<double>(n_in);
  std::vector<int64_t>& perm = out->perm;
  perm.assign(static_cast<size_t>(n_in), 0);
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return diag[a] > diag[b]; });
  std::vector<double> Hp(static_cast<size_t>(n_in * n_in));
  for (int64_t i = 0; i < n_in; ++i)
    for (int64_t j = 0; j < n_in; ++j) {
      const int64_t a = perm[i], b = perm[j];
      Hp[i * n_in + j] = (dead[a] || dead[b]) ? (a == b ? 1.0 : 0.0) : H[a * n_in + b];
    }
  std::vector<double>& U = out->U;
  U.assign(static_cast<size_t>(n_in * n_in), 0.0);
  double lambda = damp * mean_diag;
  bool ok = gptq_inverse_cholesky(Hp.data(), n_in, lambda, U.data(), pool);
  for (int tries = 0; !ok && tries < 6; ++tries) {
    lambda = lambda > 0 ? lambda * 10 : 1e-6 * mean_diag;
    ok = gptq_inverse_cholesky(Hp.data(), n_in, lambda, U.data(), pool);
  }
  if (!ok) return Status::error("GPTQ: the Hessian is not positive definite even with heavy dampening");
  Hp.clear();
  Hp.shrink_to_fit();
  out->mean_diag = mean_diag;
  return Status::ok();
}

Status gptq_quantize(const float* W, int64_t n_out, int64_t n_in, const double* H, DType t, const GptqOptions& o,
                     uint8_t* dst, ThreadPool& pool) {
  if (!gptq_supports(t)) return Status::errorf("GPTQ cannot write {}", dtype_name(t));
  const int64_t G = dtype_block_size(t);
  if (n_in % G != 0) return Status::errorf("row length {} is not a multiple of {}'s block size", n_in, dtype_name(t));
  if (o.damp < 0 || o.block_size < 1) return Status::error("GPTQ: dampening must be >= 0 and block size >= 1");
  const int64_t B = (std::max<int64_t>(o.block_size, G) + G - 1) / G * G;  // lazy batch, whole blocks
  const size_t row_bytes = dtype_row_size(t, n_in), block_bytes = dtype_row_size(t, G);

  GptqHinv hv;
  EMBER_RETURN_IF_ERROR(gptq_prepare_hinv(H, n_in, o.damp, o.act_order, &hv, &pool));
  const std::vector<double>& diag = hv.diag;
  const std::vector<char>& dead = hv.dead;
  const std::vector<int64_t>& perm = hv.perm;
  const std::vector<double>& U = hv.U;
  // Importance of each column for choosing block scales: diag H (dead: 0 ->
  // a tiny weight so the all-zero column cannot dominate).
  std::vector<float> qw(static_cast<size_t>(n_in));
  for (int64_t i = 0; i < n_in; ++i) qw[i] = dead[i] ? 1e-12f : static_cast<float>(diag[i]);

  pool.parallel_for(n_out, 4, [&](int64_t r0, int64_t r1, int) {
    std::vector<double> w(static_cast<size_t>(n_in)), err(static_cast<size_t>(B));
    std::vector<float> a(static_cast<size_t>(n_in)), b(static_cast<size_t>(n_in)), xg(static_cast<size_t>(G));
    std::vector<int> L(static_cast<size_t>(n_in));
    int lo, hi;
    block_level_range(t, &lo, &hi);
    // Scales of the block holding original columns [c0, c0 + G) from values x.
    auto choose_block = [&](uint8_t* row, int64_t c0, const float* x) {
      uint8_t* blk = row + (c0 / G) * block_bytes;
      quantize_row_imatrix(t, x, blk, G, qw.data() + c0);
      block_affine(t, blk, a.data() + c0, b.data() + c0);
    };
    // One error-feedback pass over row r. fixed: every block's scales are
    // already in the row; else each is chosen when the pass reaches it.
    // rounded (non-null): the value each column had when it was rounded.
    auto pass = [&](const float* wr, uint8_t* row, bool fixed, float* rounded) {
      for (int64_t p = 0; p < n_in; ++p) w[p] = dead[perm[p]] ? 0.0 : wr[perm[p]];
      for (int64_t p1 = 0; p1 < n_in; p1 += B) {
        const int64_t p2 = std::min(n_in, p1 + B);
        for (int64_t p = p1; p < p2; ++p) {
          if (!fixed && p % G == 0) {  // the block starts here: its scales from its current values
            for (int64_t e = 0; e < G; ++e) xg[e] = static_cast<float>(w[p + e]);
            choose_block(row, p, xg.data());
          }
          const int64_t c = perm[p];
          if (rounded) rounded[c] = static_cast<float>(w[p]);
          const double ac = a[c], bc = b[c];
          int l = 0;
          if (ac != 0) l = quant::nearest_int(static_cast<float>(std::clamp((w[p] - bc) / ac, lo - 1.0, hi + 1.0)));
          l = std::max(lo, std::min(hi, l));
          L[c] = l;
          const double q = ac * l + bc;
          const double* up = &U[p * n_in];
          const double e = (w[p] - q) / up[p];
          err[p - p1] = e;
          for (int64_t k = p + 1; k < p2; ++k) w[k] -= e * up[k];
        }
        for (int64_t p = p1; p < p2; ++p) {  // the lazy batch update of the later columns
          const double e = err[p - p1];
          const double* up = &U[p * n_in];
          for (int64_t k = p2; k < n_in; ++k) w[k] -= e * up[k];
        }
      }
    };
    std::vector<float> rounded(o.scales == GptqOptions::Scales::kRefit && !o.act_order ? n_in : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = W + r * n_in;
      uint8_t* row = dst + r * row_bytes;
      if (o.act_order || o.scales == GptqOptions::Scales::kStatic) {
        // Every block's scales from the original weights, up front.
        for (int64_t c0 = 0; c0 < n_in; c0 += G) {
          for (int64_t e = 0; e < G; ++e) xg[e] = dead[c0 + e] ? 0.0f : wr[c0 + e];
          choose_block(row, c0, xg.data());
        }
        pass(wr, row, true, nullptr);
      } else if (!rounded.empty()) {
        // Refit: the scales of what the first pass rounded, then a second pass with them.
        pass(wr, row, false, rounded.data());
        for (int64_t c0 = 0; c0 < n_in; c0 += G) choose_block(row, c0, rounded.data() + c0);
        pass(wr, row, true, nullptr);
      } else {
        pass(wr, row, false, nullptr);
      }
      for (int64_t c0 = 0; c0 < n_in; c0 += G) pack_levels(t, L.data() + c0, row + (c0 / G) * block_bytes);
    }
  });
  return Status::ok();
}

}  // namespace ember
