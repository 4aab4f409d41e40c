// layernorm.cu: LayerNorm over channels (eps 1e-5): warp-per-row forward and input gradient,
// and a deterministic two-pass column reduction for the weight and bias gradients.
#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // one warp per row, 256 threads
constexpr int kColThreads = 128;  // channels per block in the column reduction

template <typename X>
__global__ void layernorm_forward_kernel(X* out, float* mean, float* rstd, const X* inp,
                                         const float* weight, const float* bias, int N, int C) {
  // out (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C)
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const X* x = inp + static_cast<size_t>(n) * C;  // (C)
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_f(x[c]);
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f(x[c]) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + kEps);
  X* o = out + static_cast<size_t>(n) * C;  // (C)
  for (int c = lane; c < C; c += 32) o[c] = from_f<X>((to_f(x[c]) - m) * s * weight[c] + bias[c]);
  if (lane == 0) {
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
}

template <typename X>
__global__ void layernorm_backward_dinp_kernel(X* dinp, const X* dout, const X* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  // dinp (N,C) accumulates, dout (N,C), inp (N,C), weight (C), mean (N), rstd (N)
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const size_t row = static_cast<size_t>(n) * C;
  const float m = mean[n], s = rstd[n];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f(inp[row + c]) - m) * s;
    const float dnorm = weight[c] * to_f(dout[row + c]);
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f(inp[row + c]) - m) * s;
    const float dnorm = weight[c] * to_f(dout[row + c]);
    const float g = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    dinp[row + c] = from_f<X>(to_f(dinp[row + c]) + g);
  }
}

// Rows per chunk of the column reduction: a function of N only (deterministic).
int row_chunks(int N) { return N < 64 ? 1 : (N / 64 < 256 ? N / 64 : 256); }

template <typename X>
__global__ void layernorm_backward_partial_kernel(float* partial, const X* dout, const X* inp,
                                                  const float* mean, const float* rstd, int N,
                                                  int C, int chunks) {
  // partial (chunks, 2, C): per chunk of rows, sum of dout*norm and of dout per channel
  const int c = blockIdx.x * kColThreads + threadIdx.x;
  const int r = blockIdx.y;
  if (c >= C) return;
  const int per = (N + chunks - 1) / chunks;
  const int lo = r * per, hi = min(N, lo + per);
  float dw = 0.0f, db = 0.0f;
  for (int n = lo; n < hi; ++n) {
    const size_t i = static_cast<size_t>(n) * C + c;
    const float d = to_f(dout[i]);
    dw += d * (to_f(inp[i]) - mean[n]) * rstd[n];
    db += d;
  }
  partial[(static_cast<size_t>(r) * 2) * C + c] = dw;
  partial[(static_cast<size_t>(r) * 2 + 1) * C + c] = db;
}

__global__ void layernorm_backward_final_kernel(float* dweight, float* dbias, const float* partial,
                                                int C, int chunks) {
  // dweight (C), dbias (C) accumulate the chunks in order
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int r = 0; r < chunks; ++r) {
    dw += partial[(static_cast<size_t>(r) * 2) * C + c];
    db += partial[(static_cast<size_t>(r) * 2 + 1) * C + c];
  }
  dweight[c] += dw;
  dbias[c] += db;
}

}  // namespace

size_t layernorm_backward_scratch(int N, int C) {
  return static_cast<size_t>(row_chunks(N)) * 2 * C;
}

template <typename X>
void layernorm_forward(X* out, float* mean, float* rstd, const X* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream) {
  layernorm_forward_kernel<X><<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, N, C);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void layernorm_backward(X* dinp, float* dweight, float* dbias, float* scratch, const X* dout,
                        const X* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
  layernorm_backward_dinp_kernel<X><<<ceil_div(N, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  FT_CUDA_LAUNCH_CHECK();
  const int chunks = row_chunks(N);
  layernorm_backward_partial_kernel<X>
      <<<dim3(ceil_div(C, kColThreads), chunks), kColThreads, 0, stream>>>(scratch, dout, inp, mean,
                                                                           rstd, N, C, chunks);
  FT_CUDA_LAUNCH_CHECK();
  layernorm_backward_final_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(dweight, dbias, scratch, C,
                                                                        chunks);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                                      \
  template void layernorm_forward<X>(X*, float*, float*, const X*, const float*, const float*, \
                                     int, int, cudaStream_t);                                  \
  template void layernorm_backward<X>(X*, float*, float*, float*, const X*, const X*,          \
                                      const float*, const float*, const float*, int, int,      \
                                      cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
