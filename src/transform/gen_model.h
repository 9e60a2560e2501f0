// Random-weight models of real architectures and shapes (`ember gen-model`):
// speed tests at realistic sizes without downloading weights.
//
// The output is a GGUF file that ember and llama.cpp both load: the
// architecture's metadata keys and tensor names as llama.cpp's converter
// writes them (the tensor list of its ArchSpec, model/archs), every 2-D
// weight in the requested type (quantized with the reference quantizers; a
// matrix whose rows do not fit the block size falls back by
// fallback_row_type, as `ember quantize` does: q4_K -> q5_0, q5_K -> q5_1,
// q6_K -> q8_0, q2_K/q3_K -> q4_0, other types -> f16), norms, biases and
// RoPE factors in f32, and a tokenizer: either the tokenizer.* keys of another model
// (e.g. the default Gemma 3 model's vocabulary) or a synthetic byte-level
// BPE vocabulary (256 byte tokens, generated merges, the architecture's
// special tokens; tokenizer.ggml.model = gpt2).
//
// Weights: normal(0, weight_std) for matrices and biases, 1 + normal(0,
// weight_std) for norm weights (RMSNorm multiplies by the stored value;
// Gemma files store 1 + w), so activations stay finite through any depth.
// The generator (wyrand, one 64-bit draw per value; the normal deviate is
// the Irwin-Hall sum of its four 16-bit parts, scaled to unit variance) is
// seeded per tensor row from (seed, tensor name, row): the file is a
// function of the shape, type and seed alone, whatever the thread count.
//
// Memory: the file is first laid out with GgufWriter (the tensor payloads
// are a read-only anonymous zero mapping, which costs no memory), then each
// tensor is generated in chunks of rows and written in place with pwrite,
// so generating an 8B model needs only a few MiB of buffers per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/gguf.h"

namespace ember {

struct GenModelShape {
  std::string name = "custom";  // shape name, written as general.name
  std::string arch;             // an ArchSpec name (model/archs/archs.h)
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // 0: n_embd / n_head
  int n_vocab = 0;
  int n_ctx = 4096;  // trained context written to the file
  double rope_base = 10000;
  double norm_eps = 1e-5;
  bool tied_embeddings = false;  // no output.weight
  bool qkv_bias = false;         // Q/K/V biases (qwen2)
  // Llama 3.1 RoPE scaling (rope_freqs.weight); factor 0: none.
  double rope_scale_factor = 0;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int rope_original_ctx = 8192;
  int sliding_window = 0;  // gemma3: window of the local layers (every 6th layer is global)
  int n_rot = 0;           // rotated dimensions per head (0: the head size; Phi-4-mini: 3/4 of it)
  // LongRoPE (phi3): rope_factors_short / _long (synthetic: 1 ... 1.1 and
  // 1 ... n_ctx / original), original context rope_original_ctx.
  bool longrope = false;
  // YaRN (rope.scaling.type yarn) with this factor over rope_original_ctx,
  // magnitude 1 (yarn_log_multiplier 1, Ministral 3); 0: none.
  double yarn_factor = 0;
  // With YaRN: rope.scaling.yarn_log_multiplier (1: magnitude 1, Ministral
  // 3); 0: not written (magnitude 0.1 ln(factor) + 1, gpt-oss).
  double yarn_log_multiplier = 1;
  float attn_temp_scale = 0;  // <arch>.attention.temperature_scale (mistral3); 0: none
  // Mixture of experts (architectures whose spec lists experts: llama as
  // Mixtral, qwen2moe, qwen3moe, olmoe): ffn_gate_inp router in f32,
  // ffn_{gate,up,down}_exps [.., .., n_expert] of width n_ff_exp (0: n_ff;
  // Mixtral and OLMoE files give the expert width as feed_forward_length,
  // so there n_ff_exp is n_ff), a shared expert of width n_ff_shexp
  // (qwen2moe: 0 means n_ff). 0 experts: dense FFN (an error for the
  // MoE-only architectures).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int n_ff_shexp = 0;

  int64_t head_size() const { return head_dim > 0 ? head_dim : (n_head > 0 ? n_embd / n_head : 0); }
  int64_t rot_dims() const { return n_rot > 0 ? n_rot : head_size(); }
};

// The built-in shapes: llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, qwen2.5-1.5b,
// qwen3-0.6b, gemma-3-270m, phi-3.5-mini, phi-4-mini, ministral-3-3b,
// smollm3-3b, olmo-2-1b; Mixture-of-Experts: olmoe-1b-7b, qwen3-30b-a3b,
// qwen3-30b-a3b-12l (its first 12 of 48 layers), mixtral-8x7b-4l (4 of 32
// layers), mixtral-tiny (8 layers of 8 experts, 2 used, at a small size),
// gpt-oss-20b and gpt-oss-20b-6l (its first 6 of 24 layers). Type mxfp4
// writes the experts in MXFP4 and the other matrices in q8_0 (llama-quantize's
// MXFP4_MOE).
std::vector<std::string> gen_model_shape_names();
Result<GenModelShape> gen_model_shape(const std::string& name);
// Defaults for an explicit --arch (its ArchSpec's GenModelDefaults; sizes 0).
Result<GenModelShape> gen_model_arch_defaults(const std::string& arch);
// Checks sizes and consistency (head counts, even head size, limits).
Status validate_gen_model_shape(const GenModelShape& s);

struct GenModelOptions {
  DType type = DType::kQ8_0;  // type of the 2-D weights
  uint64_t seed = 0;
  float weight_std = 0.02f;
  // tokenizer.* and ember.tokenizer.* keys to copy (nullptr: a synthetic byte-level BPE
  // vocabulary). Its token count overrides shape.n_vocab.
  const Metadata* vocab = nullptr;
  // Called after each tensor with the payload bytes written so far and in all.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct GenModelStats {
  int64_t n_tensors = 0;
  int64_t n_params = 0;
  uint64_t file_bytes = 0;
  int n_vocab = 0;
  std::vector<std::string> fallbacks;  // "name: q4_K -> q5_0"
};

// Writes the model to `path` (removed again on failure).
Result<GenModelStats> write_random_model(const GenModelShape& shape, const GenModelOptions& opts,
                                         const std::string& path, ThreadPool& pool);

// Synthetic byte-level BPE vocabulary of exactly n_vocab tokens as GGUF
// tokenizer keys, of the kind the architecture's spec names: Llama 3 special
// tokens and pre = "llama-bpe" (BOS added), the Qwen special tokens and pre =
// "qwen2" (no BOS), or Phi-3's special tokens and pre = "llama-bpe" (no BOS;
// llama.cpp looks <unk>, <s>, </s> and <|endoftext|> up in models named
// phi3). Unknown architecture: an error.
Status synthetic_bpe_vocab(const std::string& arch, int n_vocab, Metadata* out);

}  // namespace ember
