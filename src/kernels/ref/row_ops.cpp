// Scalar reference row ops; see row_ops.h.
#include "kernels/ref/row_ops.h"

#include <algorithm>
#include <cmath>

#include "quant/quantize.h"

namespace ember::ref {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCoef = 0.044715;

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCoef * x * x * x))); }

// sum_i exp(x[i] - mx) in double, in index order.
double sum_exp(const float* x, int64_t n, double mx) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - mx);
  return s;
}

}  // namespace

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * (w ? static_cast<double>(w[i]) : 1.0));
}

void rope_angles(float pos, const float* inv_freq, int n_rot, float* cos_t, float* sin_t) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const float theta = pos * inv_freq[i];
    cos_t[i] = static_cast<float>(std::cos(static_cast<double>(theta)));
    sin_t[i] = static_cast<float>(std::sin(static_cast<double>(theta)));
  }
}

void rope_head(float* x, int n_rot, RopeStyle style, const float* cos_t, const float* sin_t) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    // kNormal pairs (2i, 2i + 1); kNeox pairs (i, i + half).
    const int a = style == RopeStyle::kNormal ? 2 * i : i;
    const int b = style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
    const double x0 = x[a], x1 = x[b], c = cos_t[i], s = sin_t[i];
    x[a] = static_cast<float>(x0 * c - x1 * s);
    x[b] = static_cast<float>(x0 * s + x1 * c);
  }
}

float max_row(const float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;  // NaNs never win
  return mx;
}

float softmax_row(float* x, int64_t n) {
  const float mx = max_row(x, n);
  const double sum = sum_exp(x, n, mx);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
  return mx;
}

double log_sum_exp_row(const float* x, int64_t n) {
  const float mx = max_row(x, n);
  return mx + std::log(sum_exp(x, n, mx));
}

void exp_shifted_row(float* x, int64_t n, float mx) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx));
}

void silu_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(silu(x[i]));
}

void gelu_tanh_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(gelu_tanh(x[i]));
}

void swiglu_row(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = static_cast<float>(silu(gate[i]) * up[i]);
}

void swiglu_oai_row(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = std::min(gate[i], kSwiGluOaiLimit);
    const double y = std::clamp(up[i], -kSwiGluOaiLimit, kSwiGluOaiLimit);
    gate[i] = static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(kSwiGluOaiAlpha) * x)) * (y + 1.0));
  }
}

void geglu_tanh_row(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = static_cast<float>(gelu_tanh(gate[i]) * up[i]);
}

void softcap_row(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

void add_row(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_row(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void embed_rows(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) {
  const int64_t dim = table.ne[0];
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * dim;
    dequantize_row_ref(table.type, table.row(ids[t]), o, dim);
    if (scale != 1.f) scale_row(o, scale, dim);
  }
}

}  // namespace ember::ref
