// encoder.cu: token + position embedding (GPT-2 wte/wpe) forward, and a deterministic backward (no
// atomics).
#include <algorithm>
#include <numeric>

#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

template <typename X>
__global__ void encoder_forward_kernel(X* out, const int32_t* inp, const float* wte,
                                       const float* wpe, int T, int C, size_t total) {
  // out (B,T,C), inp (B,T), wte (V,C), wpe (maxT,C); total = B*T*C
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T);
    const size_t tok = static_cast<size_t>(inp[bt]);
    out[i] = from_f<X>(wte[tok * C + c] + wpe[static_cast<size_t>(t) * C + c]);
  }
}

// One block per token bucket: threads over channels, positions summed in list order.
template <typename X>
__global__ void encoder_backward_wte_kernel(float* dwte, const X* dout, const int32_t* order,
                                            const int32_t* start, const int32_t* token, int C) {
  // dwte (V,C), dout (B,T,C), order (B*T), start (U+1), token (U)
  const int u = blockIdx.x;
  const int lo = start[u], hi = start[u + 1];
  float* row = dwte + static_cast<size_t>(token[u]) * C;  // (C)
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int k = lo; k < hi; ++k) acc += to_f(dout[static_cast<size_t>(order[k]) * C + c]);
    row[c] += acc;
  }
}

template <typename X>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const X* dout, int B, int T, int C) {
  // dwpe (maxT,C), dout (B,T,C): one thread per (t, c), b summed in order
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T) * C) return;
  const size_t t = i / C;
  const size_t c = i % C;
  float acc = 0.0f;
  for (int b = 0; b < B; ++b) acc += to_f(dout[(static_cast<size_t>(b) * T + t) * C + c]);
  dwpe[i] += acc;
}

}  // namespace

void TokenBuckets::build(const int32_t* inp, int n) {
  // Counting sort by token, O(n + V), positions ascending within a token (the host builds
  // this before the step's first kernel, so it should stay cheap).
  int32_t vmax = 0;
  for (int k = 0; k < n; ++k) vmax = std::max(vmax, inp[k]);
  count.assign(static_cast<size_t>(vmax) + 2, 0);
  for (int k = 0; k < n; ++k) ++count[static_cast<size_t>(inp[k]) + 1];
  start.clear();
  token.clear();
  for (int32_t v = 0; v <= vmax; ++v) {
    if (count[static_cast<size_t>(v) + 1] > 0) {
      start.push_back(count[v]);  // running offset before adding v's count
      token.push_back(v);
    }
    count[static_cast<size_t>(v) + 1] += count[v];  // count[v + 1] = first slot after token v
  }
  start.push_back(n);
  order.resize(n);
  for (int k = 0; k < n; ++k) order[count[inp[k]]++] = k;
}

template <typename X>
void encoder_forward(X* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                     int C, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(B) * T * C;
  encoder_forward_kernel<X>
      <<<elementwise_blocks(total, 256), 256, 0, stream>>>(out, inp, wte, wpe, T, C, total);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void encoder_backward(float* dwte, float* dwpe, const X* dout, const int32_t* order,
                      const int32_t* start, const int32_t* token, int num_buckets, int B, int T,
                      int C, cudaStream_t stream) {
  if (num_buckets > 0) {
    encoder_backward_wte_kernel<X>
        <<<num_buckets, 256, 0, stream>>>(dwte, dout, order, start, token, C);
    FT_CUDA_LAUNCH_CHECK();
  }
  const size_t tc = static_cast<size_t>(T) * C;
  encoder_backward_wpe_kernel<X><<<ceil_div(tc, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                                         \
  template void encoder_forward<X>(X*, const int32_t*, const float*, const float*, int, int, int, \
                                   cudaStream_t);                                                 \
  template void encoder_backward<X>(float*, float*, const X*, const int32_t*, const int32_t*,     \
                                    const int32_t*, int, int, int, int, cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
