// Per-ISA table of the ops that do not depend on a weight type: the row ops
// of kernels/ops.h, softcap, the Hadamard transform (kernels/hadamard.h), and ragged attention (the registry,
// kernels/registry.h, is the table of the per-dtype ones). Built once, like
// the registry: the scalar level holds the reference twins (kernels/ref/,
// attention row-parallel over the pool), AVX2 the x86 kernels
// (kernels/cpu/avx2/), and a level inherits every entry it does not set from
// the level below (AVX-512 sets only attention). The public
// functions of kernels/ops.h and kernels/attention.h dispatch through
// op_table() at the active level, so EMBER_ISA=scalar makes all of them
// scalar. Internal to the CPU backend.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/hadamard.h"
#include "kernels/ops.h"

namespace ember {

struct OpTable {
  // One field per op, typed from its public declaration (kernels/ops.h,
  // kernels/hadamard.h, kernels/attention.h).
#define EMBER_OP_FIELD(op) decltype(&::ember::op) op = nullptr;
  EMBER_ROW_OPS(EMBER_OP_FIELD)
  EMBER_OP_FIELD(hadamard_row)
  // Ragged attention with the contract of kernels/attention.h, and the
  // scratch (floats) it needs.
  EMBER_OP_FIELD(attention_scratch_floats)
  EMBER_OP_FIELD(attention_ragged)
#undef EMBER_OP_FIELD
};

// Ops at the given level (clamped to what the CPU supports).
const OpTable& op_table(Isa isa);
inline const OpTable& op_table() { return op_table(active_isa()); }

}  // namespace ember
