// attention_tc.cu: flash-style causal attention on tensor cores (WMMA 16x16x16, fp32 accumulate)
// for bf16/fp16 and head size 64: 64x64 tiles, 4 warps of 16 rows, online softmax in fp32;
// backward in two kernels (dK/dV key-tile-outer, dQ query-tile-outer) so nothing needs atomics.
#include <mma.h>

#include "device_common.cuh"

namespace ft::trainer::gpu {
namespace {

using namespace nvcuda;

constexpr int kHS = 64;               // head size
constexpr int kTile = 64;             // queries (or keys) per tile
constexpr int kThreads = 128;         // 4 warps x 16 rows
constexpr int kLdx = 72;              // smem row stride of X tiles (64 + 8: fewer bank conflicts)
constexpr int kLdf = 68;              // smem row stride of float tiles (64 + 4)
constexpr int kTileX = kTile * kLdx;  // elements per X tile
constexpr int kTileF = kTile * kLdf;  // elements per float tile
constexpr unsigned kFull = 0xffffffffu;

template <typename X>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, X, wmma::row_major>;
template <typename X>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, X, wmma::row_major>;
template <typename X>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, X, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// dst (64, kLdx) in smem <- 64 rows of 64 X from src (row r at src + r * stride); rows >=
// `rows` are zero, so masked scores and probabilities stay finite. 16-byte vector copies.
template <typename X>
__device__ void load_tile(X* dst, const X* src, size_t stride, int rows) {
  for (int idx = threadIdx.x; idx < kTile * 8; idx += kThreads) {
    const int r = idx / 8, c = (idx % 8) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = *reinterpret_cast<const uint4*>(src + r * stride + c);
    *reinterpret_cast<uint4*>(dst + r * kLdx + c) = v;
  }
}

// out (16, 64) floats at `out` (stride kLdf) = A (16 rows at a, stride kLdx, 64 wide) times
// B^T where B is 64 rows at b (stride kLdx): out[i][j] = sum_d A[i][d] * B[j][d].
template <typename X>
__device__ void warp_gemm_abt(float* out, const X* a, const X* b) {
  FragA<X> fa;
  FragBCol<X> fb;
  FragAcc acc;
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) {
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wmma::load_matrix_sync(fa, a + kk * 16, kLdx);
      wmma::load_matrix_sync(fb, b + nb * 16 * kLdx + kk * 16, kLdx);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + nb * 16, acc, kLdf, wmma::mem_row_major);
  }
}

// acc[nb] (16 x 16 column block nb of a 16 x 64 result) += A (16 x 64 at a, stride kLdx)
// times B (64 x 64 at b, stride kLdx, row-major).
template <typename X>
__device__ void warp_gemm_ab_acc(FragAcc (&acc)[4], const X* a, const X* b) {
  FragA<X> fa;
  FragBRow<X> fb;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    wmma::load_matrix_sync(fa, a + kk * 16, kLdx);
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      wmma::load_matrix_sync(fb, b + kk * 16 * kLdx + nb * 16, kLdx);
      wmma::mma_sync(acc[nb], fa, fb, acc[nb]);
    }
  }
}

template <typename X>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(X* out, float* lse, const X* qkv, int T, int C, int NH,
                                float scale) {
  // out (B,T,C), lse (B,NH,T), qkv (B,T,3C). Block: one query tile of one (b, h).
  extern __shared__ __align__(128) unsigned char smem[];
  X* sQ = reinterpret_cast<X*>(smem);                 // (64, kLdx) queries
  X* sK = sQ + kTileX;                                // (64, kLdx) keys
  X* sV = sK + kTileX;                                // (64, kLdx) values
  X* sP = sV + kTileX;                                // (64, kLdx) probabilities
  float* sS = reinterpret_cast<float*>(sP + kTileX);  // (64, kLdf) scores
  float* sO = sS + kTileF;                            // (64, kLdf) output accumulator
  const int qt = gridDim.x - 1 - blockIdx.x;          // longest tiles first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const X* head = qkv + static_cast<size_t>(b) * T * C3 + h * kHS;  // row t at head + t*C3
  const int q0 = qt * kTile;
  load_tile(sQ, head + q0 * C3, C3, min(kTile, T - q0));
  // This lane's softmax row and half of the columns.
  const int r = 16 * warp + lane / 2, c0 = (lane % 2) * 32;
  const int tq = q0 + r;
  float m = -INFINITY, l = 0.0f;
  for (int c = c0; c < c0 + 32; ++c) sO[r * kLdf + c] = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's sK/sV are no longer read
    load_tile(sK, head + k0 * C3 + C, C3, min(kTile, T - k0));
    load_tile(sV, head + k0 * C3 + 2 * C, C3, min(kTile, T - k0));
    __syncthreads();
    warp_gemm_abt(sS + 16 * warp * kLdf, sQ + 16 * warp * kLdx, sK);  // S = Q K^T
    __syncwarp();
    const float* srow = sS + r * kLdf;
    float tmax = -INFINITY;
    for (int c = c0; c < c0 + 32; ++c) {
      const int tk = k0 + c;
      if (tk <= tq && tk < T) tmax = fmaxf(tmax, srow[c] * scale);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));
    const float m_new = fmaxf(m, tmax);  // key k0 <= every row's query: finite
    const float corr = expf(m - m_new);
    float psum = 0.0f;
    X* prow = sP + r * kLdx;
    for (int c = c0; c < c0 + 32; ++c) {
      const int tk = k0 + c;
      const float p = (tk <= tq && tk < T) ? expf(srow[c] * scale - m_new) : 0.0f;
      prow[c] = from_f<X>(p);
      psum += p;
    }
    psum += __shfl_xor_sync(kFull, psum, 1);
    l = l * corr + psum;
    m = m_new;
    float* orow = sO + r * kLdf;
    for (int c = c0; c < c0 + 32; ++c) orow[c] *= corr;
    __syncwarp();
    FragAcc acc[4];
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      wmma::load_matrix_sync(acc[nb], sO + 16 * warp * kLdf + nb * 16, kLdf, wmma::mem_row_major);
    }
    warp_gemm_ab_acc(acc, sP + 16 * warp * kLdx, sV);  // O += P V
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      wmma::store_matrix_sync(sO + 16 * warp * kLdf + nb * 16, acc[nb], kLdf, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (tq < T) {
    X* o = out + (static_cast<size_t>(b) * T + tq) * C + h * kHS;  // (64)
    const float inv = 1.0f / l;
    for (int c = c0; c < c0 + 32; ++c) o[c] = from_f<X>(sO[r * kLdf + c] * inv);
    if (c0 == 0) lse[static_cast<size_t>(bh) * T + tq] = m + logf(l);
  }
}

template <typename X>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_tc_kernel(X* dqkv, const float* dd, const X* dout, const X* qkv,
                                      const float* lse, int T, int C, int NH, float scale) {
  // dqkv (B,T,3C) k, v parts; dd, lse (B,NH,T); dout (B,T,C). Block: one key tile of (b, h);
  // query tiles from the diagonal on. dK, dV stay in registers across the query loop.
  extern __shared__ __align__(128) unsigned char smem[];
  X* sK = reinterpret_cast<X*>(smem);                  // (64, kLdx) keys
  X* sV = sK + kTileX;                                 // (64, kLdx) values
  X* sQ = sV + kTileX;                                 // (64, kLdx) queries
  X* sdO = sQ + kTileX;                                // (64, kLdx) output gradient
  X* sP = sdO + kTileX;                                // (64, kLdx) P^T (keys x queries)
  X* sdS = sP + kTileX;                                // (64, kLdx) dS^T
  float* sS = reinterpret_cast<float*>(sdS + kTileX);  // (64, kLdf) S^T
  float* sdP = sS + kTileF;                            // (64, kLdf) dP^T
  float* sL = sdP + kTileF;                            // (64) lse of the query tile
  float* sD = sL + kTile;                              // (64) D of the query tile
  const int kt = blockIdx.x;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const X* head = qkv + static_cast<size_t>(b) * T * C3 + h * kHS;
  const X* ghead = dout + static_cast<size_t>(b) * T * C + h * kHS;  // row t at ghead + t*C
  const int k0 = kt * kTile;
  load_tile(sK, head + k0 * C3 + C, C3, min(kTile, T - k0));
  load_tile(sV, head + k0 * C3 + 2 * C, C3, min(kTile, T - k0));
  const int r = 16 * warp + lane / 2, c0 = (lane % 2) * 32;  // row = key
  const int tk = k0 + r;
  FragAcc dk[4], dv[4];
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) {
    wmma::fill_fragment(dk[nb], 0.0f);
    wmma::fill_fragment(dv[nb], 0.0f);
  }
  const int nqt = (T + kTile - 1) / kTile;
  for (int qt = kt; qt < nqt; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // the previous query tile is no longer read
    load_tile(sQ, head + q0 * C3, C3, min(kTile, T - q0));
    load_tile(sdO, ghead + static_cast<size_t>(q0) * C, C, min(kTile, T - q0));
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const int tq = q0 + i;
      sL[i] = tq < T ? lse[static_cast<size_t>(bh) * T + tq] : INFINITY;
      sD[i] = tq < T ? dd[static_cast<size_t>(bh) * T + tq] : 0.0f;
    }
    __syncthreads();
    warp_gemm_abt(sS + 16 * warp * kLdf, sK + 16 * warp * kLdx, sQ);    // S^T = K Q^T
    warp_gemm_abt(sdP + 16 * warp * kLdf, sV + 16 * warp * kLdx, sdO);  // dP^T = V dO^T
    __syncwarp();
    for (int c = c0; c < c0 + 32; ++c) {
      const int tq = q0 + c;
      const bool valid = tq >= tk && tq < T && tk < T;
      const float p = valid ? expf(sS[r * kLdf + c] * scale - sL[c]) : 0.0f;
      const float ds = p * (sdP[r * kLdf + c] - sD[c]);
      sP[r * kLdx + c] = from_f<X>(p);
      sdS[r * kLdx + c] = from_f<X>(ds);
    }
    __syncwarp();
    warp_gemm_ab_acc(dv, sP + 16 * warp * kLdx, sdO);  // dV += P^T dO
    warp_gemm_ab_acc(dk, sdS + 16 * warp * kLdx, sQ);  // dK += dS^T Q
  }
  // Through the warp's own rows of sS to global memory; dK takes the softmax scale.
  float* stage = sS + 16 * warp * kLdf;
  X* dkrow = dqkv + (static_cast<size_t>(b) * T + tk) * C3 + C + h * kHS;  // (64)
  X* dvrow = dkrow + C;                                                    // (64)
  __syncwarp();
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) {
    wmma::store_matrix_sync(stage + nb * 16, dv[nb], kLdf, wmma::mem_row_major);
  }
  __syncwarp();
  if (tk < T) {
    for (int c = c0; c < c0 + 32; ++c) dvrow[c] = from_f<X>(sS[r * kLdf + c]);
  }
  __syncwarp();
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) {
    wmma::store_matrix_sync(stage + nb * 16, dk[nb], kLdf, wmma::mem_row_major);
  }
  __syncwarp();
  if (tk < T) {
    for (int c = c0; c < c0 + 32; ++c) dkrow[c] = from_f<X>(sS[r * kLdf + c] * scale);
  }
}

template <typename X>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_tc_kernel(X* dqkv, const float* dd, const X* dout, const X* qkv,
                                    const float* lse, int T, int C, int NH, float scale) {
  // dqkv (B,T,3C) q part; block: one query tile of (b, h); key tiles up to the diagonal.
  extern __shared__ __align__(128) unsigned char smem[];
  X* sQ = reinterpret_cast<X*>(smem);                  // (64, kLdx)
  X* sdO = sQ + kTileX;                                // (64, kLdx)
  X* sK = sdO + kTileX;                                // (64, kLdx)
  X* sV = sK + kTileX;                                 // (64, kLdx)
  X* sdS = sV + kTileX;                                // (64, kLdx) dS (queries x keys)
  float* sS = reinterpret_cast<float*>(sdS + kTileX);  // (64, kLdf) S
  float* sdP = sS + kTileF;                            // (64, kLdf) dP
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const X* head = qkv + static_cast<size_t>(b) * T * C3 + h * kHS;
  const X* ghead = dout + static_cast<size_t>(b) * T * C + h * kHS;
  const int q0 = qt * kTile;
  load_tile(sQ, head + q0 * C3, C3, min(kTile, T - q0));
  load_tile(sdO, ghead + static_cast<size_t>(q0) * C, C, min(kTile, T - q0));
  const int r = 16 * warp + lane / 2, c0 = (lane % 2) * 32;  // row = query
  const int tq = q0 + r;
  const float lse_r = tq < T ? lse[static_cast<size_t>(bh) * T + tq] : INFINITY;
  const float d_r = tq < T ? dd[static_cast<size_t>(bh) * T + tq] : 0.0f;
  FragAcc dq[4];
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) wmma::fill_fragment(dq[nb], 0.0f);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile(sK, head + k0 * C3 + C, C3, min(kTile, T - k0));
    load_tile(sV, head + k0 * C3 + 2 * C, C3, min(kTile, T - k0));
    __syncthreads();
    warp_gemm_abt(sS + 16 * warp * kLdf, sQ + 16 * warp * kLdx, sK);    // S = Q K^T
    warp_gemm_abt(sdP + 16 * warp * kLdf, sdO + 16 * warp * kLdx, sV);  // dP = dO V^T
    __syncwarp();
    for (int c = c0; c < c0 + 32; ++c) {
      const int tk = k0 + c;
      const bool valid = tk <= tq && tk < T && tq < T;
      const float p = valid ? expf(sS[r * kLdf + c] * scale - lse_r) : 0.0f;
      sdS[r * kLdx + c] = from_f<X>(p * (sdP[r * kLdf + c] - d_r));
    }
    __syncwarp();
    warp_gemm_ab_acc(dq, sdS + 16 * warp * kLdx, sK);  // dQ += dS K
  }
  float* stage = sS + 16 * warp * kLdf;
  __syncwarp();
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) {
    wmma::store_matrix_sync(stage + nb * 16, dq[nb], kLdf, wmma::mem_row_major);
  }
  __syncwarp();
  if (tq < T) {
    X* dqrow = dqkv + (static_cast<size_t>(b) * T + tq) * C3 + h * kHS;  // (64)
    for (int c = c0; c < c0 + 32; ++c) dqrow[c] = from_f<X>(sS[r * kLdf + c] * scale);
  }
}

constexpr size_t kFwdSmem = 4 * kTileX * 2 + 2 * kTileF * 4;
constexpr size_t kDkdvSmem = 6 * kTileX * 2 + 2 * kTileF * 4 + 2 * kTile * 4;
constexpr size_t kDqSmem = 5 * kTileX * 2 + 2 * kTileF * 4;

// Opts a kernel into more than 48 KiB of dynamic shared memory (once per kernel).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes, bool* done) {
  if (*done) return;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  *done = true;
}

void check_tc_shape(int C, int NH) {
  if (C != NH * kHS)
    throw Error("attention_tc: needs head size 64, got C=" + std::to_string(C) +
                " NH=" + std::to_string(NH));
}

}  // namespace

template <typename X>
void attention_forward_tc(X* out, float* lse, const X* qkv, int B, int T, int C, int NH,
                          cudaStream_t stream) {
  check_tc_shape(C, NH);
  static bool smem_set = false;
  allow_smem(attention_forward_tc_kernel<X>, kFwdSmem, &smem_set);
  const dim3 grid(ceil_div(T, kTile), B * NH);
  attention_forward_tc_kernel<X>
      <<<grid, kThreads, kFwdSmem, stream>>>(out, lse, qkv, T, C, NH, 0.125f /* 1/sqrt(64) */);
  FT_CUDA_LAUNCH_CHECK();
}

template <typename X>
void attention_backward_tc(X* dqkv, const float* d, const X* dout, const X* qkv, const float* lse,
                           int B, int T, int C, int NH, cudaStream_t stream) {
  check_tc_shape(C, NH);
  static bool dkdv_set = false, dq_set = false;
  allow_smem(attention_backward_dkdv_tc_kernel<X>, kDkdvSmem, &dkdv_set);
  allow_smem(attention_backward_dq_tc_kernel<X>, kDqSmem, &dq_set);
  const dim3 grid(ceil_div(T, kTile), B * NH);
  attention_backward_dkdv_tc_kernel<X>
      <<<grid, kThreads, kDkdvSmem, stream>>>(dqkv, d, dout, qkv, lse, T, C, NH, 0.125f);
  FT_CUDA_LAUNCH_CHECK();
  attention_backward_dq_tc_kernel<X>
      <<<grid, kThreads, kDqSmem, stream>>>(dqkv, d, dout, qkv, lse, T, C, NH, 0.125f);
  FT_CUDA_LAUNCH_CHECK();
}

#define FT_INSTANTIATE(X)                                                                         \
  template void attention_forward_tc<X>(X*, float*, const X*, int, int, int, int, cudaStream_t);  \
  template void attention_backward_tc<X>(X*, const float*, const X*, const X*, const float*, int, \
                                         int, int, int, cudaStream_t);
FT_INSTANTIATE(bf16)
FT_INSTANTIATE(fp16)
#undef FT_INSTANTIATE

}  // namespace ft::trainer::gpu
