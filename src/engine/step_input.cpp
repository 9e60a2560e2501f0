// The step input as plain data, its builder, the executing side's tables and
// the wire form; see step_input.h.
#include "engine/step_input.h"

#include <algorithm>

#include "core/check.h"
#include "engine/wire.h"

namespace ember {

void StepInput::clear() {
  step = 0;
  n_groups = 0;
  kv_ops.clear();
  dropped.clear();
  edits.clear();
  edit_entries.clear();
  idle.clear();
  slices.clear();
  tokens.clear();
  pre_hidden.clear();
  n_logit_rows = 0;
  n_tokens = 0;
}

void StepInputBuilder::diff(uint64_t seq, const BlockTables& now, StepInput* in) {
  auto [it, fresh] = sent_.try_emplace(seq);
  BlockTables& was = it->second;
  if (was.size() < now.size()) was.resize(now.size());
  for (size_t g = 0; g < now.size(); ++g) {
    const std::vector<int32_t>& t = now[g];
    std::vector<int32_t>& w = was[g];
    TableEdit e;
    e.seq = seq;
    e.group = static_cast<int32_t>(g);
    e.len = static_cast<int32_t>(t.size());
    e.entry0 = static_cast<int64_t>(in->edit_entries.size());
    for (size_t i = 0; i < t.size(); ++i)
      if (i >= w.size() || w[i] != t[i]) {
        in->edit_entries.push_back(static_cast<int32_t>(i));
        in->edit_entries.push_back(t[i]);
        ++e.n_changes;
      }
    if (fresh || e.n_changes > 0 || w.size() != t.size()) in->edits.push_back(e);  // a new sequence: all its groups
    w = t;
  }
}

void StepInputBuilder::build(const SchedulerOutput& so, StepInput* in) {
  in->clear();
  in->step = ++step_;
  in->kv_ops = so.kv_ops;
  live_.clear();
  for (const KvFrontier& f : so.idle) {
    EMBER_CHECK_MSG(f.tables, "an idle sequence without tables");
    in->idle.push_back({f.seq, f.pos});
    live_.push_back(f.seq);
    in->n_groups = std::max(in->n_groups, static_cast<int>(f.tables->size()));
    diff(f.seq, *f.tables, in);
  }
  for (const ScheduledRequest& sr : so.scheduled) {
    const Request& r = *sr.req;
    EMBER_CHECK(sr.tables && sr.pos0 + sr.n_tokens <= r.num_tokens() + sr.n_spec);
    live_.push_back(r.seq_id);
    in->n_groups = std::max(in->n_groups, static_cast<int>(sr.tables->size()));
    diff(r.seq_id, *sr.tables, in);
    StepSlice s;
    s.seq = r.seq_id;
    s.pos0 = sr.pos0;
    s.n_tokens = sr.n_tokens;
    s.want_logits = sr.want_logits;
    s.all_logits = sr.all_logits || sr.n_spec > 0;
    for (int64_t j = 0; j < sr.n_tokens; ++j) in->tokens.push_back(r.token_at(sr.pos0 + j));
    if (sr.n_spec > 0 && sr.n_pre > 0) {
      s.n_pre = sr.n_pre;
      in->pre_hidden.insert(in->pre_hidden.end(), sr.pre_hidden, sr.pre_hidden + sr.n_pre * n_embd_);
    }
    in->n_tokens += s.n_tokens - s.n_pre;
    in->n_logit_rows += static_cast<int>(s.n_rows());
    in->slices.push_back(s);
  }
  // Sequences sent before that hold no pages now.
  std::sort(live_.begin(), live_.end());
  for (auto it = sent_.begin(); it != sent_.end();) {
    if (!std::binary_search(live_.begin(), live_.end(), it->first)) {
      in->dropped.push_back(it->first);
      it = sent_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(in->dropped.begin(), in->dropped.end());  // a stable order whatever the hash map's
}

Status SeqTables::apply(const StepInput& in, int32_t n_blocks) {
  if (in.step != step_ + 1)
    return Status::errorf("step input {} arrived after step {} (a step was lost or repeated)", in.step, step_);
  step_ = in.step;
  for (uint64_t s : in.dropped) tables_.erase(s);
  for (const TableEdit& e : in.edits) {
    if (e.group < 0 || e.group >= in.n_groups || e.len < 0 || e.n_changes < 0 || e.entry0 < 0 ||
        e.entry0 + 2 * int64_t{e.n_changes} > static_cast<int64_t>(in.edit_entries.size()))
      return Status::errorf("step {}: a malformed table edit of sequence {}", in.step, e.seq);
    BlockTables& t = tables_[e.seq];
    if (t.size() < static_cast<size_t>(in.n_groups)) t.resize(static_cast<size_t>(in.n_groups));
    std::vector<int32_t>& g = t[static_cast<size_t>(e.group)];
    g.resize(static_cast<size_t>(e.len), -1);
    for (int32_t c = 0; c < e.n_changes; ++c) {
      const int32_t i = in.edit_entries[static_cast<size_t>(e.entry0 + 2 * c)];
      const int32_t v = in.edit_entries[static_cast<size_t>(e.entry0 + 2 * c + 1)];
      if (i < 0 || i >= e.len || v < -1 || v >= n_blocks)
        return Status::errorf("step {}: sequence {} group {}: table entry {} = page {} is out of range (length {}, "
                              "{} pages)",
                              in.step, e.seq, e.group, i, v, e.len, n_blocks);
      g[static_cast<size_t>(i)] = v;
    }
  }
  return Status::ok();
}

const BlockTables* SeqTables::find(uint64_t seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? nullptr : &it->second;
}

namespace {

constexpr uint32_t kMagic = 0x45535450;  // "ESTP"

}  // namespace

void encode_step_input(const StepInput& in, std::vector<uint8_t>* out) {
  out->clear();
  WireWriter w(out);
  w.put(kMagic);
  w.put(in.step);
  w.put<int32_t>(in.n_groups);
  w.put<int32_t>(in.n_logit_rows);
  w.put<int64_t>(in.n_tokens);
  w.put<uint64_t>(in.kv_ops.size());
  for (const KvOp& op : in.kv_ops) {
    w.put<int32_t>(static_cast<int32_t>(op.kind));
    w.put<int32_t>(op.src);
    w.put<int32_t>(op.dst);
    w.put<int32_t>(op.n_rows);
  }
  w.put_array(in.dropped);
  w.put<uint64_t>(in.edits.size());
  for (const TableEdit& e : in.edits) {
    w.put(e.seq);
    w.put(e.group);
    w.put(e.len);
    w.put(e.entry0);
    w.put(e.n_changes);
  }
  w.put_array(in.edit_entries);
  w.put<uint64_t>(in.idle.size());
  for (const SeqPos& s : in.idle) {
    w.put(s.seq);
    w.put(s.pos);
  }
  w.put<uint64_t>(in.slices.size());
  for (const StepSlice& s : in.slices) {
    w.put(s.seq);
    w.put(s.pos0);
    w.put(s.n_tokens);
    w.put(s.n_pre);
    w.put<uint8_t>(static_cast<uint8_t>(s.want_logits | (s.all_logits << 1)));
  }
  w.put_array(in.tokens);
  w.put_array(in.pre_hidden);
}

Status decode_step_input(const uint8_t* data, size_t n, StepInput* in) {
  in->clear();
  WireReader r(data, n);
  auto bad = [&](const char* what) { return Status::errorf("a malformed step input ({}; {} bytes)", what, n); };
  uint32_t magic = 0;
  int32_t n_groups = 0, n_rows = 0;
  if (!r.get(&magic) || magic != kMagic) return bad("no step header");
  if (!r.get(&in->step) || !r.get(&n_groups) || !r.get(&n_rows) || !r.get(&in->n_tokens)) return bad("header");
  if (n_groups < 0 || n_groups > (1 << 16) || n_rows < 0 || in->n_tokens < 0) return bad("header values");
  in->n_groups = n_groups;
  in->n_logit_rows = n_rows;
  uint64_t c = 0;
  if (!r.count(&c, 16)) return bad("page ops");
  in->kv_ops.resize(c);
  for (KvOp& op : in->kv_ops) {
    int32_t kind = 0;
    if (!r.get(&kind) || !r.get(&op.src) || !r.get(&op.dst) || !r.get(&op.n_rows)) return bad("page op");
    if (kind < 0 || kind > static_cast<int32_t>(KvOp::Kind::kSwapIn)) return bad("page op kind");
    op.kind = static_cast<KvOp::Kind>(kind);
  }
  if (!r.get_array(&in->dropped)) return bad("dropped sequences");
  if (!r.count(&c, 28)) return bad("table edits");
  in->edits.resize(c);
  for (TableEdit& e : in->edits)
    if (!r.get(&e.seq) || !r.get(&e.group) || !r.get(&e.len) || !r.get(&e.entry0) || !r.get(&e.n_changes))
      return bad("table edit");
  if (!r.get_array(&in->edit_entries)) return bad("table entries");
  if (!r.count(&c, 16)) return bad("idle sequences");
  in->idle.resize(c);
  for (SeqPos& s : in->idle)
    if (!r.get(&s.seq) || !r.get(&s.pos)) return bad("idle sequence");
  if (!r.count(&c, 33)) return bad("slices");
  in->slices.resize(c);
  for (StepSlice& s : in->slices) {
    uint8_t flags = 0;
    if (!r.get(&s.seq) || !r.get(&s.pos0) || !r.get(&s.n_tokens) || !r.get(&s.n_pre) || !r.get(&flags) || flags > 3)
      return bad("slice");
    s.want_logits = flags & 1;
    s.all_logits = flags & 2;
  }
  if (!r.get_array(&in->tokens) || !r.get_array(&in->pre_hidden) || !r.at_end()) return bad("tokens");
  // The slices must cover the tokens exactly.
  int64_t total = 0, rows = 0, computed = 0;
  for (const StepSlice& s : in->slices) {
    if (s.n_tokens <= 0 || s.pos0 < 0 || s.n_pre < 0 || s.n_pre >= s.n_tokens || s.n_tokens > (int64_t{1} << 30))
      return bad("slice sizes");
    total += s.n_tokens;
    rows += s.n_rows();
    computed += s.n_tokens - s.n_pre;
  }
  if (total != static_cast<int64_t>(in->tokens.size()) || rows != in->n_logit_rows || computed != in->n_tokens)
    return bad("slice totals");
  return Status::ok();
}

}  // namespace ember
