// CUDA runtime and cuBLAS calls behind Status; see device.h.
#include "kernels/cuda/device.h"

#include <cublas_v2.h>

#include <cstring>
#include <string>

namespace ember::cuda {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status::errorf("{}: {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

Status launch_status(const char* what) { return cuda_status(cudaGetLastError(), what); }

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

Result<DeviceInfo> device_info(int device) {
  cudaDeviceProp p{};
  EMBER_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties"));
  DeviceInfo d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.global_bytes = p.totalGlobalMem;
  d.l2_bytes = p.l2CacheSize;
  d.smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
  return d;
}

Result<size_t> device_free_bytes() {
  size_t free_b = 0, total = 0;
  EMBER_RETURN_IF_ERROR(cuda_status(cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo"));
  return free_b;
}

template <>
Result<DeviceBuffer> DeviceBuffer::alloc(size_t bytes) {
  DeviceBuffer b;
  const size_t padded = (bytes + 255) / 256 * 256;
  if (padded == 0) return b;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, padded);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(e, ("cudaMalloc of " + std::to_string(padded) + " bytes").c_str());
  }
  b.ptr_ = p;
  b.bytes_ = padded;
  return b;
}

template <>
void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);  // an error here (a dead context) leaves nothing to do
  ptr_ = nullptr;
  bytes_ = 0;
}

template <>
Result<PinnedBuffer> PinnedBuffer::alloc(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(e, ("cudaHostAlloc of " + std::to_string(bytes) + " bytes").c_str());
  }
  std::memset(p, 0, bytes);
  b.ptr_ = p;
  b.bytes_ = bytes;
  return b;
}

template <>
void PinnedBuffer::reset() {
  if (ptr_) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

Status Event::record(cudaStream_t s) {
  if (!e_) EMBER_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&e_), "cudaEventCreate"));
  return cuda_status(cudaEventRecord(e_, s), "cudaEventRecord");
}

Status Event::wait() const {
  if (!e_) return Status::ok();
  return cuda_status(cudaEventSynchronize(e_), "cudaEventSynchronize");
}

Result<float> Event::elapsed_ms(const Event& from, const Event& to) {
  if (!from.e_ || !to.e_) return Status::error("cudaEventElapsedTime: an event was never recorded");
  float ms = 0;
  EMBER_RETURN_IF_ERROR(cuda_status(cudaEventElapsedTime(&ms, from.e_, to.e_), "cudaEventElapsedTime"));
  return ms;
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = o.exec_;
    o.exec_ = nullptr;
  }
  return *this;
}

Status Graph::begin_capture(Context& ctx) {
  if (exec_) {
    cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  // Thread-local mode: a call on this thread that is unsafe during capture
  // (an allocation, a synchronous copy) fails the capture instead of
  // running.
  return cuda_status(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

Status Graph::end_capture(Context& ctx, Status enqueued) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(ctx.stream(), &g);  // always: the stream leaves capture
  Status st = enqueued.is_ok() ? cuda_status(e, "cudaStreamEndCapture") : enqueued.with_context("capturing a CUDA graph");
  if (e != cudaSuccess) cudaGetLastError();
  if (st.is_ok() && !g) st = Status::error("cudaStreamEndCapture: no graph");
  if (st.is_ok()) {
    st = cuda_status(cudaGraphInstantiate(&exec_, g, 0), "cudaGraphInstantiate");
    if (!st) exec_ = nullptr;
  }
  if (g) cudaGraphDestroy(g);
  return st;
}

Status Graph::launch(Context& ctx) const {
  if (!exec_) return Status::error("cudaGraphLaunch: the graph was not captured");
  return cuda_status(cudaGraphLaunch(exec_, ctx.stream()), "cudaGraphLaunch");
}

namespace {

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

}  // namespace

Status cublas_status(int s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::errorf("{}: {} ({})", what, cublas_name(static_cast<cublasStatus_t>(s)), s);
}

Result<std::unique_ptr<Context>> Context::create() {
  std::string why;
  if (device_count(&why) == 0) return Status::errorf("CUDA: no device ({})", why);
  std::unique_ptr<Context> c(new Context());
  int dev = 0;
  EMBER_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  EMBER_RETURN_IF_ERROR(
      cuda_status(cudaDeviceGetAttribute(&c->sm_count_, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute"));
  EMBER_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  cublasHandle_t h = nullptr;
  EMBER_RETURN_IF_ERROR(cublas_status(cublasCreate(&h), "cublasCreate"));
  c->cublas_ = h;
  EMBER_RETURN_IF_ERROR(cublas_status(cublasSetStream(h, c->stream_), "cublasSetStream"));
  return c;
}

Context::~Context() {
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_) cudaStreamDestroy(stream_);
}

Status Context::to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync to device");
}

Status Context::to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0)
    EMBER_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync to host"));
  return sync();
}

Status Context::fill(void* dst, int byte, size_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemsetAsync(dst, byte, bytes, stream_), "cudaMemsetAsync");
}

Status Context::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
}

Status Context::sync() { return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

}  // namespace ember::cuda
