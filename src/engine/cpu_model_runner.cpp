// The CPU model runner; see cpu_model_runner.h.
#include "engine/cpu_model_runner.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace ember {

namespace {
const BlockTables kNoTables;
constexpr int32_t kMaxSwapSlots = 1 << 24;
}  // namespace

CpuModelRunner::CpuModelRunner(const Model& model, ThreadPool& pool, int max_batch, KvTypes kv_types)
    : CpuModelRunner(model, make_cpu_backend(pool), max_batch, kv_types) {}

CpuModelRunner::CpuModelRunner(const Model& model, std::unique_ptr<Backend> backend, int max_batch, KvTypes kv_types)
    : model_(model), kv_types_(kv_types), fwd_(model, std::move(backend), max_batch), builder_(model.config().n_embd) {}

Result<int32_t> CpuModelRunner::allocate_kv(const KvLayout& layout, int block_size, size_t memory_bytes,
                                            int64_t n_blocks, const KvPoolLimits& limits) {
  EMBER_CHECK_MSG(!kv_, "allocate_kv called twice");
  const KvSpec spec = kv_spec();
  KvLayout local = layout;
  if (local.group_of_layer.size() < spec.layers.size() || local.slot_of_layer.size() != local.group_of_layer.size())
    return Status::errorf("KV layout of {} layers for a model of {}", local.group_of_layer.size(), spec.layers.size());
  local.group_of_layer.resize(spec.layers.size());
  local.slot_of_layer.resize(spec.layers.size());
  // A backend whose memory is not the host's (a device) holds the pages.
  Backend& be = fwd_.backend();
  auto kv = KvBlockPool::create(spec, local, block_size, memory_bytes, n_blocks, limits,
                                be.host_memory() ? nullptr : &be);
  if (!kv) return kv.status();
  kv_ = std::move(kv.value());
  return kv_->n_blocks();
}

namespace {
double wall_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

Result<float*> CpuModelRunner::execute(const SchedulerOutput& so) {
  const double t0 = wall_seconds();
  const BackendTimes b0 = fwd_.backend().times();
  forward_seconds_ = 0;
  builder_.build(so, &input_);
  auto rows = execute_step(input_);
  const BackendTimes b1 = fwd_.backend().times();
  times_.forward = forward_seconds_;
  times_.inputs = std::max(0.0, wall_seconds() - t0 - forward_seconds_);
  times_.copies = b1.copy_seconds - b0.copy_seconds;
  times_.device_measured = b1.device_measured;
  times_.device = b1.device_seconds - b0.device_seconds;
  return rows;
}

Result<float*> CpuModelRunner::logit_rows(size_t n) {
  const size_t need = n * static_cast<size_t>(n_vocab());
  if (fwd_.backend().host_memory()) {
    if (logits_.size() < need) logits_.resize(need);
    return logits_.data();
  }
  if (!logits_host_ || logits_host_->bytes() < need * sizeof(float)) {
    const size_t had = logits_host_ ? logits_host_->bytes() / sizeof(float) : 0;
    logits_host_.reset();
    logits_host_ = fwd_.backend().alloc_host(std::max({need, 2 * had, size_t{1}}) * sizeof(float));
    if (!logits_host_) return Status::errorf("no host memory for {} rows of logits", n);
  }
  return logits_host_->as<float>();
}

Status CpuModelRunner::check_ops(const StepInput& in) const {
  const int32_t nb = kv_->n_blocks();
  for (const KvOp& op : in.kv_ops) {
    const bool ok = op.kind == KvOp::Kind::kCopy     ? op.src >= 0 && op.src < nb && op.dst >= 0 && op.dst < nb
                    : op.kind == KvOp::Kind::kSwapOut ? op.src >= 0 && op.src < nb && op.dst >= 0 && op.dst < kMaxSwapSlots
                                                      : op.dst >= 0 && op.dst < nb && op.src >= 0 &&
                                                            static_cast<size_t>(op.src) < swap_.size() &&
                                                            !swap_[static_cast<size_t>(op.src)].empty();
    if (!ok) return Status::errorf("step {}: a page op ({} -> {}) out of range ({} pages)", in.step, op.src, op.dst, nb);
  }
  return Status::ok();
}

Result<float*> CpuModelRunner::execute_step(const StepInput& in) {
  EMBER_CHECK_MSG(kv_, "execute before allocate_kv");
  EMBER_RETURN_IF_ERROR(tables_.apply(in, kv_->n_blocks()));
  EMBER_RETURN_IF_ERROR(check_ops(in));
  frontiers_.clear();
  auto tables_of = [&](uint64_t seq) -> Result<const BlockTables*> {
    const BlockTables* t = tables_.find(seq);
    if (!t) return Status::errorf("step {}: sequence {} has no block tables", in.step, seq);
    return t;
  };
  for (const SeqPos& s : in.idle) {
    auto t = tables_of(s.seq);
    if (!t) return t.status();
    frontiers_.push_back({*t, s.pos, s.seq});
  }
  for (const StepSlice& s : in.slices) {
    auto t = tables_of(s.seq);
    if (!t) return t.status();
    frontiers_.push_back({*t, s.pos0, s.seq});
  }
  kv_->apply_ops(in.kv_ops, frontiers_, &swap_);
  if (!fwd_.backend().host_memory()) EMBER_RETURN_IF_ERROR(fwd_.backend().sync());  // the page copies
  if (in.slices.empty()) return logit_rows(0);

  while (views_.size() < in.slices.size()) views_.push_back(std::make_unique<PagedKvCache>(*kv_, kNoTables));
  batch_.clear();
  const int64_t E = model_.config().n_embd;
  int64_t token0 = 0, pre0 = 0;
  for (size_t i = 0; i < in.slices.size(); ++i) {
    const StepSlice& s = in.slices[i];
    PagedKvCache& view = *views_[i];
    view.set_tables(*frontiers_[in.idle.size() + i].tables);
    view.sync();
    SeqBatch b;
    b.tokens = in.tokens.data() + token0;
    b.n = s.n_tokens;
    b.pos0 = s.pos0;
    b.cache = &view;
    b.want_logits = s.want_logits;
    b.all_logits = s.all_logits;
    if (s.n_pre > 0) {
      if ((pre0 + s.n_pre) * E > static_cast<int64_t>(in.pre_hidden.size()))
        return Status::errorf("step {}: given rows missing", in.step);
      b.n_pre = s.n_pre;
      b.pre_hidden = in.pre_hidden.data() + pre0 * E;
      pre0 += s.n_pre;
    }
    token0 += s.n_tokens;
    batch_.push_back(b);
  }
  auto logits = logit_rows(static_cast<size_t>(in.n_logit_rows));
  if (!logits) return logits.status();
  const ModelShard& sh = model_.shard();
  const double t_fwd = wall_seconds();
  if (links_.prev < 0 && links_.next < 0 && sh.embeds() && sh.has_head()) {
    Status st = fwd_.forward_ragged(batch_.data(), static_cast<int>(batch_.size()), *logits);
    forward_seconds_ = wall_seconds() - t_fwd;
    EMBER_RETURN_IF_ERROR(st);
    return *logits;
  }
  // A pipeline stage: rows in from the previous stage (or the embedding),
  // this stage's layers, rows out to the next (or the head).
  if (pre0 > 0) return Status::error("a pipeline stage runs no given rows (speculative drafts of the target's stack)");
  if (sh.embeds() != (links_.prev < 0) || sh.has_head() != (links_.next < 0) || !links_.comm)
    return Status::errorf("pipeline stage ({}) linked to ranks {} and {}", sh.describe(), links_.prev, links_.next);
  EMBER_RETURN_IF_ERROR(fwd_.prepare(batch_.data(), static_cast<int>(batch_.size())));
  const size_t bytes = static_cast<size_t>(fwd_.n_tokens() * E) * sizeof(float);
  if (links_.prev < 0) {
    fwd_.embed();
  } else {
    EMBER_RETURN_IF_ERROR(links_.comm->recv(fwd_.hidden(), bytes, links_.prev, kTagHidden));
  }
  fwd_.run_layers(0, model_.config().n_layer);
  EMBER_RETURN_IF_ERROR(fwd_.finish());
  if (links_.next >= 0) {
    EMBER_RETURN_IF_ERROR(links_.comm->send(fwd_.hidden(), bytes, links_.next, kTagHidden));
    forward_seconds_ = wall_seconds() - t_fwd;
    return static_cast<float*>(nullptr);
  }
  const std::vector<int64_t>& rows = fwd_.logit_rows();
  fwd_.head(rows.data(), static_cast<int64_t>(rows.size()), *logits);
  Status st = fwd_.finish();
  forward_seconds_ = wall_seconds() - t_fwd;
  EMBER_RETURN_IF_ERROR(st);
  return *logits;
}

}  // namespace ember
