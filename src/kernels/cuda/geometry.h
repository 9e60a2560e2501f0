// Launch geometry of the CUDA kernels and the page addressing of paged
// attention, written once for the device and the host (the launchers in
// kernels/cuda/ops.cpp size grids and scratch with it; tests/cuda/ checks
// it on the host in CI: coverage, alignment, bounds).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/hd.h"
#include "kernels/cuda/rows_math.h"

namespace ember::cuda {

// ---- decode mat-vec (rows.cu): one warp per weight row, kRowsWarps warps
// per block; each warp streams its row in chunks of kRowsChunk elements
// through a kRowsStages-deep ring of shared-memory slots (cp.async, 16-byte
// copies of the 16-byte-aligned cover of the chunk's bytes).
constexpr int kRowsWarps = 4;
constexpr int kRowsStages = 3;
constexpr int kRowsMaxTokens = 8;  // tokens per launch (more: several launches)

// Bytes of one slot: a chunk's bytes plus the cover's slack (< 16 bytes on
// each side), rounded to 16.
EMBER_HD constexpr int64_t rows_slot_bytes(WType t) { return (wtype_chunk_bytes(t) + 32 + 15) / 16 * 16; }
EMBER_HD constexpr int64_t rows_smem_bytes(WType t) { return rows_slot_bytes(t) * kRowsStages * kRowsWarps; }
EMBER_HD constexpr int64_t rows_grid(int64_t n_rows) { return (n_rows + kRowsWarps - 1) / kRowsWarps; }
// The 16-byte-aligned cover [g0, g1) of bytes [b0, b1) of a buffer, as
// offsets from its 16-byte-aligned base: what a chunk's copies read. The
// buffer must be readable up to round_up(its size, 16) (uploads pad it).
EMBER_HD constexpr int64_t cover_begin(int64_t b0) { return b0 / 16 * 16; }
EMBER_HD constexpr int64_t cover_end(int64_t b1) { return (b1 + 15) / 16 * 16; }

// ---- activation quantization (convert.cu): one warp per activation block
// (kQ8_0: 32 elements, a lane each; kQ8_K: 256, eight a lane), 8 warps a
// block of threads, grid-stride over (token, block).
constexpr int kQuantWarps = 8;

// ---- dequantization (convert.cu): one thread per 32-element unit.
constexpr int kDequantThreads = 256;

// ---- paged attention (attention.cu) --------------------------------------
// Keys are taken in chunks of kAttnChunk positions aligned to position 0
// (kernels/attention.h's kAttnChunk); a block of threads stages kAttnKeyTile
// keys of one kv head at a time in shared memory, for up to kAttnMaxWarps
// query rows (one warp each).
constexpr int kAttnChunk = 256;
constexpr int kAttnKeyTile = 32;
constexpr int kAttnMaxWarps = 16;
constexpr int kAttnMaxHeadDim = 256;  // head dims: multiples of 32 up to this

// Visible key positions [lo, hi) of a query at position p (causal, and the
// sliding window when window > 0): kernels/attention.h's
// attention_visible_range, for the device.
EMBER_HD void visible_range(int64_t p, int window, int64_t* lo, int64_t* hi) {
  *hi = p + 1;
  *lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}
// Byte offset in a layer's pool of the K (or V) row of position p, kv head
// h, through one sequence's block table (page ids; ember's KvBlockPool
// layout: page b holds block_size positions of row_bytes each, head h at
// h * head_bytes within a row).
EMBER_HD int64_t kv_row_offset(const int32_t* table, int64_t p, int block_size, int64_t row_bytes, int h,
                               int64_t head_bytes) {
  const int64_t page = table[p / block_size];
  return (page * block_size + p % block_size) * row_bytes + h * head_bytes;
}

// ---- K/V stores (attention.cu kv_store) ------------------------------------
// The page elements the device reads and writes (kernels/kv_types.h's
// per-element formats).
enum class KvElem : uint8_t { kF32, kF16, kBF16 };
EMBER_HD int kv_elem_size(KvElem t) { return t == KvElem::kF32 ? 4 : 2; }
// Element i of a K or V row stored at `row` in format t: the bytes
// kv_store_row (kernels/kv_types.h) writes for it (f16 and bf16 rounded to
// nearest even, little-endian), whatever the thread that writes it.
EMBER_HD void kv_store_elem(KvElem t, float x, uint8_t* row, int64_t i) {
  if (t == KvElem::kF32) {
#if defined(__CUDA_ARCH__)
    reinterpret_cast<float*>(row)[i] = x;
#else
    std::memcpy(row + 4 * i, &x, 4);
#endif
    return;
  }
  const uint16_t h = t == KvElem::kF16 ? float_to_half(x) : float_to_bf16(x);
#if defined(__CUDA_ARCH__)
  reinterpret_cast<uint16_t*>(row)[i] = h;
#else
  std::memcpy(row + 2 * i, &h, 2);
#endif
}
// One block of kKvStoreThreads threads per (token, K or V row): thread j
// stores elements j, j + kKvStoreThreads, ... of the row.
constexpr int kKvStoreThreads = 128;

// One block of threads of the attention kernel: query rows row0 ..
// row0 + n_rows - 1 of the rows of tokens t0 .. of one sequence, rows
// numbered token-major (row r: token t0 + r / G, head h_kv * G + r % G,
// G = n_head / n_head_kv), for the kv head of blockIdx.y.
struct AttnItem {
  int32_t t0 = 0;
  int32_t row0 = 0;
  int32_t n_rows = 0;
  int32_t pad = 0;
};

// Splits a batch into items. seq_of_token (host) must list each
// sequence's tokens contiguously; tokens_per_item: tokens a block takes
// (1 for decode; more shares each staged key tile among more rows).
// Returns false (items untouched) if a sequence's tokens are not contiguous.
bool attention_items(const int32_t* seq_of_token, int64_t n_tokens, int group, int tokens_per_item,
                     std::vector<AttnItem>* items);
// Tokens per item that fill kAttnMaxWarps warps for a group size.
inline int attention_tokens_per_item(int group) { return group >= kAttnMaxWarps ? 1 : kAttnMaxWarps / group; }
// Warps per block for items of at most max_rows rows.
inline int attention_warps(int max_rows) { return max_rows < kAttnMaxWarps ? max_rows : kAttnMaxWarps; }
// Chunk slots for queries at positions < max_pos + 1, and the floats of
// split-K scratch: per (token, head, chunk) the chunk's max, sum and
// head_dim_v partial outputs.
inline int64_t attention_chunks(int64_t max_pos) { return max_pos / kAttnChunk + 1; }
inline int64_t attention_split_floats(int64_t n_tokens, int n_head, int head_dim_v, int64_t max_pos) {
  return n_tokens * n_head * attention_chunks(max_pos) * (head_dim_v + 2);
}

}  // namespace ember::cuda
