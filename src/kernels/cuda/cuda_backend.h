// The CUDA Backend (kernels/backend.h) over the op API of kernels/cuda/ops.h:
// what ForwardContext and the model runner run on with `--device cuda`.
//
// Memory: alloc() gives device memory (the forward pass's residual stream
// and scratch, the KV pool's pages: host_memory() is false). Every op also
// takes host pointers (a host buffer is copied to the device before the op
// and, when the op writes it, back after it): the step's positions and
// sequence ids, the RoPE tables and the logits come so, as do the buffers
// of the backend op tests. Model parameters handed as plain pointers (norm
// weights, biases, RoPE frequencies) are uploaded once and kept, re-checked
// against the host bytes at each use (an address reused for other bytes
// is uploaded again). Weight matrices are uploaded in their GGUF block
// layout when the engine is made (upload_weights: all of them, after
// checking they fit in the device's free memory; an error says the bytes
// needed and free), else on first use (or by prepare_weights), keyed by
// their data pointer with a shape and sampled-bytes check; the backends
// one factory makes share them (a draft over the target's weights uploads
// nothing more). The logits rows come back into page-locked host memory
// (alloc_host), and the small per-step inputs (positions, sequence ids,
// page tables, token ids) go out from page-locked copies (InputCache).
//
// Timing (times()): the device's span of each step between its first op and
// sync() (two events), and the host's wall time in copies, for `ember bench
// throughput`'s CPU-side overhead per step.
//
// Arithmetic (each op's contract is in ops.h's kernels): a matmul step of
// fewer than gemm_min_tokens tokens runs the mat-vec (int8 activations, the
// CPU's activation types, rows_math.h), a larger one dequantized f16 tiles
// and cuBLAS; F32 weights cuBLAS in f32. Each is batch-invariant on its
// own; a sequence's bits change where a step crosses gemm_min_tokens
// (gemm_min_tokens 0: the mat-vec always, invariant at every batch size).
//
// Errors: ops return nothing (Backend), so the first error of a step (an op
// the device lacks: Hadamard rotations, MoE, 4-bit or sparse activations,
// q8 / q4 / q4c KV pages, attention sinks; a failed launch, copy or
// allocation) is kept, the step's later ops are skipped, and sync() returns
// it: the forward pass fails the step with that Status, never an abort.
//
// Ownership and threading: one host thread at a time (the engine thread);
// work is queued on its own stream.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"
#include "kernels/backend.h"

namespace ember::cuda {

struct CudaBackendOptions {
  // Matmul steps of at least this many tokens use the f16 tiles and cuBLAS
  // (prefill); fewer, the mat-vec (decode). 0: the mat-vec always.
  int gemm_min_tokens = 32;
  // Device scratch for the dequantized weight tiles (a tile stays in L2).
  size_t tile_scratch_bytes = size_t{32} << 20;
  // Decode matmuls as CUDA graphs: a mat-vec matmul call over the backend's
  // own buffers (the forward pass's Q/K/V, output, gate/up, down, head) is
  // captured once per token count (the batch-size bucket) and call site,
  // and replayed after: one launch for its activation quantization and its
  // targets' mat-vecs. The same kernels in the same order: the same bits
  // (CudaBackendOps.DecodeGraphsReplayTheEagerBits). Off by default until
  // a GPU run shows it right and faster (docs/cuda.md).
  bool decode_graphs = false;
};
// The defaults, with EMBER_CUDA_GEMM_MIN_TOKENS (an integer >= 0) and
// EMBER_CUDA_GRAPHS (1: decode_graphs on) applied.
CudaBackendOptions cuda_backend_options_from_env();

// A CUDA backend on the current device (device 0 unless the process chose
// another); an error naming the reason where there is no driver or GPU.
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& o = {});
// The factory for EngineConfig::backend: each call makes a CUDA backend;
// the backends of one factory share the device copies of the weights.
BackendFactory cuda_backend_factory(const CudaBackendOptions& o = {});
// The CUDA graphs `b` captured so far (CudaBackendOptions::decode_graphs);
// 0 for another backend.
int64_t cuda_graphs_captured(const Backend& b);
// Device bytes of the weight matrices b's factory holds (shared by the
// backends one factory makes); 0 for another backend.
size_t cuda_weight_bytes(const Backend& b);

}  // namespace ember::cuda
