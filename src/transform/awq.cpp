// AWQ scale search for one group of matrices; see awq.h.
#include "transform/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/quantize.h"
#include "quant/quantize_imatrix.h"

namespace ember {

std::vector<float> awq_scales(const float* mean_abs, int64_t n_in, float alpha) {
  std::vector<float> s(static_cast<size_t>(n_in));
  float lo = std::numeric_limits<float>::infinity(), hi = 0.f;
  for (int64_t j = 0; j < n_in; ++j) {
    s[j] = std::max(std::pow(std::max(mean_abs[j], 0.f), alpha), 1e-4f);
    lo = std::min(lo, s[j]), hi = std::max(hi, s[j]);
  }
  const float norm = std::sqrt(hi * lo);
  for (float& v : s) v /= norm;
  return s;
}

bool awq_can_round(DType t, bool imatrix_rounding) {
  return imatrix_rounding ? can_quantize_imatrix(t) : can_quantize(t) && dtype_block_size(t) > 1;
}

namespace {

Status check_group(int64_t n_tok, int64_t n_in, const std::vector<AwqMatrix>& mats, bool imatrix_rounding) {
  if (mats.empty()) return Status::error("AWQ: a group without matrices");
  if (n_tok < 1 || n_in < 1) return Status::error("AWQ: no calibration rows");
  for (const AwqMatrix& m : mats) {
    if (!awq_can_round(m.target, imatrix_rounding)) return Status::errorf("AWQ cannot round to {}", dtype_name(m.target));
    if (n_in % dtype_block_size(m.target) != 0)
      return Status::errorf("AWQ: rows of {} are not a multiple of {}'s block size", n_in, dtype_name(m.target));
    if (!m.w || m.n_out < 1) return Status::error("AWQ: an empty matrix");
  }
  return Status::ok();
}

}  // namespace

Result<double> awq_output_error(const float* x, int64_t n_tok, int64_t n_in, const float* mean_sq,
                                const std::vector<AwqMatrix>& mats, const float* s, bool imatrix_rounding,
                                Backend& backend, ThreadPool& pool) {
  EMBER_RETURN_IF_ERROR(check_group(n_tok, n_in, mats, imatrix_rounding));
  std::vector<float> qw;
  if (imatrix_rounding) {
    qw.resize(static_cast<size_t>(n_in));
    for (int64_t j = 0; j < n_in; ++j) qw[j] = mean_sq[j] / (s[j] * s[j]);
  }
  double err = 0;
  std::vector<float> d, e;
  for (const AwqMatrix& m : mats) {
    // d = W - deq(q(W diag(s))) diag(1/s): the error of the effective weights.
    d.resize(static_cast<size_t>(m.n_out * n_in));
    const size_t row_bytes = dtype_row_size(m.target, n_in);
    pool.parallel_for(m.n_out, 8, [&](int64_t r0, int64_t r1, int) {
      std::vector<float> ws(static_cast<size_t>(n_in)), back(static_cast<size_t>(n_in));
      std::vector<uint8_t> q(row_bytes);
      for (int64_t r = r0; r < r1; ++r) {
        const float* w = m.w + r * n_in;
        for (int64_t j = 0; j < n_in; ++j) ws[j] = w[j] * s[j];
        if (imatrix_rounding) quantize_row_imatrix(m.target, ws.data(), q.data(), n_in, qw.data());
        else quantize_row_ref(m.target, ws.data(), q.data(), n_in);
        dequantize_row_ref(m.target, q.data(), back.data(), n_in);
        float* dr = d.data() + r * n_in;
        for (int64_t j = 0; j < n_in; ++j) dr[j] = w[j] - back[j] / s[j];
      }
    });
    // E = X d^T: [n_tok, n_out].
    TensorView dv;
    dv.type = DType::kF32;
    dv.n_dims = 2;
    dv.ne[0] = n_in, dv.ne[1] = m.n_out;
    dv.data = d.data();
    dv.nbytes = d.size() * sizeof(float);
    e.resize(static_cast<size_t>(n_tok * m.n_out));
    backend.matmul(dv, x, n_in, e.data(), m.n_out, n_tok);
    double sum = 0;
    for (float v : e) sum += static_cast<double>(v) * v;
    err += sum;
  }
  return err;
}

Result<AwqSearchResult> awq_search_scales(const float* x, int64_t n_tok, int64_t n_in, const float* mean_abs,
                                          const float* mean_sq, const std::vector<AwqMatrix>& mats,
                                          const AwqSearchOptions& o, Backend& backend, ThreadPool& pool) {
  if (o.n_grid < 1 || o.n_grid > 1000) return Status::errorf("AWQ grid of {} points is not in [1, 1000]", o.n_grid);
  EMBER_RETURN_IF_ERROR(check_group(n_tok, n_in, mats, o.imatrix_rounding));
  AwqSearchResult best;
  best.error = std::numeric_limits<double>::infinity();
  for (int i = 0; i < o.n_grid; ++i) {
    const float alpha = static_cast<float>(i) / static_cast<float>(o.n_grid);
    std::vector<float> s = awq_scales(mean_abs, n_in, alpha);
    auto err = awq_output_error(x, n_tok, n_in, mean_sq, mats, s.data(), o.imatrix_rounding, backend, pool);
    if (!err) return err.status();
    if (i == 0) best.error_plain = *err;
    if (*err < best.error) best.error = *err, best.alpha = alpha, best.scales = std::move(s);
  }
  return best;
}

Result<AwqClipResult> awq_clip_search(float* w, int64_t n_out, int64_t n_in, DType target, const float* x,
                                      int64_t n_tok, const float* importance, int grid, float max_shrink,
                                      ThreadPool& pool) {
  const bool weighted = importance != nullptr;
  if (!awq_can_round(target, weighted)) return Status::errorf("AWQ clipping cannot round to {}", dtype_name(target));
  const int64_t B = dtype_block_size(target);
  if (n_in % B != 0) return Status::errorf("AWQ clipping: rows of {} are not a multiple of {}'s block", n_in, dtype_name(target));
  if (n_tok < 1) return Status::error("AWQ clipping: no sample rows");
  if (grid < 1 || grid > 1000 || !(max_shrink > 0.f && max_shrink < 1.f))
    return Status::errorf("AWQ clipping grid {} / max shrink {} out of range", grid, max_shrink);
  const int64_t nb = n_in / B;
  int n_ratio = 0;
  while (n_ratio < grid && static_cast<float>(n_ratio) / static_cast<float>(grid) < max_shrink) ++n_ratio;
  // G_b for every block, in double then float: [nb][B][B].
  std::vector<float> gram(static_cast<size_t>(nb * B * B));
  pool.parallel_for(nb, 1, [&](int64_t b0, int64_t b1, int) {
    std::vector<double> acc(static_cast<size_t>(B * B));
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t n = 0; n < n_tok; ++n) {
        const float* xr = x + n * n_in + b * B;
        for (int64_t i = 0; i < B; ++i) {
          const double xi = xr[i];
          double* a = acc.data() + i * B;
          for (int64_t j = 0; j < B; ++j) a[j] += xi * xr[j];
        }
      }
      float* g = gram.data() + b * B * B;
      for (int64_t k = 0; k < B * B; ++k) g[k] = static_cast<float>(acc[k]);
    }
  });
  const size_t block_bytes = dtype_row_size(target, B);
  std::vector<double> err_row(static_cast<size_t>(n_out)), plain_row(static_cast<size_t>(n_out));
  std::vector<int64_t> clipped_row(static_cast<size_t>(n_out));
  pool.parallel_for(n_out, 4, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> c(static_cast<size_t>(B)), back(static_cast<size_t>(B)), d(static_cast<size_t>(B)),
        best(static_cast<size_t>(B));
    std::vector<uint8_t> q(block_bytes);
    for (int64_t r = r0; r < r1; ++r) {
      double row_err = 0, row_plain = 0;
      int64_t row_clipped = 0;
      for (int64_t b = 0; b < nb; ++b) {
        float* wb = w + r * n_in + b * B;
        const float* g = gram.data() + b * B * B;
        float amax = 0.f;
        for (int64_t i = 0; i < B; ++i) amax = std::max(amax, std::fabs(wb[i]));
        double best_e = std::numeric_limits<double>::infinity();
        int best_k = 0;
        for (int k = 0; k < n_ratio; ++k) {
          const float lim = amax * (1.f - static_cast<float>(k) / static_cast<float>(grid));
          for (int64_t i = 0; i < B; ++i) c[i] = std::clamp(wb[i], -lim, lim);
          if (weighted) quantize_row_imatrix(target, c.data(), q.data(), B, importance + b * B);
          else quantize_row_ref(target, c.data(), q.data(), B);
          dequantize_row_ref(target, q.data(), back.data(), B);
          for (int64_t i = 0; i < B; ++i) d[i] = back[i] - wb[i];
          double e = 0;
          for (int64_t i = 0; i < B; ++i) {
            const float* gi = g + i * B;
            float t = 0.f;
            for (int64_t j = 0; j < B; ++j) t += gi[j] * d[j];
            e += static_cast<double>(d[i]) * t;
          }
          if (k == 0) row_plain += e;
          if (e < best_e) best_e = e, best_k = k, std::copy(c.begin(), c.end(), best.begin());
          if (amax == 0.f) break;
        }
        row_err += best_e;
        if (best_k > 0) ++row_clipped, std::copy(best.begin(), best.end(), wb);
      }
      err_row[r] = row_err, plain_row[r] = row_plain, clipped_row[r] = row_clipped;
    }
  });
  AwqClipResult res;
  res.blocks = n_out * nb;
  for (int64_t r = 0; r < n_out; ++r)
    res.error += err_row[r], res.error_plain += plain_row[r], res.clipped += clipped_row[r];
  return res;
}

}  // namespace ember
