// gelu.cu: GPT-2 GELU (tanh approximation) forward and backward, elementwise in fp32.
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

template <typename X>
__global__ void gelu_forward_kernel(X* out, const X* inp, size_t n) {
  // out (n), inp (n); may alias
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_f(inp[i]);
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = from_f<X>(0.5f * x * (1.0f + tanhf(u)));
  }
}

template <typename X>
__global__ void gelu_backward_kernel(X* dinp, const X* inp, const X* dout, size_t n) {
  // dinp (n), inp (n), dout (n); dinp may alias dout
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_f(inp[i]);
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float local =
        0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = from_f<X>(local * to_f(dout[i]));
  }
}

}  // namespace

template <typename X>
void gelu_forward(X* out, const X* inp, size_t n, cudaStream_t stream) {
  gelu_forward_kernel<X><<<elementwise_blocks(n, 256), 256, 0, stream>>>(out, inp, n);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void gelu_backward(X* dinp, const X* inp, const X* dout, size_t n, cudaStream_t stream) {
  gelu_backward_kernel<X><<<elementwise_blocks(n, 256), 256, 0, stream>>>(dinp, inp, dout, n);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                            \
  template void gelu_forward<X>(X*, const X*, size_t, cudaStream_t); \
  template void gelu_backward<X>(X*, const X*, const X*, size_t, cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
