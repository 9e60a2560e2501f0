// The CPU model runner; see cpu_model_runner.h.
#include "engine/cpu_model_runner.h"

#include "core/check.h"

namespace ember {

namespace {
const BlockTables kNoTables;
}  // namespace

CpuModelRunner::CpuModelRunner(const Model& model, ThreadPool& pool, int max_batch, KvTypes kv_types)
    : model_(model), kv_types_(kv_types), fwd_(model, pool, max_batch) {}

Result<int32_t> CpuModelRunner::allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes,
                                            int64_t n_blocks, const KvPoolLimits& limits) {
  EMBER_CHECK_MSG(!kv_, "allocate_kv called twice");
  auto kv = KvBlockPool::create(kv_spec(), layout, block_size, memory_bytes, n_blocks, limits);
  if (!kv) return kv.status();
  kv_ = std::move(kv.value());
  return kv_->n_blocks();
}

Result<float*> CpuModelRunner::execute(const SchedulerOutput& so) {
  EMBER_CHECK_MSG(kv_, "execute before allocate_kv");
  frontiers_.assign(so.idle.begin(), so.idle.end());
  for (const ScheduledRequest& sr : so.scheduled) frontiers_.push_back({sr.tables, sr.pos0});
  kv_->apply_ops(so.kv_ops, frontiers_, &swap_);
  if (so.scheduled.empty()) return logits_.data();
  while (views_.size() < so.scheduled.size()) views_.push_back(std::make_unique<PagedKvCache>(*kv_, kNoTables));
  batch_.clear();
  if (spec_tokens_.size() < so.scheduled.size()) spec_tokens_.resize(so.scheduled.size());
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& sr = so.scheduled[i];
    EMBER_CHECK(sr.pos0 + sr.n_tokens <= sr.req->num_tokens() + sr.n_spec);
    PagedKvCache& view = *views_[i];
    view.set_tables(*sr.tables);
    view.sync();
    SeqBatch b;
    b.tokens = sr.req->tokens.data() + sr.pos0;
    if (sr.n_spec > 0) {  // a verification slice: known tokens, then the drafts
      std::vector<int32_t>& t = spec_tokens_[i];
      t.resize(static_cast<size_t>(sr.n_tokens));
      for (int64_t j = 0; j < sr.n_tokens; ++j) t[j] = sr.req->token_at(sr.pos0 + j);
      b.tokens = t.data();
    }
    b.n = sr.n_tokens;
    b.pos0 = sr.pos0;
    b.cache = &view;
    b.want_logits = sr.want_logits;
    b.all_logits = sr.all_logits || sr.n_spec > 0;
    if (sr.n_spec > 0 && sr.n_pre > 0) {
      b.n_pre = sr.n_pre;
      b.pre_hidden = sr.pre_hidden;
    }
    batch_.push_back(b);
  }
  const size_t need = static_cast<size_t>(so.n_logit_rows) * n_vocab();
  if (logits_.size() < need) logits_.resize(need);
  EMBER_RETURN_IF_ERROR(fwd_.forward_ragged(batch_.data(), static_cast<int>(batch_.size()), logits_.data()));
  return logits_.data();
}

}  // namespace ember
