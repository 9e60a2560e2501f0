// The CUDA device as ember's host code sees it: every CUDA runtime and
// cuBLAS error becomes a Status (never an abort), device memory is owned by
// move-only DeviceBuffers, and a Context holds the stream and the cuBLAS
// handle the kernels of kernels/cuda/ops.h run on.
//
// Ownership and threading: a Context and the buffers used with it belong to
// one host thread at a time (the engine thread, later); work is queued on
// the Context's stream, in order; copies to the host and sync() wait for it.
// Nothing here runs at static-initialization time, so a program without a
// GPU loads and runs, and device_count() reports 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace ember::cuda {

// Status of a CUDA runtime call: ok, or "<what>: <cuda error name>: <text>".
Status cuda_status(cudaError_t e, const char* what);
// The launch error of the last kernel launch on this thread (cudaGetLastError).
Status launch_status(const char* what);
// Status of a cuBLAS call (a cublasStatus_t).
Status cublas_status(int s, const char* what);

// Devices usable by this process (0 when there is no driver or no GPU; the
// reason, when there is one, in *why).
int device_count(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int sm_count = 0;
  size_t global_bytes = 0;
  int l2_bytes = 0;
  int smem_per_block_optin = 0;  // bytes a block may use after cudaFuncSetAttribute
};
Result<DeviceInfo> device_info(int device = 0);
// Bytes of device memory free now (cudaMemGetInfo on the current device).
Result<size_t> device_free_bytes();

// Where a CudaBuffer's bytes live.
enum class CudaMemory {
  // Device memory: cudaMalloc'd bytes. Sizes are rounded up to 256 bytes, so
  // a buffer is readable to the 16-byte cover of any of its ranges (the
  // mat-vec copies 16-byte units).
  kDevice,
  // Page-locked host memory (cudaHostAlloc), zeroed: copies to and from it
  // run by DMA at the bus's rate and, to the device, without the host
  // waiting.
  kPinned,
};

// A move-only owner of CUDA memory of kind K, freed on destruction or
// reset(). alloc() of 0 bytes gives an empty buffer; a failed allocation is
// a Status naming the call and the size.
template <CudaMemory K>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  ~CudaBuffer() { reset(); }
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  static Result<CudaBuffer> alloc(size_t bytes);
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void reset();  // frees now

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <>
Result<CudaBuffer<CudaMemory::kDevice>> CudaBuffer<CudaMemory::kDevice>::alloc(size_t bytes);
template <>
void CudaBuffer<CudaMemory::kDevice>::reset();
template <>
Result<CudaBuffer<CudaMemory::kPinned>> CudaBuffer<CudaMemory::kPinned>::alloc(size_t bytes);
template <>
void CudaBuffer<CudaMemory::kPinned>::reset();

using DeviceBuffer = CudaBuffer<CudaMemory::kDevice>;
using PinnedBuffer = CudaBuffer<CudaMemory::kPinned>;

// A CUDA event (cudaEventCreate on first record); move-only.
class Event {
 public:
  Event() = default;
  ~Event();
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Status record(cudaStream_t s);
  // Waits until the work before the last record() is done (nothing
  // recorded: returns at once).
  Status wait() const;
  // Milliseconds between two recorded events that the device has passed.
  static Result<float> elapsed_ms(const Event& from, const Event& to);
  bool recorded() const { return e_ != nullptr; }

 private:
  cudaEvent_t e_ = nullptr;
};

class Context;

// A CUDA graph of the work one call queues on a Context's stream:
// capture() runs `enqueue` under stream capture (nothing executes then) and
// instantiates what it queued; launch() queues all of it again, at the
// cost of one launch. The captured work must use fixed device addresses
// and nothing else (no host copies, waits or allocations): what breaks this
// is an error from capture(), never an abort, and the stream stays usable.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& o) noexcept : exec_(o.exec_) { o.exec_ = nullptr; }
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  template <typename F>
  Status capture(Context& ctx, F&& enqueue) {
    EMBER_RETURN_IF_ERROR(begin_capture(ctx));
    return end_capture(ctx, enqueue());
  }
  Status launch(Context& ctx) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  Status begin_capture(Context& ctx);
  Status end_capture(Context& ctx, Status enqueued);
  cudaGraphExec_t exec_ = nullptr;
};

class Context {
 public:
  // A stream and a cuBLAS handle on the current device.
  static Result<std::unique_ptr<Context>> create();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  void* cublas() const { return cublas_; }  // cublasHandle_t
  int sm_count() const { return sm_count_; }

  // Host <-> device copies on the stream (to_host waits for the stream).
  Status to_device(void* dst, const void* src, size_t bytes);
  Status to_host(void* dst, const void* src, size_t bytes);
  Status fill(void* dst, int byte, size_t bytes);  // cudaMemsetAsync
  // Either direction, or device to device (cudaMemcpyDefault); queued: a
  // host destination holds the bytes after sync().
  Status copy(void* dst, const void* src, size_t bytes);
  Status sync();

 private:
  Context() = default;
  cudaStream_t stream_ = nullptr;
  void* cublas_ = nullptr;
  int sm_count_ = 0;
};

}  // namespace ember::cuda
