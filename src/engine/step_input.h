// StepInput: the model runner's whole input for one engine step as plain
// data (no pointers into the engine's requests or KV manager), so the same
// step can run in this process or be sent to other ranks (tensor and
// pipeline parallelism: engine/parallel_runner.h) — like vLLM's
// SchedulerOutput with NewRequestData / CachedRequestData, it carries only
// what changed since the previous step:
//
//   kv_ops      the step's page ops (KvOp: block ids, meaningful on every
//               rank), applied in order before the forward pass;
//   dropped     sequences whose block tables are gone (finished, preempted,
//               swapped out) since the previous step;
//   edits       changed entries of the block tables of the sequences that
//               hold pages (per sequence and group: the new length and the
//               (index, value) pairs that differ from the previous step's);
//   idle        the sequences that hold pages but are not in this step, at
//               the position they write next (KvFrontier);
//   slices      the scheduled slices in schedule order (sequence, first
//               position, tokens, logits flags) with their tokens in
//               `tokens` and their given residual rows in `pre_hidden`.
//
// StepInputBuilder (the engine's side) makes one from a SchedulerOutput and
// remembers the tables it sent; SeqTables (the executing side) holds the
// tables a runner reads, rebuilt from the edits. encode / decode give the
// bytes that travel between ranks; decode checks every count and index
// against the buffer (a bad message is an error, never a crash).
//
// Ownership: plain values. Threading: the engine thread (builder) and each
// rank's executing thread (SeqTables) own theirs.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/kv/kv_pool.h"
#include "engine/scheduler.h"

namespace ember {

struct StepSlice {
  uint64_t seq = 0;        // Request::seq_id
  int64_t pos0 = 0;        // first position
  int64_t n_tokens = 0;    // its tokens: StepInput::tokens[token0, token0 + n_tokens)
  int64_t n_pre = 0;       // leading tokens with given residual rows (SeqBatch::pre_hidden)
  bool want_logits = false;
  bool all_logits = false;  // a row per token (prompt log-probabilities, a verification)
  int64_t n_rows() const { return all_logits ? n_tokens : want_logits ? 1 : 0; }
};

// One sequence's group table after the step: `len` entries, of which
// entries[0 .. n_changes) (index, value) pairs in StepInput::edit_entries
// (from entry0) differ from the previous step's table.
struct TableEdit {
  uint64_t seq = 0;
  int32_t group = 0;
  int32_t len = 0;
  int64_t entry0 = 0;
  int32_t n_changes = 0;
};

struct SeqPos {
  uint64_t seq = 0;
  int64_t pos = 0;
};

struct StepInput {
  uint64_t step = 0;  // 1, 2, ... (a receiver checks that none was lost)
  int n_groups = 0;   // block tables per sequence
  std::vector<KvOp> kv_ops;
  std::vector<uint64_t> dropped;
  std::vector<TableEdit> edits;
  std::vector<int32_t> edit_entries;  // (index, value) pairs
  std::vector<SeqPos> idle;
  std::vector<StepSlice> slices;
  std::vector<int32_t> tokens;     // all slices' tokens, in order
  std::vector<float> pre_hidden;   // all slices' given rows [sum n_pre, n_embd]
  int n_logit_rows = 0;
  int64_t n_tokens = 0;            // tokens in the forward pass (sum of n_tokens - n_pre)

  void clear();
  bool empty() const { return slices.empty() && kv_ops.empty(); }
};

// The engine's side: the builder remembers the tables it sent.
class StepInputBuilder {
 public:
  // n_embd: the width of a given residual row (SeqBatch::pre_hidden).
  explicit StepInputBuilder(int n_embd) : n_embd_(n_embd) {}
  // Fills `in` from `so` (the tables and tokens are read now).
  void build(const SchedulerOutput& so, StepInput* in);

 private:
  void diff(uint64_t seq, const BlockTables& now, StepInput* in);
  int n_embd_;
  uint64_t step_ = 0;
  std::unordered_map<uint64_t, BlockTables> sent_;  // by seq: the tables as of the last step
  std::vector<uint64_t> live_;                      // scratch: this step's sequences
};

// The executing side: block tables by sequence, as the edits make them.
class SeqTables {
 public:
  // Applies in's drops and edits; errors (nothing applied after the first
  // bad entry; the runner then fails the step) on a group or page id out of
  // range or a step out of order. n_blocks: pages of the pool.
  Status apply(const StepInput& in, int32_t n_blocks);
  // The tables of a sequence; null if it holds none.
  const BlockTables* find(uint64_t seq) const;
  size_t size() const { return tables_.size(); }

 private:
  uint64_t step_ = 0;
  std::unordered_map<uint64_t, BlockTables> tables_;
};

// The bytes of a step input (little-endian host layout: ranks of one job
// share the build) and back. decode checks sizes, counts and ranges.
void encode_step_input(const StepInput& in, std::vector<uint8_t>* out);
Status decode_step_input(const uint8_t* data, size_t n, StepInput* in);

}  // namespace ember
