// The CUDA backend's memory bookkeeping; see device_memory.h.
#include "kernels/cuda/device_memory.h"

#include <algorithm>
#include <cstring>

namespace ember::cuda {
namespace {

constexpr size_t kStageAlign = 256;
constexpr size_t kMinChunk = size_t{1} << 20;

size_t align_up(size_t v) { return (v + kStageAlign - 1) / kStageAlign * kStageAlign; }

// A hash of the type, shape, size and 16 spaced 8-byte samples of a matrix.
uint64_t sample_of(const TensorView& w) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<uint64_t>(w.type));
  mix(static_cast<uint64_t>(w.ne[0]));
  mix(static_cast<uint64_t>(w.nrows()));
  mix(w.nbytes);
  const auto* p = static_cast<const uint8_t*>(w.data);
  if (!p || w.nbytes < 8) return h;
  for (int i = 0; i < 16; ++i) {
    uint64_t v;
    std::memcpy(&v, p + (w.nbytes - 8) / 15 * static_cast<size_t>(i), 8);
    mix(v);
  }
  return h;
}

}  // namespace

Status weights_fit(size_t need, size_t free_bytes) {
  if (need + kDeviceReserveBytes <= free_bytes) return Status::ok();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return Status::errorf(
      "cuda: the model's weights need {:.2f} GiB of device memory and {:.2f} GiB are free ({:.2f} GiB kept for "
      "the workspace): use a smaller model or quantization, or free the device",
      need / kGiB, free_bytes / kGiB, kDeviceReserveBytes / kGiB);
}

bool DeviceRanges::find(const void* p, const uint8_t** base, size_t* bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = r_.upper_bound(a);
  if (it == r_.begin()) return false;
  --it;
  if (a >= it->first + it->second) return false;
  if (base) *base = reinterpret_cast<const uint8_t*>(it->first);
  if (bytes) *bytes = it->second;
  return true;
}

Result<void*> Staging::stage(const void* host, size_t bytes, bool read, bool write) {
  for (Entry& e : entries_)
    if (e.host == host && e.bytes >= bytes) {
      e.write = e.write || write;
      return static_cast<void*>(e.dev);
    }
  const size_t need = align_up(std::max<size_t>(bytes, 1));
  wanted_ += need;
  if (chunks_.empty() || used_ + need > chunks_.back().bytes()) {
    auto b = DeviceBuffer::alloc(std::max({need, kMinChunk, chunks_.empty() ? size_t{0} : 2 * chunks_.back().bytes()}));
    if (!b) return b.status().with_context("staging host buffers on the device");
    chunks_.push_back(std::move(*b));
    used_ = 0;
  }
  uint8_t* dev = chunks_.back().as<uint8_t>() + used_;
  used_ += need;
  if (read && bytes > 0) {
    EMBER_RETURN_IF_ERROR(ctx_.to_device(dev, host, bytes));
    copied_ += static_cast<int64_t>(bytes);
  }
  entries_.push_back({host, bytes, dev, write});
  return static_cast<void*>(dev);
}

bool Staging::has_writes() const {
  for (const Entry& e : entries_)
    if (e.write && e.bytes > 0) return true;
  return false;
}

Status Staging::finish() {
  Status st;
  bool copied = false;
  for (const Entry& e : entries_)
    if (e.write && e.bytes > 0 && st.is_ok()) {
      st = ctx_.copy(const_cast<void*>(e.host), e.dev, e.bytes);
      copied = true;
      copied_ += static_cast<int64_t>(e.bytes);
    }
  if (copied && st.is_ok()) st = ctx_.sync();
  entries_.clear();
  if (chunks_.size() > 1) {
    // One chunk that holds what this op needed, for the next ops (cudaFree
    // waits for the device: the chunks' readers are done).
    const size_t size = align_up(wanted_);
    chunks_.clear();
    auto b = DeviceBuffer::alloc(std::max(size, kMinChunk));
    if (b) chunks_.push_back(std::move(*b));
  }
  used_ = 0;
  wanted_ = 0;
  return st;
}

Result<const void*> InputCache::get(Context& ctx, const void* host, size_t bytes) {
  ++clock_;
  Entry* lru = nullptr;
  for (Entry& e : e_) {
    if (e.n == bytes && e.host.data() && std::memcmp(e.host.data(), host, bytes) == 0) {
      e.used = clock_;
      return static_cast<const void*>(e.dev.data());
    }
    if (!lru || e.used < lru->used) lru = &e;
  }
  if (static_cast<int>(e_.size()) < kEntries) {
    e_.emplace_back();
    lru = &e_.back();
  }
  // The entry's last copy out of its host bytes must be done before they
  // change (usually long done: it is the least recently used).
  lru->n = 0;
  EMBER_RETURN_IF_ERROR(lru->copied.wait());
  if (lru->dev.bytes() < bytes || lru->host.bytes() < bytes) {
    const size_t size = std::max<size_t>(bytes, 4096);
    lru->dev.reset();
    lru->host.reset();
    auto b = DeviceBuffer::alloc(size);
    if (!b) return b.status().with_context("caching an op's input on the device");
    lru->dev = std::move(*b);
    auto h = PinnedBuffer::alloc(size);
    if (!h) return h.status().with_context("page-locked host memory for an op's inputs");
    lru->host = std::move(*h);
  }
  std::memcpy(lru->host.data(), host, bytes);
  EMBER_RETURN_IF_ERROR(ctx.to_device(lru->dev.data(), lru->host.data(), bytes));
  EMBER_RETURN_IF_ERROR(lru->copied.record(ctx.stream()));
  lru->n = bytes;
  lru->used = clock_;
  copied_ += static_cast<int64_t>(bytes);
  return static_cast<const void*>(lru->dev.data());
}

Result<const void*> ParamCache::get(Context& ctx, const void* host, size_t bytes) {
  if (!host) return static_cast<const void*>(nullptr);
  Entry& e = m_[host];
  if (e.bytes.size() == bytes && e.dev.data() && std::memcmp(e.bytes.data(), host, bytes) == 0)
    return static_cast<const void*>(e.dev.data());
  e.bytes.assign(static_cast<const uint8_t*>(host), static_cast<const uint8_t*>(host) + bytes);
  auto b = DeviceBuffer::alloc(bytes);
  if (!b) return b.status().with_context("uploading a model parameter");
  e.dev = std::move(*b);
  EMBER_RETURN_IF_ERROR(ctx.to_device(e.dev.data(), e.bytes.data(), bytes));
  return static_cast<const void*>(e.dev.data());
}

size_t WeightStore::missing_bytes(const TensorView& w) const {
  auto it = m_.find(w.data);
  if (it != m_.end() && it->second.sample == sample_of(w)) return 0;
  const size_t bytes = static_cast<size_t>(w.row_bytes()) * static_cast<size_t>(w.nrows());  // upload_weight's
  return (bytes + 255) / 256 * 256;
}

Result<const DeviceWeight*> WeightStore::get(Context& ctx, const TensorView& w) {
  const uint64_t sample = sample_of(w);
  auto it = m_.find(w.data);
  if (it != m_.end() && it->second.sample == sample) return &it->second.w;
  if (it != m_.end()) {
    bytes_ -= it->second.w.buf.bytes();
    m_.erase(it);
  }
  auto d = upload_weight(ctx, w);
  if (!d) return d.status();
  bytes_ += d->buf.bytes();
  Entry& e = m_[w.data];
  e.w = std::move(*d);
  e.sample = sample;
  return &e.w;
}

}  // namespace ember::cuda
