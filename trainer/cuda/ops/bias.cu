// bias.cu: linear-layer bias gradient (deterministic column sums) and the bias add used when
// cuBLASLt offers no bias epilogue for a shape.
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

constexpr int kColThreads = 128;

int row_chunks(int N) { return N < 64 ? 1 : (N / 64 < 256 ? N / 64 : 256); }

template <typename X>
__global__ void bias_backward_partial_kernel(float* partial, const X* dout, int N, int OC,
                                             int chunks) {
  // partial (chunks, OC): column sums of dout (N,OC) over each chunk of rows
  const int c = blockIdx.x * kColThreads + threadIdx.x;
  const int r = blockIdx.y;
  if (c >= OC) return;
  const int per = (N + chunks - 1) / chunks;
  const int lo = r * per, hi = min(N, lo + per);
  float acc = 0.0f;
  for (int n = lo; n < hi; ++n) acc += to_f(dout[static_cast<size_t>(n) * OC + c]);
  partial[static_cast<size_t>(r) * OC + c] = acc;
}

__global__ void bias_backward_final_kernel(float* dbias, const float* partial, int OC, int chunks) {
  // dbias (OC) += the chunk sums in order
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float acc = 0.0f;
  for (int r = 0; r < chunks; ++r) acc += partial[static_cast<size_t>(r) * OC + c];
  dbias[c] += acc;
}

template <typename X>
__global__ void add_bias_kernel(X* out, const float* bias, int OC, size_t total) {
  // out (N,OC) += bias (OC); total = N*OC
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f<X>(to_f(out[i]) + bias[i % OC]);
  }
}

}  // namespace

size_t bias_backward_scratch(int N, int OC) { return static_cast<size_t>(row_chunks(N)) * OC; }

template <typename X>
void bias_backward(float* dbias, float* scratch, const X* dout, int N, int OC,
                   cudaStream_t stream) {
  const int chunks = row_chunks(N);
  bias_backward_partial_kernel<X>
      <<<dim3(ceil_div(OC, kColThreads), chunks), kColThreads, 0, stream>>>(scratch, dout, N, OC,
                                                                            chunks);
  FT_CUDA_LAUNCH_CHECK();
  bias_backward_final_kernel<<<ceil_div(OC, 256), 256, 0, stream>>>(dbias, scratch, OC, chunks);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void add_bias(X* out, const float* bias, int N, int OC, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(N) * OC;
  add_bias_kernel<X><<<elementwise_blocks(total, 256), 256, 0, stream>>>(out, bias, OC, total);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                           \
  template void bias_backward<X>(float*, float*, const X*, int, int, cudaStream_t); \
  template void add_bias<X>(X*, const float*, int, int, cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
