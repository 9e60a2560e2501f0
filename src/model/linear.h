// Linear: one weight matrix of the forward pass with what travels with it.
// Today a weight (any registry dtype) and an optional bias; the other fields
// are the room the compression toolkit will fill (calibrated input scales,
// act-order permutations, tensor-parallel shards, sparse formats). The
// forward pass supports only what bind_weights() produces: a layer that sets
// a field the forward pass does not implement yet is rejected at load.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember {

enum class SparsityFormat { kDense };  // 2:4 and unstructured formats follow with pruning

// How a tensor-parallel rank holds its part of the matrix.
struct LinearShard {
  enum class Split { kNone, kRows, kCols };  // rows: output features (column-parallel); cols: input
  Split split = Split::kNone;
  int rank = 0;
  int n_ranks = 1;
};

struct Linear {
  const TensorView* weight = nullptr;  // [n_out, n_in] (ne[0] = n_in)
  const float* bias = nullptr;         // [n_out], optional
  // Per-input-channel divisors applied to x before the product (AWQ scales
  // that could not be folded into a preceding op); null: none.
  const float* input_scale = nullptr;  // [n_in]
  // x columns are read in this order (GPTQ act-order without reordering the
  // stored rows); null: identity.
  const int32_t* input_perm = nullptr;  // [n_in]
  // Activation bits of the product (MatmulTarget::act_bits): 0 = the weight
  // type's activation type as it is (int8 blocks for quantized weights);
  // 4 = 4-bit levels in those blocks (Model::set_activation_bits).
  int act_bits = 0;
  LinearShard shard;
  SparsityFormat sparsity = SparsityFormat::kDense;

  explicit operator bool() const { return weight != nullptr; }
  int64_t n_in() const { return weight ? weight->ne[0] : 0; }
  int64_t n_out() const { return weight ? weight->ne[1] : 0; }
  // True when only weight (+ bias) are set: what the forward pass runs today.
  bool is_plain() const {
    return !input_scale && !input_perm && shard.split == LinearShard::Split::kNone &&
           sparsity == SparsityFormat::kDense;
  }
};

}  // namespace ember
