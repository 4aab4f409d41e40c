// h2d_cuda.cpp: the CUDA runtime behind the batch uploader: streams, events, pinned/device memory.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "../h2d_internal.h"
#include "cuda_check.h"
#include "ft/core/annotate.h"
#include "ft/trainer/device.h"

namespace ft::trainer {
namespace h2d {
namespace {

class CudaStreamApi final : public StreamApi {
 public:
  Handle create_stream(const char* name) override {
    cudaStream_t s = nullptr;
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    name_stream(s, name);
    return s;
  }
  void destroy_stream(Handle s) noexcept override {
    if (s) cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  void name_stream(Handle s, const char* name) noexcept override { name_cuda_stream(s, name); }
  Handle create_event() override {
    cudaEvent_t e = nullptr;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void destroy_event(Handle e) noexcept override {
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
  void record(Handle e, Handle s) override {
    FT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s)));
  }
  void wait(Handle s, Handle e) override {
    FT_CUDA_CHECK(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0));
  }
  void copy_h2d(void* dst, const void* src, size_t bytes, Handle s) override {
    FT_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(s)));
  }
  void sync_event(Handle e) override {
    FT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
  }
  bool query_event(Handle e) override {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaErrorNotReady) return false;
    FT_CUDA_CHECK(r);
    return true;
  }
  void sync_stream(Handle s) override {
    FT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s)));
  }
  void* alloc_device(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t r = cudaMalloc(&p, bytes);
    if (r == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it
      throw OutOfMemoryError(fmt::format(
          "h2d: cudaMalloc of {} bytes for a batch slot failed (out of memory)", bytes));
    }
    FT_CUDA_CHECK(r);
    return p;
  }
  void free_device(void* p) noexcept override {
    if (p) cudaFree(p);
  }
  void* alloc_host(size_t bytes, bool pinned) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (pinned) {
      void* p = nullptr;
      const cudaError_t r = cudaHostAlloc(&p, rounded, cudaHostAllocPortable);
      if (r == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw OutOfMemoryError(
            fmt::format("h2d: cudaHostAlloc of {} page-locked bytes failed", rounded));
      }
      FT_CUDA_CHECK(r);
      return p;  // page-locked pages are resident: nothing to pre-fault
    }
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);  // fault the pages in now, not inside the first copy
    return p;
  }
  void free_host(void* p, bool pinned) noexcept override {
    if (!p) return;
    if (pinned) {
      cudaFreeHost(p);
    } else {
      std::free(p);
    }
  }
  void set_device(int device) override {
    int cur = -1;
    FT_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != device) FT_CUDA_CHECK(cudaSetDevice(device));
  }
};

}  // namespace
}  // namespace h2d

std::unique_ptr<BatchUploader> make_batch_uploader(const H2DOptions& options,
                                                   void* compute_stream) {
  std::string reason;
  const std::vector<CudaDeviceInfo> devices = cuda_devices(&reason);
  if (devices.empty()) {
    throw ConfigError("h2d: no CUDA device: " + (reason.empty() ? std::string("none") : reason));
  }
  if (options.device < 0 || options.device >= static_cast<int>(devices.size())) {
    throw ConfigError(fmt::format("h2d: CUDA device {} does not exist ({} visible)", options.device,
                                  devices.size()));
  }
  return h2d::make_uploader(std::make_shared<h2d::CudaStreamApi>(), options, compute_stream);
}

}  // namespace ft::trainer
