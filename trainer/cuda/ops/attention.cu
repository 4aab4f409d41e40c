// attention.cu: causal multi-head attention without a (B,NH,T,T) tensor: a warp-per-row fp32
// kernel (online softmax over 32-key chunks) for any head size <= 256, and the dispatch to the
// tensor-core kernels (attention_tc.cu) for bf16/fp16 with HS == 64.
#include <cmath>
#include <string>
#include <type_traits>

#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

constexpr int kWarps = 4;  // rows per block
constexpr int kMaxHS = 256;
constexpr int kPerLane = kMaxHS / 32;  // head dims per lane (registers)
constexpr unsigned kFull = 0xffffffffu;

struct RowIndex {
  int b, h, t;
  size_t bh;
};
// Global warp -> (b, h, t), t fastest. Returns false past the end.
__device__ __forceinline__ bool row_index(int B, int NH, int T, RowIndex* r) {
  const size_t gw = static_cast<size_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (gw >= static_cast<size_t>(B) * NH * T) return false;
  r->t = static_cast<int>(gw % T);
  r->bh = gw / T;
  r->h = static_cast<int>(r->bh % NH);
  r->b = static_cast<int>(r->bh / NH);
  return true;
}

template <typename X>
__device__ __forceinline__ float dot_row(const float* a, const X* b, int HS) {
  float acc = 0.0f;
  for (int d = 0; d < HS; ++d) acc += a[d] * to_f(b[d]);
  return acc;
}

template <typename X>
__global__ void attention_forward_rows_kernel(X* out, float* lse, const X* qkv, int B, int T, int C,
                                              int NH, float scale) {
  // out (B,T,C), lse (B,NH,T), qkv (B,T,3C); one warp per (b, h, query t)
  __shared__ float sq[kWarps][kMaxHS];
  RowIndex ri;
  if (!row_index(B, NH, T, &ri)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int HS = C / NH, t = ri.t;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const X* head = qkv + static_cast<size_t>(ri.b) * T * C3 + ri.h * HS;  // row j at head + j*C3
  for (int d = lane; d < HS; d += 32) sq[warp][d] = to_f(head[t * C3 + d]);
  __syncwarp();
  float o[kPerLane] = {};
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 <= t; k0 += 32) {  // key chunks up to the diagonal (warp-uniform)
    const int j = k0 + lane;
    float s = -INFINITY;
    if (j <= t) s = dot_row(sq[warp], head + j * C3 + C, HS) * scale;
    const float m_new = fmaxf(m, warp_max(s));  // key k0 <= t: finite
    const float corr = expf(m - m_new);
    const float p = j <= t ? expf(s - m_new) : 0.0f;
    l = l * corr + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) o[k] *= corr;
    const int nvalid = min(32, t - k0 + 1);
    for (int jj = 0; jj < nvalid; ++jj) {
      const float pj = __shfl_sync(kFull, p, jj);
      const X* v = head + (k0 + jj) * C3 + 2 * C;  // (HS)
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k * 32 + lane < HS) o[k] += pj * to_f(v[k * 32 + lane]);
      }
    }
  }
  X* orow = out + (static_cast<size_t>(ri.b) * T + t) * C + ri.h * HS;  // (HS)
  const float inv = 1.0f / l;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    if (k * 32 + lane < HS) orow[k * 32 + lane] = from_f<X>(o[k] * inv);
  }
  if (lane == 0) lse[ri.bh * T + t] = m + logf(l);
}

template <typename X>
__global__ void attention_row_dot_kernel(float* d, const X* dout, const X* out, int B, int T, int C,
                                         int NH) {
  // d (B,NH,T) = rowsum(dout * out) per head; dout, out (B,T,C)
  RowIndex ri;
  if (!row_index(B, NH, T, &ri)) return;
  const int lane = threadIdx.x % 32, HS = C / NH;
  const size_t off = (static_cast<size_t>(ri.b) * T + ri.t) * C + ri.h * HS;
  float acc = 0.0f;
  for (int k = lane; k < HS; k += 32) acc += to_f(dout[off + k]) * to_f(out[off + k]);
  acc = warp_sum(acc);
  if (lane == 0) d[ri.bh * T + ri.t] = acc;
}

template <typename X>
__global__ void attention_backward_dq_rows_kernel(X* dqkv, const float* dd, const X* dout,
                                                  const X* qkv, const float* lse, int B, int T,
                                                  int C, int NH, float scale) {
  // dqkv (B,T,3C) q part written; dd (B,NH,T); dout (B,T,C); one warp per (b, h, query t)
  __shared__ float sq[kWarps][kMaxHS];
  __shared__ float sdo[kWarps][kMaxHS];
  RowIndex ri;
  if (!row_index(B, NH, T, &ri)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int HS = C / NH, t = ri.t;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const X* head = qkv + static_cast<size_t>(ri.b) * T * C3 + ri.h * HS;
  const X* gorow = dout + (static_cast<size_t>(ri.b) * T + t) * C + ri.h * HS;
  for (int d = lane; d < HS; d += 32) {
    sq[warp][d] = to_f(head[t * C3 + d]);
    sdo[warp][d] = to_f(gorow[d]);
  }
  __syncwarp();
  const float lse_t = lse[ri.bh * T + t], d_t = dd[ri.bh * T + t];
  float dq[kPerLane] = {};
  for (int k0 = 0; k0 <= t; k0 += 32) {
    const int j = k0 + lane;
    float ds = 0.0f;
    if (j <= t) {
      const float p = expf(dot_row(sq[warp], head + j * C3 + C, HS) * scale - lse_t);
      ds = p * (dot_row(sdo[warp], head + j * C3 + 2 * C, HS) - d_t);
    }
    const int nvalid = min(32, t - k0 + 1);
    for (int jj = 0; jj < nvalid; ++jj) {
      const float dsj = __shfl_sync(kFull, ds, jj);
      const X* krow = head + (k0 + jj) * C3 + C;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k * 32 + lane < HS) dq[k] += dsj * to_f(krow[k * 32 + lane]);
      }
    }
  }
  X* dqrow = dqkv + (static_cast<size_t>(ri.b) * T + t) * C3 + ri.h * HS;  // (HS)
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    if (k * 32 + lane < HS) dqrow[k * 32 + lane] = from_f<X>(dq[k] * scale);
  }
}

template <typename X>
__global__ void attention_backward_dkdv_rows_kernel(X* dqkv, const float* dd, const X* dout,
                                                    const X* qkv, const float* lse, int B, int T,
                                                    int C, int NH, float scale) {
  // dqkv (B,T,3C) k and v parts written; one warp per (b, h, key j), queries i >= j
  __shared__ float sk[kWarps][kMaxHS];
  __shared__ float sv[kWarps][kMaxHS];
  RowIndex ri;
  if (!row_index(B, NH, T, &ri)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int HS = C / NH, j = ri.t;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const X* head = qkv + static_cast<size_t>(ri.b) * T * C3 + ri.h * HS;
  const X* ghead = dout + static_cast<size_t>(ri.b) * T * C + ri.h * HS;  // row i at ghead + i*C
  for (int d = lane; d < HS; d += 32) {
    sk[warp][d] = to_f(head[j * C3 + C + d]);
    sv[warp][d] = to_f(head[j * C3 + 2 * C + d]);
  }
  __syncwarp();
  const float* lse_h = lse + ri.bh * T;
  const float* d_h = dd + ri.bh * T;
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  for (int i0 = j; i0 < T; i0 += 32) {
    const int i = i0 + lane;
    float p = 0.0f, ds = 0.0f;
    if (i < T) {
      p = expf(dot_row(sk[warp], head + i * C3, HS) * scale - lse_h[i]);
      ds = p * (dot_row(sv[warp], ghead + static_cast<size_t>(i) * C, HS) - d_h[i]);
    }
    const int nvalid = min(32, T - i0);
    for (int ii = 0; ii < nvalid; ++ii) {
      const float pi = __shfl_sync(kFull, p, ii);
      const float dsi = __shfl_sync(kFull, ds, ii);
      const X* qrow = head + (i0 + ii) * C3;
      const X* gorow = ghead + static_cast<size_t>(i0 + ii) * C;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k * 32 + lane < HS) {
          dv[k] += pi * to_f(gorow[k * 32 + lane]);
          dk[k] += dsi * to_f(qrow[k * 32 + lane]);
        }
      }
    }
  }
  X* dkrow = dqkv + (static_cast<size_t>(ri.b) * T + j) * C3 + C + ri.h * HS;  // (HS)
  X* dvrow = dkrow + C;                                                        // (HS)
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    if (k * 32 + lane < HS) {
      dkrow[k * 32 + lane] = from_f<X>(dk[k] * scale);
      dvrow[k * 32 + lane] = from_f<X>(dv[k]);
    }
  }
}

void check_shape(int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0 || C / NH > kMaxHS) {
    throw Error("attention: unsupported shape B=" + std::to_string(B) + " T=" + std::to_string(T) +
                " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                " (needs C % NH == 0 and C/NH <= 256)");
  }
}

unsigned int row_blocks(int B, int T, int NH) {
  return ceil_div(static_cast<size_t>(B) * NH * T, kWarps);
}

}  // namespace

template <typename X>
bool attention_uses_tensor_cores(int HS) {
  return !std::is_same_v<X, float> && HS == 64;
}

template <typename X>
void attention_forward(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
  check_shape(B, T, C, NH);
  if constexpr (!std::is_same_v<X, float>) {
    if (attention_uses_tensor_cores<X>(C / NH)) {
      attention_forward_tc<X>(out, lse, qkv, B, T, C, NH, stream);
      return;
    }
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  attention_forward_rows_kernel<X>
      <<<row_blocks(B, T, NH), 32 * kWarps, 0, stream>>>(out, lse, qkv, B, T, C, NH, scale);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void attention_backward(X* dqkv, float* scratch, const X* dout, const X* qkv, const X* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  check_shape(B, T, C, NH);
  attention_row_dot_kernel<X>
      <<<row_blocks(B, T, NH), 32 * kWarps, 0, stream>>>(scratch, dout, out, B, T, C, NH);
  FT_CUDA_LAUNCH_CHECK();
  if constexpr (!std::is_same_v<X, float>) {
    if (attention_uses_tensor_cores<X>(C / NH)) {
      attention_backward_tc<X>(dqkv, scratch, dout, qkv, lse, B, T, C, NH, stream);
      return;
    }
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  attention_backward_dq_rows_kernel<X><<<row_blocks(B, T, NH), 32 * kWarps, 0, stream>>>(
      dqkv, scratch, dout, qkv, lse, B, T, C, NH, scale);
  FT_CUDA_LAUNCH_CHECK();
  attention_backward_dkdv_rows_kernel<X><<<row_blocks(B, T, NH), 32 * kWarps, 0, stream>>>(
      dqkv, scratch, dout, qkv, lse, B, T, C, NH, scale);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                                          \
  template bool attention_uses_tensor_cores<X>(int);                                               \
  template void attention_forward<X>(X*, float*, const X*, int, int, int, int, cudaStream_t);      \
  template void attention_backward<X>(X*, float*, const X*, const X*, const X*, const float*, int, \
                                      int, int, int, cudaStream_t);
FT_INSTANTIATE(float)
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
