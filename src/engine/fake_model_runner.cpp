// The model-free runner for engine tests; see fake_model_runner.h.
#include "engine/fake_model_runner.h"

#include <algorithm>

#include <fmt/format.h>

namespace ember {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The state a layer contributes at query position pos from the tokens it
// sees (keys pos - window + 1 .. pos).
uint64_t fold(uint64_t h, int layer, int64_t q, int32_t token) {
  return mix(h ^ (static_cast<uint64_t>(layer) << 56) ^ (static_cast<uint64_t>(q) << 24) ^
             static_cast<uint32_t>(token));
}

int64_t first_visible(int window, int64_t pos) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

void logits_from(uint64_t h, int n_vocab, float* out) {
  for (int j = 0; j < n_vocab; ++j)
    out[j] = static_cast<float>(mix(h + static_cast<uint64_t>(j)) >> 40) * (8.0f / 16777216.0f);
}

}  // namespace

FakeModelRunner::FakeModelRunner(FakeModelConfig cfg) : cfg_(std::move(cfg)) {}

KvSpec FakeModelRunner::kv_spec() const {
  KvSpec s;
  for (int w : cfg_.windows) s.layers.push_back({w, 2, 2});
  return s;
}

Result<int32_t> FakeModelRunner::allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes,
                                             int64_t n_blocks, const KvPoolLimits&) {
  if (block_size < 1 || block_size > 4096) return Status::errorf("KV block size {} out of range [1, 4096]", block_size);
  layout_ = layout;
  block_size_ = block_size;
  slots_ = layout.layers_per_group;
  page_bytes_ = static_cast<size_t>(slots_) * block_size * sizeof(Row);
  if (n_blocks <= 0) n_blocks = static_cast<int64_t>(memory_bytes / page_bytes_);
  if (n_blocks < 1)
    return Status::errorf("KV cache budget of {} bytes is below one block ({} bytes)", memory_bytes, page_bytes_);
  n_blocks_ = static_cast<int32_t>(n_blocks);
  rows_.assign(static_cast<size_t>(n_blocks_) * slots_ * block_size_, Row{});
  return n_blocks_;
}

Status FakeModelRunner::write(const ScheduledRequest& sr) {
  const BlockTables& t = *sr.tables;
  for (int64_t p = sr.pos0; p < sr.pos0 + sr.n_tokens; ++p) {
    const int32_t tok = sr.req->token_at(p);
    if (tok < 0 || tok >= cfg_.n_vocab) return Status::errorf("fake runner: token {} out of range", tok);
    for (size_t il = 0; il < cfg_.windows.size(); ++il) {
      const auto& tab = t[layout_.group_of_layer[il]];
      const size_t b = static_cast<size_t>(p / block_size_);
      if (b >= tab.size() || tab[b] < 0)
        return Status::errorf("fake runner: '{}' writes position {} of layer {} without a page", sr.req->id, p, il);
      row(tab[b], layout_.slot_of_layer[il], p % block_size_) = {tok, p};
    }
  }
  return Status::ok();
}

Status FakeModelRunner::logits_at(const ScheduledRequest& sr, int64_t pos, float* out) {
  const BlockTables& t = *sr.tables;
  uint64_t h = 0;
  for (size_t il = 0; il < cfg_.windows.size(); ++il) {
    const auto& tab = t[layout_.group_of_layer[il]];
    for (int64_t q = first_visible(cfg_.windows[il], pos); q <= pos; ++q) {
      const size_t b = static_cast<size_t>(q / block_size_);
      if (b >= tab.size() || tab[b] < 0)
        return Status::errorf("fake runner: '{}' ({}) reads position {} of layer {} from a released page", sr.req->id,
                              sr.req->index, q, il);
      const Row& r = row(tab[b], layout_.slot_of_layer[il], q % block_size_);
      if (r.pos != q || r.token != sr.req->token_at(q))
        return Status::errorf("fake runner: '{}' ({}) reads position {} of layer {}: the row holds token {} of "
                              "position {}, expected token {}",
                              sr.req->id, sr.req->index, q, il, r.token, r.pos, sr.req->token_at(q));
      h = fold(h, static_cast<int>(il), q, r.token);
    }
  }
  logits_from(h, cfg_.n_vocab, out);
  return Status::ok();
}

void FakeModelRunner::reference_logits(const FakeModelConfig& cfg, const int32_t* tokens, int64_t pos, float* out) {
  uint64_t h = 0;
  for (size_t il = 0; il < cfg.windows.size(); ++il)
    for (int64_t q = first_visible(cfg.windows[il], pos); q <= pos; ++q) h = fold(h, static_cast<int>(il), q, tokens[q]);
  logits_from(h, cfg.n_vocab, out);
}

Result<float*> FakeModelRunner::execute(const SchedulerOutput& so) {
  if (rows_.empty()) return Status::error("fake runner: execute before allocate_kv");
  const size_t page_rows = static_cast<size_t>(slots_) * block_size_;
  for (const KvOp& op : so.kv_ops) {
    switch (op.kind) {
      case KvOp::Kind::kCopy: {
        if (op.n_rows < 0 || op.n_rows > block_size_) return Status::error("fake runner: bad copy");
        for (int s = 0; s < slots_; ++s)
          for (int i = 0; i < block_size_; ++i) row(op.dst, s, i) = i < op.n_rows ? row(op.src, s, i) : Row{};
        break;
      }
      case KvOp::Kind::kSwapOut:
        if (swap_.size() <= static_cast<size_t>(op.dst)) swap_.resize(op.dst + 1);
        swap_[op.dst].assign(rows_.begin() + op.src * page_rows, rows_.begin() + (op.src + 1) * page_rows);
        break;
      case KvOp::Kind::kSwapIn:
        if (static_cast<size_t>(op.src) >= swap_.size() || swap_[op.src].size() != page_rows)
          return Status::errorf("fake runner: swap slot {} holds no page", op.src);
        std::copy(swap_[op.src].begin(), swap_[op.src].end(), rows_.begin() + op.dst * page_rows);
        swap_[op.src].clear();
        break;
    }
  }
  if (so.scheduled.empty()) return logits_.data();
  ++n_executes_;
  if (so.n_tokens > cfg_.max_batch)
    return Status::errorf("fake runner: {} tokens exceed the batch capacity {}", so.n_tokens, cfg_.max_batch);
  for (const ScheduledRequest& sr : so.scheduled) {
    if (sr.n_tokens <= 0 || sr.pos0 < 0 || sr.pos0 + sr.n_tokens > sr.req->num_tokens() + sr.n_spec ||
        (sr.n_spec > 0 && (sr.n_spec != static_cast<int64_t>(sr.req->spec_tokens.size()) ||
                           sr.pos0 + sr.n_tokens != sr.req->num_tokens() + sr.n_spec)))
      return Status::errorf("fake runner: bad slice [{}, +{}) of '{}'", sr.pos0, sr.n_tokens, sr.req->id);
    EMBER_RETURN_IF_ERROR(write(sr));
    n_tokens_ += sr.n_tokens;
  }
  logits_.resize(static_cast<size_t>(so.n_logit_rows) * cfg_.n_vocab);
  int r = 0;
  for (const ScheduledRequest& sr : so.scheduled) {
    const int64_t end = sr.pos0 + sr.n_tokens;
    for (int64_t p = end - sr.n_rows(); p < end; ++p) {
      if (r >= so.n_logit_rows) return Status::error("fake runner: more logits rows than scheduled");
      EMBER_RETURN_IF_ERROR(logits_at(sr, p, logits_.data() + static_cast<size_t>(r++) * cfg_.n_vocab));
    }
  }
  if (r != so.n_logit_rows) return Status::errorf("fake runner: {} logits rows, {} scheduled", r, so.n_logit_rows);
  return logits_.data();
}

}  // namespace ember
