// Scalar reference attention, the twin of the tiled online-softmax kernel of
// kernels/attention.h: for every query row, the plain softmax over all of
// its visible keys, evaluated in double (q·k, scale, softcap, exp, the
// weighted sum of V), rounded to float once per output. Each row depends only
// on its own query, position and K/V (batch-invariant). This is the
// EMBER_ISA=scalar level of the CPU backend (row-parallel over its pool) and
// the oracle the other levels and backends are tested against. Compressed
// K/V rows (kernels/kv_types.h) are decoded one head row at a time by
// kv_load_row, never a page at once.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace ember::ref {

// Largest head dim the reference takes (it decodes one K / V head row at a
// time into a stack buffer).
constexpr int kMaxRefHeadDim = 1024;

// One query row: head `head` of a token at position `pos` attending through
// kv. q_head: [head_dim]; out: [head_dim_v]; scores: scratch of at least
// attention_row_scratch(s, pos) doubles. No allocation.
void attention_row(const AttentionShape& s, const float* q_head, int32_t pos, int head, const KvView& kv,
                   float* out, double* scores);
// Doubles of scratch attention_row needs for a query at position pos.
int64_t attention_row_scratch(const AttentionShape& s, int32_t pos);

// Every row of a ragged batch: token t attends through
// views[view_of_token ? view_of_token[t] : 0]. q: [n, n_head * head_dim];
// out: [n, n_head * head_dim_v]. Allocates its score buffer (test oracle).
void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n, const KvView* views,
               const int32_t* view_of_token, float* out);

}  // namespace ember::ref
