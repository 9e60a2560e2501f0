// The CPU backend's grouped expert matmul (Backend::moe_matmul, contract in
// kernels/moe.h). Internal to the CPU backend.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul_jobs.h"
#include "kernels/moe.h"

namespace ember {

// Reusable buffers of the grouped matmul (grow, never shrink). One caller
// at a time.
class MoeMatmulScratch {
 public:
  // `bytes` bytes at a 64-byte aligned address in buffer `which` (contents
  // not kept across calls).
  uint8_t* get(int which, size_t bytes);
  std::vector<int32_t> order, offset, count;  // slots sorted by expert; per-expert first position and count
  // The call's plan (kept to reuse their memory).
  struct Pack {
    int act;
    PackTokensFn fn;
    int expert;
    size_t offset;
  };
  std::vector<Pack> packs;
  std::vector<matmul_jobs::Job> jobs;
  std::vector<int> job_target, job_expert;
  std::vector<int64_t> first_task, first_pack_task;

 private:
  std::vector<uint8_t> buf_[3];
};

// For slot s < n_slots: targets[i].y[s * ldy + o] = dot(x row x_row[s],
// targets[i].experts[expert[s]] row o), x_row null: row s. Every x row
// read is converted once per activation format (shared by the targets),
// the slots are grouped by expert (stable), each chosen expert's matrix is
// swept once for all its slots by the matmul driver's kernel forms
// (kernels/cpu/matmul_jobs.h: decode rows, few tokens, token lanes, tile,
// AMX where the registry has them), every (expert, matrix) pair's rows
// split over `pool` in one parallel section, and the results written back
// in slot order. Bit-identical to Backend::matmul of the same rows per
// expert.
void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                int n_expert, const ExpertTarget* targets, int n_targets, ThreadPool& pool,
                MoeMatmulScratch& scratch);

}  // namespace ember
