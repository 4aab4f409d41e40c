// crossentropy.cu: fused softmax + cross-entropy over padded logits, one block per row: one read
// pass (online max and sum), then dlogits written in place; padded vocabulary columns get 0.
#include <cmath>

#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

constexpr int kThreads = 256;

// (max, sum of exp(x - max)) pairs combine associatively; -inf marks "no element yet".
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (a.m < b.m) {
    const MaxSum t = a;
    a = b;
    b = t;
  }
  if (b.m == -INFINITY) return a;
  return {a.m, a.s + b.s * expf(b.m - a.m)};
}

// The row's (max, sum) over its first V columns, identical in every thread of the block.
template <typename X>
__device__ MaxSum row_max_sum(const X* row, int V) {
  __shared__ MaxSum shared[kThreads / 32];
  MaxSum acc{-INFINITY, 0.0f};
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float x = to_f(row[i]);
    if (x > acc.m) {
      acc.s = acc.s * expf(acc.m - x) + 1.0f;
      acc.m = x;
    } else {
      acc.s += expf(x - acc.m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, o),
                       __shfl_xor_sync(0xffffffffu, acc.s, o)};
    acc = combine(acc, other);
  }
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = acc;
  __syncthreads();
  MaxSum total = shared[0];
  for (int w = 1; w < kThreads / 32; ++w) total = combine(total, shared[w]);
  return total;
}

template <typename X>
__global__ void crossentropy_fwd_bwd_kernel(X* logits, float* losses, const int32_t* targets, int V,
                                            int Vp, float dloss) {
  // logits (N,Vp) -> dlogits in place, losses (N), targets (N)
  const int n = blockIdx.x;
  X* row = logits + static_cast<size_t>(n) * Vp;  // (Vp)
  const int tgt = targets[n];
  const float x_tgt = to_f(row[tgt]);  // read before any thread overwrites the row
  const MaxSum ms = row_max_sum(row, V);
  if (threadIdx.x == 0) losses[n] = logf(ms.s) + ms.m - x_tgt;
  const float inv = 1.0f / ms.s;
  for (int i = threadIdx.x; i < Vp; i += kThreads) {
    float d = 0.0f;
    if (i < V) d = dloss * (expf(to_f(row[i]) - ms.m) * inv - (i == tgt ? 1.0f : 0.0f));
    row[i] = from_f<X>(d);
  }
}

template <typename X>
__global__ void crossentropy_fwd_kernel(const X* logits, float* losses, const int32_t* targets,
                                        int V, int Vp) {
  // logits (N,Vp), losses (N), targets (N)
  const int n = blockIdx.x;
  const X* row = logits + static_cast<size_t>(n) * Vp;  // (Vp)
  const MaxSum ms = row_max_sum(row, V);
  if (threadIdx.x == 0) losses[n] = logf(ms.s) + ms.m - to_f(row[targets[n]]);
}

}  // namespace

template <typename X>
void crossentropy_forward_backward(X* logits, float* losses, const int32_t* targets, int N, int V,
                                   int Vp, float dloss, cudaStream_t stream) {
  if (N == 0) return;
  crossentropy_fwd_bwd_kernel<X><<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void crossentropy_forward(const X* logits, float* losses, const int32_t* targets, int N, int V,
                          int Vp, cudaStream_t stream) {
  if (N == 0) return;
  crossentropy_fwd_kernel<X><<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                                          \
  template void crossentropy_forward_backward<X>(X*, float*, const int32_t*, int, int, int, float, \
                                                 cudaStream_t);                                    \
  template void crossentropy_forward<X>(const X*, float*, const int32_t*, int, int, int,           \
                                        cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
