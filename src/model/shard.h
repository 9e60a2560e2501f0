// ModelShard: the part of a model one rank of a tensor- or pipeline-parallel
// job holds, and shard_model_file, which cuts a model file's tensors and
// config down to it before the weights are bound (Model::from_file).
//
// Tensor parallelism (Megatron split over tp_size ranks), per tensor role by
// the dimension its shape is written in (model/archs/tensors.h Dim):
//   rows split, zero-copy views into the mapped file (each rank reads only
//   its rows): Q, K, V, gate, up (column-parallel: the output features),
//   the embedding and the output head (vocabulary-parallel: rows
//   [vocab_begin, vocab_end)), Q/K/V biases;
//   columns split, copied into owned memory, whole quantization blocks
//   only: O and down (row-parallel: the input features), whose partial
//   outputs the forward pass all-reduces;
//   replicated: norms, RoPE frequencies, O's bias (added by rank 0 only).
// Attention heads go by KV-head group: rank r holds query heads [r H/N,
// (r+1) H/N) and, when N divides the KV heads, KV heads [r Hkv/N, ...);
// when the KV heads divide N (fewer KV heads than ranks) each rank holds a
// copy of the one KV head its query heads read (as vLLM does). The KV cache
// is then per rank: only its KV heads. Shapes that cannot be split N ways
// (heads, the FFN width, a column shard that would cut a quantization
// block, a QuaRot Hadamard group) are an error naming the layer and tensor.
//
// Pipeline parallelism: a rank holds layers [layer_begin, layer_end) of the
// model, renamed to 0 .. count-1 (its config has only those layers, so its
// KV cache holds only theirs); the embedding is used by the first stage and
// the output head by the last only (the others never read their bytes).
//
// Both at once: the held layers, each split as above.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/config.h"
#include "model/io/model_file.h"

namespace ember {

struct ModelShard {
  // What to hold (set by the caller).
  int tp_rank = 0, tp_size = 1;
  int layer_begin = 0, layer_end = -1;  // the whole model's layers [begin, end); -1: to the last

  // Filled by shard_model_file.
  int n_layer_total = 0;
  int n_vocab_total = 0;
  int64_t vocab_begin = 0, vocab_end = 0;  // embedding / head rows held (tensor parallelism)
  int64_t vocab_stride = 0;                // rows per rank in the head's all-gather: the largest shard

  bool tensor_parallel() const { return tp_size > 1; }
  bool pipelined() const { return layer_begin > 0 || (layer_end >= 0 && layer_end < n_layer_total); }
  bool whole() const { return tp_size == 1 && layer_begin == 0 && (layer_end < 0 || layer_end == n_layer_total); }
  bool embeds() const { return layer_begin == 0; }   // the first stage
  bool has_head() const { return layer_end < 0 || layer_end == n_layer_total; }  // the last stage
  // "tensor-parallel rank 1 of 2", "pipeline stage layers 9-17 of 18".
  std::string describe() const;
};

// Cuts `file`'s tensors and `cfg` (from the file's metadata, the whole
// model) down to `shard` as described above, and fills shard's derived
// fields. Errors name what cannot be split. `cfg` keeps the whole
// vocabulary's n_vocab; its layers are the held ones with their local head
// counts and FFN widths.
Status shard_model_file(ModelFile* file, ModelConfig* cfg, ModelShard* shard);

// Layer ranges of `n_stages` pipeline stages over layers whose costs are
// `cost` (one per layer, e.g. the bytes a decode step reads), contiguous,
// each at least one layer, minimizing the largest stage's cost. Returns
// n_stages + 1 boundaries (0 ... n_layer).
std::vector<int> balance_stages(const std::vector<double>& cost, int n_stages);

}  // namespace ember
