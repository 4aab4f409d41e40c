// attention.cpp: causal multi-head self-attention with the (B,NH,T,T) probabilities materialised.
// Works per (b,h) pair directly on the HS-contiguous q|k|v layout of qkv, using the
// register-blocked small GEMM over kFlashTile-sized tiles.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ft/trainer/ops.h"
#include "simd_math.h"
#include "small_gemm.h"

namespace ft::trainer::ops {

namespace {

constexpr int kTile = kFlashTile;

float* thread_scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

// dst (HS, kTile) <- transpose of nk rows (row stride `stride`); columns >= nk zero.
inline void pack_transposed(float* dst, const float* src, size_t stride, int nk, int HS) {
  for (int d = 0; d < HS; d++) {
    float* drow = dst + static_cast<size_t>(d) * kTile;  // (kTile)
    for (int j = 0; j < nk; j++) drow[j] = src[j * stride + d];
    for (int j = nk; j < kTile; j++) drow[j] = 0.0f;
  }
}

// dst (nc, kTile) <- transpose of the (nr, nc) block of src (row stride ld).
inline void transpose_block(float* dst, const float* src, size_t ld, int nr, int nc) {
  for (int j = 0; j < nc; j++)
    for (int i = 0; i < nr; i++) dst[j * kTile + i] = src[i * ld + j];
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_scratch(static_cast<size_t>(HS) * kTile);  // (HS, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      const float* v_all = qkv_b + 2 * C + h * HS;  // (T,HS) stride 3C
      float* att_bh = att + (static_cast<size_t>(b) * NH + h) * T * T;  // (T,T)
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        const float* q_tile = qkv_b + static_cast<size_t>(q0) * C3 + h * HS;  // (nq,HS) stride 3C
        float* att_rows = att_bh + static_cast<size_t>(q0) * T;  // (nq,T)
        for (int k0 = 0; k0 <= q0; k0 += kTile) {  // raw scores S = Q K^T
          const int nk = std::min(kTile, T - k0);
          pack_transposed(kt, qkv_b + static_cast<size_t>(k0) * C3 + C + h * HS, C3, nk, HS);
          detail::gemm(att_rows + k0, T, q_tile, C3, kt, kTile, nq, nk, HS, false);
        }
        for (int i = 0; i < nq; i++) {  // causal softmax per row
          const int t = q0 + i;
          float* row = att_rows + static_cast<size_t>(i) * T;  // (T)
          float maxv = -INFINITY;
          for (int t2 = 0; t2 <= t; t2++) maxv = std::max(maxv, row[t2] * scale);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int t2 = 0; t2 <= t; t2++) {
            const float e = detail::fast_expf(row[t2] * scale - maxv);
            row[t2] = e;
            sum += e;
          }
          const float inv = 1.0f / sum;
#pragma omp simd
          for (int t2 = 0; t2 <= t; t2++) row[t2] *= inv;
          for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0.0f;
        }
        // out rows = att (nq, q0+nq) . V (q0+nq, HS); masked entries are zero
        detail::gemm(out + (static_cast<size_t>(b) * T + q0) * C + h * HS, C, att_rows, T, v_all,
                     C3, nq, HS, q0 + nq, false);
      }
    }
  }
}

void attention_backward(float* dqkv, float* datt_scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  // dqkv (B,T,3C) written, datt_scratch (B,NH,T,T), dout (B,T,C), qkv (B,T,3C),
  // att (B,NH,T,T)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // Each (b,h) pair is one task touching only its own dq/dk/dv columns => race-free,
  // fixed summation order => deterministic.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* vt = thread_scratch(static_cast<size_t>(HS) * kTile + 2 * kTile * kTile);
      float* pt = vt + static_cast<size_t>(HS) * kTile;  // att^T block (kTile, kTile)
      float* dpt = pt + kTile * kTile;  // dpreatt^T block (kTile, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* dqkv_b = dqkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      const float* k_all = qkv_b + C + h * HS;  // (T,HS) stride 3C
      const float* dout_bh = dout + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      const float* att_bh = att + (static_cast<size_t>(b) * NH + h) * T * T;  // (T,T)
      float* dpre_bh = datt_scratch + (static_cast<size_t>(b) * NH + h) * T * T;  // (T,T)
      // pass 1, per query tile: datt = dO V^T, softmax backward, dQ = dpre K
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        const float* do_tile = dout_bh + static_cast<size_t>(q0) * C;  // (nq,HS) stride C
        float* dpre_rows = dpre_bh + static_cast<size_t>(q0) * T;  // (nq,T)
        for (int k0 = 0; k0 <= q0; k0 += kTile) {
          const int nk = std::min(kTile, T - k0);
          pack_transposed(vt, qkv_b + static_cast<size_t>(k0) * C3 + 2 * C + h * HS, C3, nk, HS);
          detail::gemm(dpre_rows + k0, T, do_tile, C, vt, kTile, nq, nk, HS, false);
        }
        for (int i = 0; i < nq; i++) {
          const int t = q0 + i;
          const float* arow = att_bh + static_cast<size_t>(t) * T;  // (T)
          float* drow = dpre_rows + static_cast<size_t>(i) * T;  // (T)
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int t2 = 0; t2 <= t; t2++) dot += arow[t2] * drow[t2];
#pragma omp simd
          for (int t2 = 0; t2 <= t; t2++) drow[t2] = arow[t2] * (drow[t2] - dot) * scale;
          for (int t2 = t + 1; t2 < T; t2++) drow[t2] = 0.0f;
        }
        detail::gemm(dqkv_b + static_cast<size_t>(q0) * C3 + h * HS, C3, dpre_rows, T, k_all, C3,
                     nq, HS, q0 + nq, false);
      }
      // pass 2, per key tile: dV = att^T dO, dK = dpre^T Q over query tiles q0 >= k0
      for (int k0 = 0; k0 < T; k0 += kTile) {
        const int nk = std::min(kTile, T - k0);
        const size_t koff = static_cast<size_t>(k0) * C3 + h * HS;
        for (int q0 = k0; q0 < T; q0 += kTile) {
          const int nq = std::min(kTile, T - q0);
          const size_t blk = static_cast<size_t>(q0) * T + k0;
          transpose_block(pt, att_bh + blk, T, nq, nk);
          transpose_block(dpt, dpre_bh + blk, T, nq, nk);
          const bool acc = q0 != k0;  // first contribution writes
          detail::gemm(dqkv_b + koff + 2 * C, C3, pt, kTile, dout_bh + static_cast<size_t>(q0) * C,
                       C, nk, HS, nq, acc);
          detail::gemm(dqkv_b + koff + C, C3, dpt, kTile,
                       qkv_b + static_cast<size_t>(q0) * C3 + h * HS, C3, nk, HS, nq, acc);
        }
      }
    }
  }
}

}  // namespace ft::trainer::ops
