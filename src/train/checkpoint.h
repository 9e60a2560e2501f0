// Training checkpoints: everything a run needs to continue to the bits an
// uninterrupted run gives (the trainable parameters, AdamW's moments and
// step count, the data position and seed), written atomically
// (train/atomic_file.h), and refused with a clear error when damaged or when
// they belong to another run.
//
// File: magic "EMBERTCK", version, a fixed header (step, data position,
// seed, digests of the model layout, the frozen weights, the data and the
// run's options), then the trainable values, m and v (f32, in tensor
// order), then an FNV-1a checksum of all that and "EMBEREND".
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace ember {

struct CheckpointInfo {
  int64_t step = 0;           // optimizer steps done
  int64_t data_position = 0;  // training windows read
  uint64_t seed = 0;
  uint64_t layout_digest = 0, frozen_digest = 0, data_digest = 0, options_digest = 0;
};

Status save_checkpoint(const std::string& path, const TrainModel& model, AdamW& opt, const CheckpointInfo& info);

// Checks the file (size, magic, version, checksum), then that it belongs to
// this run (`expect`'s digests and seed: a different student, frozen
// weights, data or options is an error naming which), then loads the
// parameters and optimizer state and returns the file's info.
Result<CheckpointInfo> load_checkpoint(const std::string& path, TrainModel& model, AdamW& opt,
                                       const CheckpointInfo& expect);

}  // namespace ember
