// Activation-sparse decode (TEAL, issue 38): an input-channel-blocked copy
// of a weight matrix (the "column copy", made at load time) and the kernels
// that multiply it with activation rows whose zero entries are skipped, so a
// zero input channel's weights are never read. The thresholds that make the
// zeros are the model's (model/act_sparsity.h); the matmul driver applies
// them (MatmulTarget::act_threshold) and picks this path per call
// (kernels/cpu/matmul.cpp).
//
// Layout (ColumnWeights): rows in panels of panel_rows rows (a multiple of
// 128, at most kColMaxPanelRows = 2048; n_out / n_panels rounded up, the
// last panel padded with zero weights), so that an active channel's levels
// are one long contiguous stream (2 KiB for 2048 rows of 8-bit levels) that
// the hardware prefetcher follows. A panel holds the matrix's blocks along
// the input in order (Q8_0: 32 inputs, Q4_K and Q6_K: 256), each a header of
// per-row scales followed by the levels of its channels, channel after
// channel, all panel_rows (P) rows of a channel together:
//   Q8_0 (34 P B a block): d[P] f16; 32 channels x P B: u = q + 128.
//   Q4_K (148 P B): d[P] f16, dmin[P] f16, sc[8][P] u8, m[8][P] u8 (the
//        6-bit scales and mins unpacked); 256 channels x P/2 B: q (0..15).
//   Q6_K (274 P B): d[P] f16, sc[16][P] i8; 256 channels x P B: u = q + 32
//        (q in -32..31).
// In a channel's levels, row r (of the panel) is at
//   8-bit: byte 64 (r / 64) + perm(r % 64)
//   4-bit: byte 64 (r / 128) + perm(r % 64), low nibble if r % 128 < 64
// with perm(i) = 16 ((i % 16) / 4) + 4 (i / 16) + i % 4: the order in which
// the AVX-512 kernel's byte and word unpacks leave quads of channels, so
// that its int32 lanes come out in row order. Memory: 1.0625 (Q8_0), 0.578
// (Q4_K), 1.07 (Q6_K) bytes per weight: Q8_0 and Q4_K about their dense
// size, Q6_K 1.3x.
//
// Active lists (ColActive): the activation rows of the n_tok tokens of a
// call (their vec_dot_type, Q8_0 or Q8_K) as the UNION of their non-zero
// channels, in groups of kColGroup = 16 channels; each entry holds its
// channel and every token's quant there (0 where that token's is 0); each
// group's entries are padded with zero-valued entries (a channel of the
// group) to a multiple of 4, so quads of entries never cross a group, a
// sub-block or a block. A kernel reads the union's columns once for all the
// tokens (their unpacking is shared); the union grows with the tokens,
// which is what the driver's rule weighs.
//
// Arithmetic contract: for every row and token, the kernels take per block
// (Q8_0) or sub-block (Q4_K: 32 inputs, Q6_K: 16) the exact int32 dot of
// weight and activation quants over the entries: the integers of the dense
// kernels, since every other activation quant is 0 (integer sums: their
// order is free). The block's scales are then applied, block after block,
// as the dense kernels of the level do (ColContract):
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
// (the activation's bsums over the sub-block); acc, acc_m start at 0 and
// y = acc - acc_m (acc_m stays 0 but for Q4_K under kLanes; x - 0 = x). So
// a column product is bit-identical to the dense product of the same level
// on the same thresholded and quantized activations, whatever the batch,
// its split, the panel height or the thread count: the driver may choose
// either path per call.
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

// Rows of a kernel call's unit (a 4-bit chunk of levels holds 128 rows);
// panels are multiples of it.
constexpr int kColRowUnit = 128;
constexpr int kColMaxPanelRows = 2048;
constexpr int kColGroup = 16;
// Most tokens of a call the column path takes (ActSkip::kOn).
constexpr int kColMaxTokens = 16;
// The default rule (ActSkip::kAuto): the column path for a call of at most
// max_tokens tokens whose union of active channels is at most max_union of
// the inputs, on a level with the SIMD kernel; max_tokens 0: never (and no
// column copy is built for auto). Measured (docs/pruning.md, TEAL section):
// Q8_0 pays for one token at 50% sparsity (kernel 1.3-1.5x, end to end
// 1.1x) and loses at 40% end to end and from two tokens on (union 75-84%);
// the Q4_K and Q6_K kernels do not beat their dense kernels, so auto keeps
// those dense (src/kernels/cpu/act_sparse.cpp holds the numbers).
struct ColAutoRule {
  int max_tokens = 0;
  double max_union = 0.0;
};
ColAutoRule col_auto_rule(DType base);

struct ColumnWeights {
  DType type = DType::kF32;  // the base type: kQ8_0, kQ4_K or kQ6_K
  int64_t n_in = 0, n_out = 0, n_panels = 0;
  int64_t panel_rows = 0;  // P: a multiple of kColRowUnit
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
// supported, interleaved ones included), in panels of at most max_panel_rows
// rows (a multiple of kColRowUnit; tests use small ones). Errors: another
// type, n_in not a multiple of the block, n_in > 65536 (channel ids are
// 16-bit), a bad max_panel_rows.
Result<ColumnWeights> make_column_weights(const TensorView& w, int64_t max_panel_rows = kColMaxPanelRows);

// The panel height for decode on `threads` threads: the matmul driver gives
// each thread one task of whole kColRowUnit units (about n_out / threads
// rows); panels that high let each thread read runs in its own part of the
// copy instead of a slice of every run (tools/run_stream_bench.cpp measures
// the two patterns). At most kColMaxPanelRows.
int64_t col_panel_rows(int64_t n_out, int threads);

// The union active list of n_tok tokens (see the top of this file).
struct ColActive {
  int n_tok = 0;
  int64_t cap = 0;                 // entries room: val's stride between tokens
  const uint16_t* idx = nullptr;   // [cap]: channel of each entry
  const int8_t* val = nullptr;     // [n_tok][cap]: each token's quant there (0: inactive or padding)
  const int32_t* start = nullptr;  // [n_in / 16 + 1]: the first entry of each group
  const int32_t* gsum = nullptr;   // [n_tok][n_in / 16]: sum of the token's val over the group
  const uint8_t* xq = nullptr;     // token t's activation row (Q8_0 / Q8_K blocks): xq + t * x_row_bytes
  size_t x_row_bytes = 0;
};
// Entries an active list of n_in channels may need (each group padded).
inline int64_t col_active_capacity(int64_t n_in) { return n_in + 3 * (n_in / kColGroup); }
// Bytes col_active_build needs for n_tok tokens of n_in channels.
size_t col_active_bytes(int64_t n_in, int n_tok);
// Builds the union list of the n_tok rows of xq (act: kQ8_0 or kQ8_K, n_in
// values, x_row_bytes apart) in buf (col_active_bytes, 4-byte aligned);
// *n_union: the channels where some token is non-zero.
ColActive col_active_build(DType act, const uint8_t* xq, size_t x_row_bytes, int n_tok, int64_t n_in, uint8_t* buf,
                           int64_t* n_union);

enum class ColContract { kRef, kLanes };
// Panel `panel` of w, its rows [r0, r1) (multiples of kColRowUnit, or r1 =
// panel_rows), every block, every token of a: y[t * ldy + o] for the
// matrix rows o = panel * P + r < n_out.
using ColDotFn = void (*)(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
                          int64_t ldy);
struct ColKernel {
  ColDotFn fn = nullptr;
  bool fast = false;  // a SIMD kernel (else the scalar twin: right, not faster than dense)
};
// True where auto may take the column path on this machine (a rule and the
// SIMD kernel): the model builds copies for auto only then.
bool col_auto_pays(DType base);
// The kernel of the level's contract (scalar: the twin under kRef; AVX2: the
// twin under kLanes; AVX-512 and up: the AVX-512 kernel).
ColKernel col_kernel(DType base, Isa isa);
inline ColKernel col_kernel(DType base) { return col_kernel(base, active_isa()); }

// Matrix rows [r0, r1) (r0 a multiple of kColRowUnit) of the product for the
// tokens of a: y[t * ldy + o].
void col_matmul_rows(const ColumnWeights& w, ColDotFn fn, const ColActive& a, int64_t r0, int64_t r1, float* y,
                     int64_t ldy);

namespace ref {
// The scalar twins (kernels/ref/act_cols.cpp).
void act_cols_ref(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
                  int64_t ldy);
void act_cols_lanes(const ColumnWeights& w, int64_t panel, int64_t r0, int64_t r1, const ColActive& a, float* y,
                    int64_t ldy);
// perm (the layout above) and the byte of row r of a channel's levels.
inline int act_cols_perm(int i) { return 16 * ((i % 16) / 4) + 4 * (i / 16) + i % 4; }
inline int64_t act_cols_byte8(int64_t r) { return 64 * (r / 64) + act_cols_perm(static_cast<int>(r % 64)); }
inline int64_t act_cols_byte4(int64_t r) { return 64 * (r / 128) + act_cols_perm(static_cast<int>(r % 64)); }
inline bool act_cols_high4(int64_t r) { return r % 128 >= 64; }
}  // namespace ref

}  // namespace ember
