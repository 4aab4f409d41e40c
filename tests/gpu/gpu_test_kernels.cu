// gpu_test_kernels.cu: kernels the GPU tests use to keep a stream busy.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu_test_kernels.h"

namespace ft::gputest {
namespace {

__device__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread spins until `ns` nanoseconds have passed on the device's global timer.
__global__ void spin_kernel(int64_t ns) {
  const uint64_t t0 = global_timer_ns();
  while (global_timer_ns() - t0 < static_cast<uint64_t>(ns)) {
  }
}

}  // namespace

void launch_spin(void* stream, int64_t ns) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns);
}

}  // namespace ft::gputest
