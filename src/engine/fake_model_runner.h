// FakeModelRunner: a ModelRunner without a model, for scheduler, KV-manager
// and engine tests (and load tests of the server) that must not depend on a
// model file. It keeps its own paged "KV cache" whose rows hold the token
// and position written there, applies the KV ops like the real runner, and
// computes each logits row from the rows it reads back through the block
// tables (every layer, honouring sliding windows). So any paging mistake —
// a wrong page, a stale copy-on-write source, a lost swap page, a released
// page that is still needed, a row never written — is reported as an error,
// and the logits of a correct engine equal reference_logits() computed
// straight from the token list, whatever the batching, chunking, prefix
// hits, forks, preemptions and swaps.
//
// Engine thread only; cheap (microseconds per step).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_runner.h"

namespace ember {

struct FakeModelConfig {
  int n_vocab = 61;
  int64_t n_ctx_train = 1 << 20;
  int max_batch = 1 << 16;
  std::vector<int> windows = {0};  // per layer: 0 global attention, else a sliding window
};

class FakeModelRunner final : public ModelRunner {
 public:
  explicit FakeModelRunner(FakeModelConfig cfg);

  int n_vocab() const override { return cfg_.n_vocab; }
  int64_t n_ctx_train() const override { return cfg_.n_ctx_train; }
  int max_batch_tokens() const override { return cfg_.max_batch; }
  KvSpec kv_spec() const override;
  // Pages only (no KV format: limits are ignored).
  Result<int32_t> allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes, int64_t n_blocks,
                              const KvPoolLimits& limits) override;
  KvMemory kv_memory() const override { return {page_bytes_}; }
  Result<float*> execute(const SchedulerOutput& so) override;

  // The logits row at position pos of a sequence whose tokens are
  // tokens[0 .. pos] (what a correct engine must produce there).
  static void reference_logits(const FakeModelConfig& cfg, const int32_t* tokens, int64_t pos, float* out);

  int64_t n_executes() const { return n_executes_; }
  int64_t n_tokens_computed() const { return n_tokens_; }

 private:
  struct Row {
    int32_t token = -1;
    int64_t pos = -1;  // -1: never written
  };
  Row& row(int32_t page, int slot, int64_t offset) {
    return rows_[(static_cast<size_t>(page) * slots_ + slot) * block_size_ + offset];
  }
  Status write(const ScheduledRequest& sr);
  Status logits_at(const ScheduledRequest& sr, int64_t pos, float* out);

  FakeModelConfig cfg_;
  KvLayout layout_;
  int block_size_ = 0;
  int slots_ = 0;
  int32_t n_blocks_ = 0;
  size_t page_bytes_ = 0;
  std::vector<Row> rows_;                   // [n_blocks, slots, block_size]
  std::vector<std::vector<Row>> swap_;      // by swap slot: one page
  std::vector<float> logits_;
  int64_t n_executes_ = 0, n_tokens_ = 0;
};

}  // namespace ember
