// The speculative-sampling rejection rule; see rejection.h.
#include "engine/speculative/rejection.h"

#include <algorithm>

namespace ember {

namespace {
double residual(const float* p, const float* q, int32_t draft, int j) {
  const double qj = q ? q[j] : (j == draft ? 1.0 : 0.0);
  return std::max(0.0, static_cast<double>(p[j]) - qj);
}
}  // namespace

int32_t spec_residual_sample(const float* p, const float* q, int32_t draft, int n, double u) {
  double total = 0;
  for (int j = 0; j < n; ++j) total += residual(p, q, draft, j);
  const bool use_p = !(total > 0);
  if (use_p) {
    total = 0;
    for (int j = 0; j < n; ++j) total += p[j];
  }
  const double r = u * total;
  double cum = 0;
  int32_t last = 0;
  for (int j = 0; j < n; ++j) {
    const double w = use_p ? p[j] : residual(p, q, draft, j);
    if (w <= 0) continue;
    cum += w;
    last = j;
    if (r < cum) return j;
  }
  return last;
}

}  // namespace ember
