// Adaptive k; see adaptive_k.h.
#include "engine/speculative/adaptive_k.h"

namespace ember {

void spec_observe(SpecAcceptance* a, int k, int accepted) {
  a->s = a->s * kSpecDecay + accepted;
  a->f = a->f * kSpecDecay + (accepted < k ? 1.0 : 0.0);
}

void spec_idle(SpecAcceptance* a) {
  a->s *= kSpecDecay;
  a->f *= kSpecDecay;
}

int spec_choose_k(double a, int k_max, double c_draft, double c_verify) {
  int best = 0;
  double best_ratio = 1.0, e = 1.0, ak = 1.0;
  for (int k = 1; k <= k_max; ++k) {
    ak *= a;
    e += ak;  // E(k) = 1 + a + ... + a^k
    const double ratio = e / (1.0 + k * (c_draft + c_verify));
    if (ratio > best_ratio * (1.0 + 1e-9)) {
      best_ratio = ratio;
      best = k;
    }
  }
  return best;
}

void SpecStepCost::observe(int64_t n, double t) {
  const double x = static_cast<double>(n);
  w = w * kDecay + 1;
  sx = sx * kDecay + x;
  sy = sy * kDecay + t;
  sxx = sxx * kDecay + x * x;
  sxy = sxy * kDecay + x * t;
}

namespace {
// The fit's (a, b), false while the positions seen do not vary.
bool fit(const SpecStepCost& c, double* a, double* b) {
  const double var = c.w * c.sxx - c.sx * c.sx;
  if (c.w < 2 || !(var > 1e-6 * c.w * c.w)) return false;
  *b = (c.w * c.sxy - c.sx * c.sy) / var;
  *a = (c.sy - *b * c.sx) / c.w;
  return true;
}
}  // namespace

double SpecStepCost::one_token_seconds() const {
  double a = 0, b = 0;
  if (!fit(*this, &a, &b)) return w > 0 && sx > 0 ? sy / sx : 0;  // seconds per position so far
  return a + b > 0 ? a + b : 0;
}

double SpecStepCost::verify_cost(double fallback) const {
  double a = 0, b = 0;
  if (!fit(*this, &a, &b)) return fallback;
  if (b <= 0) return 0;
  if (a + b <= 0) return 4;
  const double c = b / (a + b);
  return c > 4 ? 4 : c;
}

}  // namespace ember
