// TrainModel: the f32 parameters of a model being trained, one tensor per
// entry of its architecture's ArchSpec tensor lists (model/archs), laid out
// in one buffer, plus optional low-rank adapters (LoRA) on the block
// linears. Built from a loaded Model (every bound tensor dequantized), cut to
// a subset of its layers, written back as a GGUF file ember and llama.cpp
// load (f32 or bf16 matrices; LoRA merged into the weights).
//
// Norm weights of architectures that apply them as (1 + w) (Gemma: the
// ArchSpec's hf_norm_plus_one; GGUF files store 1 + w) are held as w, the
// parameter the Hugging Face model trains (TrainTensor::norm_offset = 1):
// gradients are the same, weight decay pulls w (not 1 + w) towards 0.
//
// Gradients and optimizer state are not stored here: trainable tensors get
// a grad_offset into a compact buffer of n_trainable() floats that the
// caller owns (train/optimizer.h).
//
// Ownership and threading: a plain value object; one thread mutates it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/metadata.h"
#include "core/status.h"
#include "model/archs/tensors.h"
#include "model/config.h"

namespace ember {

class Model;

enum class ParamKind : uint8_t {
  kTensor,  // a tensor of the model file
  kLoraA,   // LoRA down-projection [rank, n_in] of a block linear
  kLoraB,   // LoRA up-projection [n_out, rank] (starts at 0)
  kAux,     // trained with the model but not part of it (a distillation's hidden-state projection)
};

struct TrainTensor {
  std::string name;  // GGUF name; LoRA: "<linear>.lora_a" / ".lora_b"
  TensorRole role = TensorRole::kUnknown;
  int layer = -1;  // block index, -1 for model-level tensors
  ParamKind kind = ParamKind::kTensor;
  int n_dims = 2;
  int64_t rows = 1, cols = 1;  // [rows, cols], cols contiguous (GGML ne[0] = cols)
  int64_t offset = 0;          // into params() (floats)
  float norm_offset = 0.f;     // the file stores norm_offset + value
  bool trainable = false;
  int64_t grad_offset = -1;    // into the caller's gradient buffer; -1: frozen
  int64_t size() const { return rows * cols; }
};

class TrainModel {
 public:
  // Every tensor `model` binds (its ArchSpec lists; rope_freqs stays frozen),
  // dequantized to f32. Errors: a rotated model (QuaRot), a truncated output
  // head, weights in an interleaved in-memory layout or a type that cannot
  // be dequantized.
  static Result<std::unique_ptr<TrainModel>> from_model(const Model& model);

  // The model of layers `keep` only (ascending, distinct, in range, not
  // empty), each with its config (head counts, window, RoPE) and weights.
  Result<std::unique_ptr<TrainModel>> subset_layers(const std::vector<int>& keep) const;

  // The model with only FFN channels keep[l] (ascending, distinct, in range,
  // not empty) of each layer: their gate / up rows and down columns.
  Result<std::unique_ptr<TrainModel>> subset_ffn(const std::vector<std::vector<int>>& keep) const;

  const ModelConfig& config() const { return cfg_; }
  const std::vector<TrainTensor>& tensors() const { return tensors_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  int64_t n_params() const { return static_cast<int64_t>(params_.size()); }
  // Source layer of each layer (identity unless subset_layers).
  const std::vector<int>& source_layers() const { return source_layer_; }
  const std::vector<float>& inv_freq(int il) const { return inv_freq_[il]; }
  // Whether the output head is the token embedding (no output tensor).
  bool tied_output() const { return find(TensorRole::kOutput, -1) == nullptr; }

  // The entry of (role, layer, kind), or null. Layer -1: model-level.
  const TrainTensor* find(TensorRole r, int layer, ParamKind kind = ParamKind::kTensor) const;
  const float* param(const TrainTensor* t) const { return t ? params_.data() + t->offset : nullptr; }
  float* param(const TrainTensor* t) { return t ? params_.data() + t->offset : nullptr; }

  // Low-rank adapters on every block linear (Q, K, V, O, gate, up, down):
  // y = x W^T + (alpha / rank) (x A^T) B^T, A normal(0, 1 / sqrt(n_in)) from
  // `seed`, B = 0. Call before set_trainable. Error: rank < 1 or adapters
  // already there.
  Status add_lora(int rank, float alpha, uint64_t seed);
  int lora_rank() const { return lora_rank_; }
  float lora_scale() const { return lora_rank_ > 0 ? lora_alpha_ / static_cast<float>(lora_rank_) : 0.f; }

  // An auxiliary tensor [rows, cols] (ParamKind::kAux; layer -1, role
  // kUnknown; never written to the GGUF) with the given values; returns it.
  const TrainTensor* add_aux(const std::string& name, int64_t rows, int64_t cols, const std::vector<float>& values);
  const TrainTensor* find_aux(const std::string& name) const;

  // Marks the tensors `pred` selects trainable (rope_freqs never) and lays
  // out their gradient offsets; returns the number of trainable values.
  int64_t set_trainable(const std::function<bool(const TrainTensor&)>& pred);
  int64_t n_trainable() const { return n_trainable_; }

  // The GGUF file of this model: `base` (the metadata of the file the model
  // came from) with block_count, head counts and FFN widths (one value, or
  // llama.cpp's per-layer arrays when layers differ), per-layer arrays
  // re-indexed after subset_layers (Gemma 3's sliding-window pattern as one
  // flag per layer then), general.file_type; matrices in `type` (F32 or
  // BF16), norms, biases and RoPE factors in f32, norms with their offset
  // added back, LoRA adapters merged into their weights. The file is
  // written next to `path` and renamed into place.
  Status write_gguf(const Metadata& base, DType type, const std::string& path) const;

  // A 64-bit digest of the config and the tensor list (names, shapes,
  // kinds, trainable flags): a checkpoint names the model it belongs to.
  uint64_t layout_digest() const;
  // A 64-bit digest of the values of the frozen tensors.
  uint64_t frozen_digest() const;

 private:
  TrainModel() = default;
  void index();
  int64_t add_tensor(TrainTensor t);  // appends, returns its offset

  ModelConfig cfg_;
  std::vector<TrainTensor> tensors_;
  std::vector<float> params_;
  std::vector<std::vector<float>> inv_freq_;  // [n_layer][n_rot / 2]
  std::vector<int> source_layer_;
  int lora_rank_ = 0;
  float lora_alpha_ = 0.f;
  int64_t n_trainable_ = 0;
  // (layer + 1) * kinds + kind -> role -> index into tensors_ (-1: absent).
  std::vector<std::array<int, kNumTensorRoles>> index_;
};

// FNV-1a 64 over 8-byte words and the tail bytes, continuing from h
// (checkpoints, caches and digests; not the byte-wise FNV's values).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

}  // namespace ember
