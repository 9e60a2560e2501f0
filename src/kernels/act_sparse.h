// Activation-sparse decode (TEAL, issue 38): an input-channel-blocked copy
// of a weight matrix (the "column copy", made at load time) and the kernels
// that multiply it with activation rows whose zero entries are skipped, so a
// zero input channel's weights are never read. The thresholds that make the
// zeros are the model's (model/act_sparsity.h); the matmul driver applies
// them (MatmulTarget::act_threshold) and picks this path per call
// (kernels/cpu/matmul.cpp).
//
// Layout (ColumnWeights): rows in panels of kColPanelRows = 128 (the last
// panel padded with zero weights); a panel holds the matrix's blocks along
// the input in order (Q8_0: 32 inputs, Q4_K and Q6_K: 256), each a header
// of per-row scales followed by the levels of its channels, channel after
// channel, all 128 rows of a channel together:
//   Q8_0 (4352 B a block): d[128] f16; 32 channels x 128 B: u = q + 128.
//   Q4_K (18944 B): d[128] f16, dmin[128] f16, sc[8][128] u8, m[8][128] u8
//        (the 6-bit scales and mins unpacked); 256 channels x 64 B: q
//        (0..15), two rows a byte.
//   Q6_K (35072 B): d[128] f16, sc[16][128] i8; 256 channels x 128 B:
//        u = q + 32 (q in -32..31).
// In a channel's levels, byte p (p < 64) of half h holds row
//   64 h + 16 ((p % 16) / 4) + 4 (p / 16) + p % 4
// (8-bit levels: half h is bytes 64 h ..; 4-bit: half 0 in the low nibbles,
// half 1 in the high ones): the order in which the AVX-512 kernel's byte
// and word unpacks leave quads of channels, so that its int32 lanes come out
// in row order. Memory: 1.0625 (Q8_0), 0.578 (Q4_K), 1.07 (Q6_K) bytes per
// weight: Q8_0 and Q4_K about their dense size, Q6_K 1.3x.
//
// Active lists (ColActive): one activation row (its vec_dot_type, Q8_0 or
// Q8_K) as the channels whose quant is non-zero, in groups of kColGroup =
// 16 channels; each group's entries are padded with zero-valued entries (a
// channel of the group) to a multiple of 4, so quads of entries never cross
// a group, a sub-block or a block.
//
// Arithmetic contract: for every row, the kernels take per block (Q8_0) or
// sub-block (Q4_K: 32 inputs, Q6_K: 16) the exact int32 dot of weight and
// activation quants over the active entries: the integers of the dense
// kernels, since every other activation quant is 0. The block's scales are
// then applied as the dense kernels of the level do (ColContract):
//   kRef   (scalar level, kernels/ref/dot.h): no FMA, one running sum:
//            Q8_0: acc += (d_w * d_x) * isum
//            Q4_K: acc += (d * sumi) - (dmin * summ)   (d = d_w * x.d)
//            Q6_K: acc += d * sumi
//   kLanes (SIMD levels: the row lanes of kernels/ref/kquants_lanes.h and
//          the legacy lane model of tests/kernels/legacy_lanes_test.cpp):
//            Q8_0: acc = fma(isum, d_w * d_x, acc)
//            Q4_K: acc = fma(sumi, d, acc), acc_m = fma(summ, dmin, acc_m)
//            Q6_K: acc = fma(sumi, d, acc)
// with sumi = sum of sc * isum over the sub-blocks and summ = sum of m *
// (the activation's bsums over the sub-block). So a column product is
// bit-identical to the dense product of the same level on the same
// thresholded and quantized activations, whatever the batch, its split or
// the thread count: the driver may choose either path per call.
// State per (panel, token): acc[128], acc_m[128], zero before the first
// block; y[r] = acc[r] - acc_m[r] after the last (acc_m stays 0 but for
// Q4_K under kLanes; x - 0 = x).
//
// Ownership and threading: ColumnWeights owns its bytes (shared, immutable
// after make_column_weights); the kernels are pure functions of their
// arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ember {

constexpr int kColPanelRows = 128;
constexpr int kColGroup = 16;
// Most tokens of a call the column path takes (ActSkip::kOn).
constexpr int kColMaxTokens = 16;
// The default rule (ActSkip::kAuto) once the column kernels pay: at most kColAutoMaxTokens tokens and a union
// of active channels of at most kColAutoMaxUnion of the inputs. It is OFF (kColAutoEnabled in cpu/matmul.cpp
// and model/act_sparsity.cpp): the first AVX-512 kernel measured 0.24-0.46x the dense decode kernels at 40-50% sparsity
// (docs/history/2026-12-07-teal.md), so auto runs the dense kernels and builds no copies; skip forces them.
// (The bounds below are the intended rule, untested for speed.)
constexpr int kColAutoMaxTokens = 4;
constexpr double kColAutoMaxUnion = 0.8;

struct ColumnWeights {
  DType type = DType::kF32;  // the base type: kQ8_0, kQ4_K or kQ6_K
  int64_t n_in = 0, n_out = 0, n_panels = 0;
  size_t block_bytes = 0;  // one block (header + levels) of one panel
  size_t panel_bytes = 0;  // n_in / block inputs * block_bytes
  std::shared_ptr<uint8_t> data;  // [n_panels][panel_bytes], 64-byte aligned
  const uint8_t* panel(int64_t p) const { return data.get() + static_cast<size_t>(p) * panel_bytes; }
  size_t bytes() const { return panel_bytes * static_cast<size_t>(n_panels); }
};

// True for the base types with a column layout (Q8_0, Q4_K, Q6_K).
bool col_supported(DType base);
// Inputs per block of the layout (32 or 256).
int col_block_inputs(DType base);
// The column copy of w [n_out, n_in] (any layout whose base type is
// supported, interleaved ones included). Errors: another type, n_in not a
// multiple of the block, n_in > 65536 (channel ids are 16-bit).
Result<ColumnWeights> make_column_weights(const TensorView& w);

// One token's active list (see the top of this file). xq: its activation
// row (Q8_0 or Q8_K blocks), for the scales and bsums.
struct ColActive {
  const uint16_t* idx = nullptr;  // channel of each entry
  const int8_t* val = nullptr;    // its activation quant (0: padding)
  const int32_t* start = nullptr;  // [n_in / 16 + 1]: the first entry of each group
  const int32_t* gsum = nullptr;   // [n_in / 16]: sum of val over the group
  const void* xq = nullptr;
};
// Entries an active list of n_in channels may need (each group padded).
inline int64_t col_active_capacity(int64_t n_in) { return n_in + 3 * (n_in / kColGroup); }
// Builds the list of xq (act: kQ8_0 or kQ8_K, n_in values) into idx / val
// (col_active_capacity(n_in) entries), start, gsum; returns the number of
// non-zero channels.
int64_t col_active_build(DType act, const void* xq, int64_t n_in, uint16_t* idx, int8_t* val, int32_t* start,
                         int32_t* gsum);

enum class ColContract { kRef, kLanes };
// Panel `panel` of w, blocks [b0, b1) of the layout, one token: updates
// state [2 * kColPanelRows] (acc, acc_m) as the contract says.
using ColDotFn = void (*)(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1,
                          float* state);
struct ColKernel {
  ColDotFn fn = nullptr;
  bool fast = false;  // a SIMD kernel (else the scalar twin: right, not faster than dense)
};
// The kernel of the level's contract (scalar: the twin under kRef; AVX2: the
// twin under kLanes; AVX-512 and up: the AVX-512 kernel).
ColKernel col_kernel(DType base, Isa isa);
inline ColKernel col_kernel(DType base) { return col_kernel(base, active_isa()); }

// Rows [r0, r1) of the product (r0 a multiple of 128) for n_tok tokens:
// y[t * ldy + r] for t < n_tok; the panels' blocks are swept in chunks that
// stay in L2 while every token reads them.
void col_matmul_rows(const ColumnWeights& w, ColDotFn fn, const ColActive* toks, int n_tok, int64_t r0, int64_t r1,
                     float* y, int64_t ldy);

namespace ref {
// The scalar twins (kernels/ref/act_cols.cpp).
void act_cols_ref(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state);
void act_cols_lanes(const ColumnWeights& w, int64_t panel, const ColActive& a, int64_t b0, int64_t b1, float* state);
// The row of a channel's level byte p of half h (the layout above).
inline int act_cols_row(int h, int p) { return 64 * h + 16 * ((p % 16) / 4) + 4 * (p / 16) + p % 4; }
// The byte of row r (0..127) within its half; its half is r / 64.
inline int act_cols_byte(int r) {
  const int i = r % 16, k = (r % 64) / 16;
  return 16 * (i / 4) + 4 * k + i % 4;
}
}  // namespace ref

}  // namespace ember
