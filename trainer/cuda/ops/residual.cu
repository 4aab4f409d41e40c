// residual.cu: the residual add out = a + b (its backward is the identity).
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

template <typename X>
__global__ void residual_forward_kernel(X* out, const X* a, const X* b, size_t n) {
  // out (n), a (n), b (n); out may alias a or b
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f<X>(to_f(a[i]) + to_f(b[i]));
  }
}

}  // namespace

template <typename X>
void residual_forward(X* out, const X* a, const X* b, size_t n, cudaStream_t stream) {
  residual_forward_kernel<X><<<elementwise_blocks(n, 256), 256, 0, stream>>>(out, a, b, n);
  FT_CUDA_LAUNCH_CHECK();
}

template void residual_forward<float>(float*, const float*, const float*, size_t, cudaStream_t);
template void residual_forward<bf16>(bf16*, const bf16*, const bf16*, size_t, cudaStream_t);
template void residual_forward<fp16>(fp16*, const fp16*, const fp16*, size_t, cudaStream_t);

}  // namespace ft::trainer::gpu
