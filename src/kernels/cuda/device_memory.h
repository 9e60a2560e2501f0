// The CUDA backend's memory bookkeeping (kernels/cuda/cuda_backend.cpp):
// which pointers are its device buffers (DeviceRanges), the device copies
// of host buffers an op is handed (Staging), the uploaded model parameters
// handed as plain pointers (ParamCache) and the uploaded weight matrices
// (WeightStore). Host code only; every CUDA error is a Status.
//
// Ownership and threading: owned by one backend (WeightStore: shared by the
// backends of one factory), used from one host thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace ember::cuda {

// Device memory kept free beyond the weights when they are uploaded at
// engine creation (cuBLAS's workspace, the forward pass's buffers, staging).
constexpr size_t kDeviceReserveBytes = size_t{256} << 20;
// Whether `need` bytes of weights fit in `free_bytes` of device memory with
// kDeviceReserveBytes to spare: ok, or an error saying both in GiB.
Status weights_fit(size_t need, size_t free_bytes);

// Device ranges a backend gave out (Backend::alloc).
class DeviceRanges {
 public:
  void add(const void* p, size_t bytes) { r_[reinterpret_cast<uintptr_t>(p)] = bytes; }
  void remove(const void* p) { r_.erase(reinterpret_cast<uintptr_t>(p)); }
  // The range holding p (its base and size), or false: p is not this
  // backend's memory (host memory, for the ops).
  bool find(const void* p, const uint8_t** base = nullptr, size_t* bytes = nullptr) const;

 private:
  std::map<uintptr_t, size_t> r_;
};

// Device copies of host buffers for one op: stage() gives the device address
// of a host range (copied in when the op reads it; the same host pointer
// staged twice in an op gets the same copy); finish() copies the ranges the
// op writes back to the host (waiting for the stream) and frees the space
// for the next op. The space grows as needed and is kept.
class Staging {
 public:
  explicit Staging(Context& ctx) : ctx_(ctx) {}
  Result<void*> stage(const void* host, size_t bytes, bool read, bool write);
  // Whether finish() has ranges to copy back (its caller may wait for the
  // op first, so that the copy's time is the copy's).
  bool has_writes() const;
  Status finish();
  int64_t copied_bytes() const { return copied_; }  // both ways, so far

 private:
  struct Entry {
    const void* host;
    size_t bytes;
    uint8_t* dev;
    bool write;
  };
  Context& ctx_;
  std::vector<DeviceBuffer> chunks_;  // the last one is being filled
  size_t used_ = 0;                   // bytes of the last chunk in use
  size_t wanted_ = 0;                 // bytes this op staged (the next single chunk's size)
  std::vector<Entry> entries_;
  int64_t copied_ = 0;
};

// Device copies of small read-only host inputs that recur from op to op
// (a step's positions, sequence ids, page tables, RoPE tables): a few
// entries, each the host bytes and their device copy; a lookup compares the
// bytes (memcmp), so a hit needs no copy at all and a changed buffer is
// never served stale. The least recently used entry goes first. An entry's
// host bytes live in page-locked memory, so a miss's copy to the device is
// queued without the host waiting (an entry's bytes are rewritten only
// after its last copy is done: its event).
class InputCache {
 public:
  static constexpr size_t kMaxBytes = size_t{1} << 20;  // larger inputs are staged
  static constexpr int kEntries = 32;
  // The device copy of host[0, bytes) (bytes <= kMaxBytes).
  Result<const void*> get(Context& ctx, const void* host, size_t bytes);
  int64_t copied_bytes() const { return copied_; }

 private:
  struct Entry {
    PinnedBuffer host;  // the bytes (n of them)
    size_t n = 0;
    DeviceBuffer dev;
    Event copied;       // after the last copy out of `host`
    uint64_t used = 0;
  };
  std::vector<Entry> e_;
  uint64_t clock_ = 0;
  int64_t copied_ = 0;
};

// Model parameters handed to ops as host pointers (RMSNorm weights, biases,
// RoPE frequencies): uploaded once, the host bytes kept and compared at each
// use (other bytes at the same address: uploaded again).
class ParamCache {
 public:
  Result<const void*> get(Context& ctx, const void* host, size_t bytes);

 private:
  struct Entry {
    std::vector<uint8_t> bytes;
    DeviceBuffer dev;
  };
  std::unordered_map<const void*, Entry> m_;
};

// Weight matrices on the device (upload_weight: the GGUF block layout, or
// f32), keyed by the host data pointer and checked by type, shape and a
// sample of the bytes (another matrix at a reused address: uploaded again).
class WeightStore {
 public:
  Result<const DeviceWeight*> get(Context& ctx, const TensorView& w);
  size_t bytes() const { return bytes_; }
  // Device bytes get(w) would allocate now (0: w is held).
  size_t missing_bytes(const TensorView& w) const;

 private:
  struct Entry {
    DeviceWeight w;
    uint64_t sample = 0;
  };
  std::unordered_map<const void*, Entry> m_;
  size_t bytes_ = 0;
};

}  // namespace ember::cuda
