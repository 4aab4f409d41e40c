// device_allocator.cu: the CUDA backend of the device caching allocator: cudaMalloc/cudaFree and
// events.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda_check.h"
#include "device_allocator.h"

namespace ft::trainer::gpu {
namespace {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}

  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky, but clear it so later checks see a clean state
      return nullptr;
    }
    FT_CUDA_CHECK(err);
    return p;
  }
  void release(void* ptr, size_t) override { FT_CUDA_CHECK(cudaFree(ptr)); }
  void synchronize() override { FT_CUDA_CHECK(cudaDeviceSynchronize()); }
  EventId record_event(StreamId stream) override {
    cudaEvent_t e = nullptr;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    FT_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return reinterpret_cast<EventId>(e);
  }
  bool event_done(EventId event) override {
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    FT_CUDA_CHECK(err);
    return true;
  }
  void stream_wait(StreamId stream, EventId event) override {
    FT_CUDA_CHECK(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream),
                                      reinterpret_cast<cudaEvent_t>(event), 0));
  }
  void destroy_event(EventId event) override {
    // Safe while a stream still waits on it: the runtime frees it once it has completed.
    cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));
  }
  std::string describe() override {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return fmt::format("cudaMalloc on device {}", device_);
    }
    return fmt::format("cudaMalloc on device {}: {} free of {}", device_, format_bytes(free_b),
                       format_bytes(total_b));
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device) {
  FT_CUDA_CHECK(cudaSetDevice(device));
  return std::make_unique<CudaDeviceMemory>(device);
}

}  // namespace ft::trainer::gpu
