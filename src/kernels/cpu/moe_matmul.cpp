// The grouped expert matmul of the CPU backend; see moe_matmul.h.
#include "kernels/cpu/moe_matmul.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/matmul_jobs.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using matmul_jobs::Job;
using matmul_jobs::Path;

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// An activation format: a vec_dot_type, in its own levels or in 4-bit ones.
struct ActType {
  DType type = DType::kF32;
  bool int4 = false;
  bool operator==(const ActType&) const = default;
};

constexpr int kMaxTargets = 4;  // gate + up (+ two more) share one call
constexpr int kBlocksPerPackTask = 8;

}  // namespace

uint8_t* MoeMatmulScratch::get(int which, size_t bytes) {
  std::vector<uint8_t>& b = buf_[which];
  if (b.size() < bytes + kAlign) b.resize(bytes + kAlign);
  const size_t mis = reinterpret_cast<uintptr_t>(b.data()) % kAlign;
  return b.data() + (mis ? kAlign - mis : 0);
}

void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                int n_expert, const ExpertTarget* targets, int n_targets, ThreadPool& pool,
                MoeMatmulScratch& scratch) {
  if (n_slots <= 0 || n_targets <= 0) return;
  EMBER_CHECK(n_targets <= kMaxTargets);
  const int64_t n_in = targets[0].experts[0]->ne[0];
  int64_t n_x = n_slots;  // activation rows read
  if (x_row) {
    n_x = 0;
    for (int64_t s = 0; s < n_slots; ++s) n_x = std::max<int64_t>(n_x, x_row[s] + 1);
  }

  // 1. Slots grouped by expert, stably (scratch.order[p]: the slot at
  // position p; expert e's slots at [offset[e], offset[e] + count[e])).
  scratch.count.assign(static_cast<size_t>(n_expert), 0);
  for (int64_t s = 0; s < n_slots; ++s) {
    EMBER_DCHECK(expert[s] >= 0 && expert[s] < n_expert);
    ++scratch.count[expert[s]];
  }
  scratch.offset.assign(static_cast<size_t>(n_expert) + 1, 0);
  for (int e = 0; e < n_expert; ++e) scratch.offset[e + 1] = scratch.offset[e] + scratch.count[e];
  scratch.order.resize(static_cast<size_t>(n_slots));
  {
    std::vector<int32_t>& next = scratch.count;  // reused as the fill cursor, restored below
    for (int e = 0; e < n_expert; ++e) next[e] = scratch.offset[e];
    for (int64_t s = 0; s < n_slots; ++s) scratch.order[next[expert[s]]++] = static_cast<int32_t>(s);
    for (int e = 0; e < n_expert; ++e) next[e] -= scratch.offset[e];
  }
  const int32_t* order = scratch.order.data();
  const int32_t* off = scratch.offset.data();
  const int32_t* cnt = scratch.count.data();

  // 2. Activation formats of the targets (all experts of a target share one
  // type), each converted once for every x row read, then gathered in
  // expert order.
  ActType act[kMaxTargets], types[kMaxTargets];
  int type_of[kMaxTargets], n_types = 0;
  for (int i = 0; i < n_targets; ++i) {
    const DType wt = targets[i].experts[0]->type;
    act[i].type = vec_dot_type(wt);
    act[i].int4 = targets[i].act_bits == 4 && act[i].type != DType::kF32;
    type_of[i] = static_cast<int>(std::find(types, types + n_types, act[i]) - types);
    if (type_of[i] == n_types) types[n_types++] = act[i];
  }
  size_t row_bytes[kMaxTargets], conv_off[kMaxTargets], gath_off[kMaxTargets];
  size_t conv_total = 0, gath_total = 0;
  for (int a = 0; a < n_types; ++a) {
    row_bytes[a] = types[a].type == DType::kF32 ? static_cast<size_t>(n_in) * sizeof(float)
                                                : dtype_row_size(types[a].type, n_in);
    conv_off[a] = conv_total;
    if (types[a].type != DType::kF32) conv_total += align_up(row_bytes[a] * static_cast<size_t>(n_x));
    gath_off[a] = gath_total;
    gath_total += align_up(row_bytes[a] * static_cast<size_t>(n_slots));
  }
  uint8_t* conv = conv_total ? scratch.get(0, conv_total) : nullptr;
  uint8_t* gath = scratch.get(1, gath_total);
  QuantizeRowFn quantize[kMaxTargets] = {};
  for (int a = 0; a < n_types; ++a) {
    if (types[a].type == DType::kF32) continue;
    const KernelSet& k = kernels(types[a].type);
    quantize[a] = types[a].int4 ? k.quantize_row_int4 : k.quantize_row;
    EMBER_CHECK_MSG(quantize[a], "no 4-bit form of this activation type (checked at model load)");
  }
  if (conv_total)
    pool.parallel_for(n_x, 8, [&](int64_t b, int64_t e, int) {
      for (int a = 0; a < n_types; ++a)
        if (quantize[a])
          for (int64_t t = b; t < e; ++t) quantize[a](x + t * ldx, conv + conv_off[a] + t * row_bytes[a], n_in);
    });
  pool.parallel_for(n_slots, 32, [&](int64_t b, int64_t e, int) {
    for (int a = 0; a < n_types; ++a)
      for (int64_t p = b; p < e; ++p) {
        const int64_t r = x_row ? x_row[order[p]] : order[p];
        const void* src = quantize[a] ? static_cast<const void*>(conv + conv_off[a] + r * row_bytes[a])
                                      : static_cast<const void*>(x + r * ldx);
        std::memcpy(gath + gath_off[a] + p * row_bytes[a], src, row_bytes[a]);
      }
  });

  // 3. One job per (target, chosen expert) into gathered outputs, plus the
  // token-lane packs they need (one per activation format, pack function
  // and expert).
  size_t y_off[kMaxTargets], y_total = 0;
  for (int i = 0; i < n_targets; ++i) {
    y_off[i] = y_total;
    y_total += align_up(static_cast<size_t>(targets[i].experts[0]->ne[1]) * n_slots * sizeof(float));
  }
  std::vector<Job>& jobs = scratch.jobs;
  jobs.clear();
  std::vector<MoeMatmulScratch::Pack>& packs = scratch.packs;
  packs.clear();
  size_t pack_total = 0;
  // First the plans (pack sizes), then the buffer, then the pointers.
  std::vector<int>& job_target = scratch.job_target;
  std::vector<int>& job_expert = scratch.job_expert;
  job_target.clear();
  job_expert.clear();
  for (int i = 0; i < n_targets; ++i)
    for (int e = 0; e < n_expert; ++e) {
      if (!cnt[e]) continue;
      const TensorView& w = *targets[i].experts[e];
      EMBER_DCHECK(w.ne[0] == n_in && w.type == targets[i].experts[0]->type);
      Job j = matmul_jobs::plan(w, nullptr, w.ne[1], cnt[e], pool.size());
      if (j.path == Path::kTokens) {
        const int a = type_of[i];
        int p = 0;
        while (p < static_cast<int>(packs.size()) &&
               !(packs[p].act == a && packs[p].fn == j.wk->pack_tokens && packs[p].expert == e))
          ++p;
        if (p == static_cast<int>(packs.size())) {
          packs.push_back({a, j.wk->pack_tokens, e, pack_total});
          pack_total += align_up(j.wk->tokens_pack_bytes(n_in, cnt[e]));
        }
        j.pack = p;
      }
      jobs.push_back(j);
      job_target.push_back(i);
      job_expert.push_back(e);
    }
  uint8_t* ybuf = scratch.get(2, y_total + pack_total);
  uint8_t* packbuf = ybuf + y_total;
  for (size_t q = 0; q < jobs.size(); ++q) {
    Job& j = jobs[q];
    const int i = job_target[q], e = job_expert[q], a = type_of[i];
    const int64_t n_out = targets[i].experts[0]->ne[1];
    j.y = reinterpret_cast<float*>(ybuf + y_off[i]) + static_cast<int64_t>(off[e]) * n_out;
    j.ldy = n_out;
    j.xq = gath + gath_off[a] + static_cast<size_t>(off[e]) * row_bytes[a];
    j.x_row_bytes = row_bytes[a];
    if (j.pack >= 0) j.packed = packbuf + packs[j.pack].offset;
  }
  if (!packs.empty()) {
    std::vector<int64_t>& first_task = scratch.first_pack_task;
    first_task.assign(packs.size() + 1, 0);
    for (size_t p = 0; p < packs.size(); ++p) {
      const int64_t blocks = n_in / dtype_block_size(types[packs[p].act].type);
      first_task[p + 1] = first_task[p] + (blocks + kBlocksPerPackTask - 1) / kBlocksPerPackTask;
    }
    pool.parallel_for(first_task.back(), 1, [&](int64_t b, int64_t end, int) {
      for (int64_t k = b; k < end; ++k) {
        size_t p = 0;
        while (k >= first_task[p + 1]) ++p;
        const MoeMatmulScratch::Pack& pk = packs[p];
        const int64_t blocks = n_in / dtype_block_size(types[pk.act].type);
        const int64_t b0 = (k - first_task[p]) * kBlocksPerPackTask;
        pk.fn(n_in, gath + gath_off[pk.act] + static_cast<size_t>(off[pk.expert]) * row_bytes[pk.act],
              row_bytes[pk.act], cnt[pk.expert], packbuf + pk.offset, b0, std::min(blocks, b0 + kBlocksPerPackTask));
      }
    });
  }

  // 4. Every job's rows in tasks of its grain, in one parallel section.
  std::vector<int64_t>& first_task = scratch.first_task;
  first_task.assign(jobs.size() + 1, 0);
  for (size_t q = 0; q < jobs.size(); ++q)
    first_task[q + 1] = first_task[q] + (jobs[q].n_rows + jobs[q].grain - 1) / jobs[q].grain;
  pool.parallel_for(first_task.back(), 1, [&](int64_t b, int64_t end, int) {
    size_t q = 0;
    for (int64_t k = b; k < end; ++k) {
      while (k >= first_task[q + 1]) ++q;
      const int64_t rb = (k - first_task[q]) * jobs[q].grain;
      matmul_jobs::run(jobs[q], n_in, cnt[job_expert[q]], rb, std::min(jobs[q].n_rows, rb + jobs[q].grain));
    }
  });

  // 5. Back in slot order.
  pool.parallel_for(n_slots, 32, [&](int64_t b, int64_t e, int) {
    for (int i = 0; i < n_targets; ++i) {
      const int64_t n_out = targets[i].experts[0]->ne[1];
      const float* src = reinterpret_cast<const float*>(ybuf + y_off[i]);
      for (int64_t p = b; p < e; ++p)
        std::memcpy(targets[i].y + static_cast<int64_t>(order[p]) * targets[i].ldy, src + p * n_out,
                    static_cast<size_t>(n_out) * sizeof(float));
    }
  });
}

}  // namespace ember
