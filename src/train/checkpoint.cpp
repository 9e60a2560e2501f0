// Checkpoint files; see checkpoint.h.
#include "train/checkpoint.h"

#include <cstring>
#include <vector>

#include "train/atomic_file.h"

namespace ember {
namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'E', 'R', 'T', 'C', 'K'};
constexpr char kEnd[8] = {'E', 'M', 'B', 'E', 'R', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  int64_t step, data_position, n_trainable;
  uint64_t seed, layout_digest, frozen_digest, data_digest, options_digest;
};

}  // namespace

Status save_checkpoint(const std::string& path, const TrainModel& model, AdamW& opt, const CheckpointInfo& info) {
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.step = info.step;
  h.data_position = info.data_position;
  h.n_trainable = model.n_trainable();
  h.seed = info.seed;
  h.layout_digest = info.layout_digest;
  h.frozen_digest = info.frozen_digest;
  h.data_digest = info.data_digest;
  h.options_digest = info.options_digest;
  std::vector<float> p(static_cast<size_t>(model.n_trainable()));
  for (const TrainTensor& t : model.tensors())
    if (t.trainable) std::copy(model.param(&t), model.param(&t) + t.size(), p.begin() + t.grad_offset);
  uint64_t sum = fnv1a64(&h, sizeof(h));
  sum = fnv1a64(p.data(), p.size() * sizeof(float), sum);
  sum = fnv1a64(opt.m().data(), opt.m().size() * sizeof(float), sum);
  sum = fnv1a64(opt.v().data(), opt.v().size() * sizeof(float), sum);
  return write_file_atomic(path, [&](std::FILE* f) {
    return std::fwrite(&h, sizeof(h), 1, f) == 1 && std::fwrite(p.data(), sizeof(float), p.size(), f) == p.size() &&
           std::fwrite(opt.m().data(), sizeof(float), opt.m().size(), f) == opt.m().size() &&
           std::fwrite(opt.v().data(), sizeof(float), opt.v().size(), f) == opt.v().size() &&
           std::fwrite(&sum, sizeof(sum), 1, f) == 1 && std::fwrite(kEnd, 1, 8, f) == 8;
  });
}

Result<CheckpointInfo> load_checkpoint(const std::string& path, TrainModel& model, AdamW& opt,
                                       const CheckpointInfo& expect) {
  auto bytes = read_whole_file(path);
  if (!bytes) return bytes.status();
  const std::string& s = *bytes;
  Header h{};
  if (s.size() < 8 || std::memcmp(s.data(), kMagic, 8) != 0)
    return Status::errorf("'{}' is not an ember training checkpoint", path);
  if (s.size() < sizeof(h)) return Status::errorf("checkpoint '{}' is truncated ({} bytes)", path, s.size());
  std::memcpy(&h, s.data(), sizeof(h));
  if (h.version != kVersion)
    return Status::errorf("checkpoint '{}' has version {}; this ember reads version {}", path, h.version, kVersion);
  if (h.n_trainable < 0 || h.n_trainable > (int64_t{1} << 40))
    return Status::errorf("checkpoint '{}' is damaged (header)", path);
  const size_t n = static_cast<size_t>(h.n_trainable);
  const size_t want = sizeof(h) + 3 * n * sizeof(float) + sizeof(uint64_t) + 8;
  if (s.size() != want)
    return Status::errorf("checkpoint '{}' is {} bytes where its header says {}: truncated or damaged", path,
                          s.size(), want);
  if (std::memcmp(s.data() + s.size() - 8, kEnd, 8) != 0)
    return Status::errorf("checkpoint '{}' is damaged (no end marker)", path);
  uint64_t stored;
  std::memcpy(&stored, s.data() + s.size() - 16, sizeof(stored));
  if (fnv1a64(s.data(), s.size() - 16) != stored)
    return Status::errorf("checkpoint '{}' is damaged (checksum mismatch)", path);
  if (h.layout_digest != expect.layout_digest || h.n_trainable != model.n_trainable())
    return Status::errorf("checkpoint '{}' belongs to another student (its tensors, sizes or trained tensors "
                          "differ: same --student and --train needed)",
                          path);
  if (h.frozen_digest != expect.frozen_digest)
    return Status::errorf("checkpoint '{}' belongs to a student whose frozen weights differ from this one's", path);
  if (h.data_digest != expect.data_digest)
    return Status::errorf("checkpoint '{}' was written for other training data (--data, --seq-len or the held-out "
                          "split differ)",
                          path);
  if (h.options_digest != expect.options_digest || h.seed != expect.seed)
    return Status::errorf("checkpoint '{}' was written with other training options (seed, batch, steps, learning "
                          "rate, loss or teacher settings must be the same to resume)",
                          path);
  const float* p = reinterpret_cast<const float*>(s.data() + sizeof(h));
  for (const TrainTensor& t : model.tensors())
    if (t.trainable) std::copy(p + t.grad_offset, p + t.grad_offset + t.size(), model.param(&t));
  std::memcpy(opt.m().data(), p + n, n * sizeof(float));
  std::memcpy(opt.v().data(), p + 2 * n, n * sizeof(float));
  opt.set_steps_done(h.step);
  CheckpointInfo info = expect;
  info.step = h.step;
  info.data_position = h.data_position;
  return info;
}

}  // namespace ember
