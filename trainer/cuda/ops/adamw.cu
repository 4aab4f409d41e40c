// adamw.cu: fused AdamW (bias-corrected, decoupled weight decay) on fp32 master weights, writing
// the bf16/fp16 copy the GEMMs read in the same pass.
#include <cmath>

#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

template <typename X>
__global__ void adamw_kernel(float* params, X* params_lp, const float* grads, float* m, float* v,
                             size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, float inv_bc1, float inv_bc2) {
  // params, grads, m, v, params_lp (n)
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1;
    const float vhat = vi * inv_bc2;
    const float p = params[i];
    const float np = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
    params[i] = np;
    if (params_lp != nullptr) params_lp[i] = from_f<X>(np);
  }
}

}  // namespace

template <typename X>
void adamw_update(float* params, X* params_lp, const float* grads, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t, cudaStream_t stream) {
  // Bias corrections as the CPU twin: in double, then rounded to float.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  adamw_kernel<X><<<elementwise_blocks(n, 256), 256, 0, stream>>>(
      params, params_lp, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
      1.0f / bc1, 1.0f / bc2);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                                       \
  template void adamw_update<X>(float*, X*, const float*, float*, float*, size_t, float, float, \
                                float, float, float, float, int, cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
