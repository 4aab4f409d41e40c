// device_common.cuh: device helpers shared by the kernels (type conversion, warp and block
// reductions, launch checks).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../cuda_check.h"
#include "../cuda_ops.h"

namespace ft::trainer::gpu {

template <typename X>
__device__ __forceinline__ float to_f(X x);
template <>
__device__ __forceinline__ float to_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_f<bf16>(bf16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f<fp16>(fp16 x) {
  return __half2float(x);
}

template <typename X>
__device__ __forceinline__ X from_f(float f);
template <>
__device__ __forceinline__ float from_f<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float f) {
  return __float2bfloat16_rn(f);
}
template <>
__device__ __forceinline__ fp16 from_f<fp16>(float f) {
  return __float2half_rn(f);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of kThreads (a multiple of 32, <= 1024) in a fixed order; every thread
// gets the result. `shared` holds kThreads / 32 values.
template <int kThreads, typename V>
__device__ __forceinline__ V block_sum(V v, V* shared) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  V total = 0;
  for (int w = 0; w < kWarps; ++w) total += shared[w];  // same order in every thread
  __syncthreads();                                      // `shared` may be reused right after
  return total;
}

inline unsigned int ceil_div(size_t a, size_t b) {
  return static_cast<unsigned int>((a + b - 1) / b);
}

// Grid size for a grid-stride elementwise kernel over n elements.
inline unsigned int elementwise_blocks(size_t n, int threads) {
  const size_t want = (n + threads - 1) / threads;
  return static_cast<unsigned int>(want < 65535u * 16u ? (want == 0 ? 1 : want) : 65535u * 16u);
}

}  // namespace ft::trainer::gpu

// After a launch: a bad configuration is reported at once (execution errors surface at the
// next synchronizing call, through FT_CUDA_CHECK there).
#define FT_CUDA_LAUNCH_CHECK() FT_CUDA_CHECK(cudaGetLastError())
