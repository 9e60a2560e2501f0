// Adaptive k; see adaptive_k.h.
#include "engine/spec/adaptive_k.h"

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

}  // namespace ember
