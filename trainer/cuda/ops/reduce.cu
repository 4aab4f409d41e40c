// reduce.cu: deterministic sums in double (loss totals, the gradient norm): fixed partition, fixed
// tree.
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

constexpr int kThreads = 256;

template <bool kSquare>
__global__ void reduce_partial_kernel(double* partials, const float* x, size_t n) {
  // partials (kReducePartials): block b sums its contiguous range of x (n)
  __shared__ double shared[kThreads / 32];
  const size_t per = (n + kReducePartials - 1) / kReducePartials;
  const size_t lo = blockIdx.x * per;
  const size_t hi = lo + per < n ? lo + per : n;
  double acc = 0.0;
  for (size_t i = lo + threadIdx.x; i < hi; i += kThreads) {
    const double v = x[i];
    acc += kSquare ? v * v : v;
  }
  const double total = block_sum<kThreads>(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void reduce_final_kernel(double* out, const double* partials) {
  // out (1) = sum of partials (kReducePartials)
  __shared__ double shared[kReducePartials / 32];
  const double total = block_sum<kReducePartials>(partials[threadIdx.x], shared);
  if (threadIdx.x == 0) *out = total;
}

template <bool kSquare>
void reduce(double* out, double* partials, const float* x, size_t n, cudaStream_t stream) {
  reduce_partial_kernel<kSquare><<<kReducePartials, kThreads, 0, stream>>>(partials, x, n);
  FT_CUDA_LAUNCH_CHECK();
  reduce_final_kernel<<<1, kReducePartials, 0, stream>>>(out, partials);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void sum_to_double(double* out, double* partials, const float* x, size_t n, cudaStream_t stream) {
  reduce<false>(out, partials, x, n, stream);
}

void sum_squares(double* out, double* partials, const float* x, size_t n, cudaStream_t stream) {
  reduce<true>(out, partials, x, n, stream);
}

}  // namespace ft::trainer::gpu
