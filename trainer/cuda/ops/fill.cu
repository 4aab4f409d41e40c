// fill.cu: a deliberately slow writer (spin, then fill) for the allocator's stream-ordering tests.
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

__global__ void spin_then_fill_kernel(float* out, size_t n, float value, long long cycles) {
  // out (n)
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

}  // namespace

void spin_then_fill(float* out, size_t n, float value, long long cycles, cudaStream_t stream) {
  spin_then_fill_kernel<<<elementwise_blocks(n, 256), 256, 0, stream>>>(out, n, value, cycles);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::trainer::gpu
