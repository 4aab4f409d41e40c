// cast.cu: fp32 <-> bf16/fp16 conversions (round to nearest even), as trainer/ops/precision.cpp.
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

template <typename X>
__global__ void cast_from_fp32_kernel(X* out, const float* in, size_t n) {
  // out (n), in (n)
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f<X>(in[i]);
  }
}

template <typename X>
__global__ void cast_to_fp32_kernel(float* out, const X* in, size_t n) {
  // out (n), in (n)
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = to_f(in[i]);
  }
}

}  // namespace

template <typename X>
void cast_from_fp32(X* out, const float* in, size_t n, cudaStream_t stream) {
  cast_from_fp32_kernel<X><<<elementwise_blocks(n, 256), 256, 0, stream>>>(out, in, n);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void cast_to_fp32(float* out, const X* in, size_t n, cudaStream_t stream) {
  cast_to_fp32_kernel<X><<<elementwise_blocks(n, 256), 256, 0, stream>>>(out, in, n);
  FT_CUDA_LAUNCH_CHECK();
}

template void cast_from_fp32<bf16>(bf16*, const float*, size_t, cudaStream_t);
template void cast_from_fp32<fp16>(fp16*, const float*, size_t, cudaStream_t);
template void cast_from_fp32<float>(float*, const float*, size_t, cudaStream_t);
template void cast_to_fp32<bf16>(float*, const bf16*, size_t, cudaStream_t);
template void cast_to_fp32<fp16>(float*, const fp16*, size_t, cudaStream_t);
template void cast_to_fp32<float>(float*, const float*, size_t, cudaStream_t);

}  // namespace ft::trainer::gpu
