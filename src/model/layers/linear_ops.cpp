// Shared-input linears through one Backend::matmul call; see linear_ops.h.
#include "model/layers/linear_ops.h"

#include "core/check.h"

namespace ember {

void run_linears(Backend& backend, ForwardObserver* observer, int layer, const float* x, int64_t ldx, int64_t n,
                 const LinearOut* outs, int n_outs) {
  EMBER_DCHECK(n_outs >= 1 && n_outs <= kMaxSharedLinears);
  MatmulTarget targets[kMaxSharedLinears];
  for (int i = 0; i < n_outs; ++i) {
    const Linear& l = *outs[i].lin;
    EMBER_DCHECK(l.weight && l.n_in() == outs[0].lin->n_in());  // a shard is a plain matrix of its shape
    if (observer) observer->on_linear_input(layer, outs[i].role, x, ldx, n, l.n_in());
    targets[i] = MatmulTarget{l.weight, outs[i].y, outs[i].ldy, l.act_bits, l.act_threshold, l.cols.get(), l.act_skip};
  }
  backend.matmul(x, ldx, n, targets, n_outs);
  for (int i = 0; i < n_outs; ++i)
    if (outs[i].lin->bias) backend.add_bias(outs[i].y, outs[i].ldy, n, outs[i].lin->n_out(), outs[i].lin->bias);
}

}  // namespace ember
