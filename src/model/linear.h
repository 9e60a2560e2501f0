// Linear: one weight matrix of the forward pass with what travels with it:
// a weight (any registry dtype), an optional bias, the activation bits of
// its product, and the tensor-parallel shard a rank holds (set by
// Model::from_file for a sharded model, model/shard.h: the weight is then the
// shard's own rows or columns). A shard in a model that does not hold that
// shard is rejected at load (check_forward_support).
#pragma once

#include <cstdint>

#include <memory>

#include "core/tensor.h"
#include "kernels/backend.h"

namespace ember {

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
  // Activation bits of the product (MatmulTarget::act_bits): 0 = the weight
  // type's activation type as it is (int8 blocks for quantized weights);
  // 4 = 4-bit levels in those blocks (Model::set_activation_bits).
  int act_bits = 0;
  LinearShard shard;
  // Activation sparsity (model/act_sparsity.h; kernels/backend.h
  // MatmulTarget): the product reads x * [|x| > act_threshold] (0: off);
  // cols, an input-channel-blocked copy of the weight made at load time
  // (Model::build_activation_columns), lets decode skip zero inputs.
  float act_threshold = 0.0f;
  std::shared_ptr<const ColumnWeights> cols;
  ActSkip act_skip = ActSkip::kAuto;

  explicit operator bool() const { return weight != nullptr; }
  int64_t n_in() const { return weight ? weight->ne[0] : 0; }
  int64_t n_out() const { return weight ? weight->ne[1] : 0; }
  // True when the whole matrix is held (no shard).
  bool is_plain() const { return shard.split == LinearShard::Split::kNone; }
};

}  // namespace ember
