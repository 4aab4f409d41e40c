// attention_flash.cpp: memory-efficient causal multi-head attention (tiled online softmax,
// FlashAttention-2 style) that saves only a per-row log-sum-exp and recomputes
// probabilities tile by tile in the backward pass. Nothing of size T*T is allocated:
// per-thread scratch is a few kFlashTile x kFlashTile / kFlashTile x HS tiles.
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
constexpr int kTT = kTile * kTile;

// Per-thread scratch, grown once to the largest size seen and reused across calls.
float* thread_scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

// dst (HS, kTile) <- transpose of nk rows (each HS contiguous, row stride `stride`);
// columns j >= nk are zero.
inline void pack_transposed(float* dst, const float* src, size_t stride, int nk, int HS) {
  for (int d = 0; d < HS; d++) {
    float* drow = dst + static_cast<size_t>(d) * kTile;  // (kTile)
    for (int j = 0; j < nk; j++) drow[j] = src[j * stride + d];
    for (int j = nk; j < kTile; j++) drow[j] = 0.0f;
  }
}

// dst (nc, kTile) <- transpose of src (nr, kTile) restricted to nr rows, nc columns.
inline void transpose_tile(float* dst, const float* src, int nr, int nc) {
  for (int j = 0; j < nc; j++)
    for (int i = 0; i < nr; i++) dst[j * kTile + i] = src[i * kTile + j];
}

}  // namespace

void attention_flash_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) {
  // out (B,T,C), lse (B,NH,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_scratch(static_cast<size_t>(HS) * kTile + kTT);  // (HS, kTile)
      float* s = kt + static_cast<size_t>(HS) * kTile;  // scores then probs (kTile, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* out_bh = out + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;  // (T)
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        const float* q_tile = qkv_b + static_cast<size_t>(q0) * C3 + h * HS;  // (nq,HS) stride 3C
        float* o_tile = out_bh + static_cast<size_t>(q0) * C;  // (nq,HS) stride C
        float m[kTile];  // running row max (kTile)
        float l[kTile];  // running row sum (kTile)
        for (int i = 0; i < nq; i++) {
          m[i] = -INFINITY;
          l[i] = 0.0f;
          std::memset(o_tile + static_cast<size_t>(i) * C, 0, sizeof(float) * HS);
        }
        for (int k0 = 0; k0 <= q0; k0 += kTile) {  // causal: tiles up to the diagonal
          const int nk = std::min(kTile, T - k0);
          const float* k_tile = qkv_b + static_cast<size_t>(k0) * C3 + C + h * HS;  // (nk,HS)
          const float* v_tile = k_tile + C;  // (nk,HS) stride 3C
          pack_transposed(kt, k_tile, C3, nk, HS);
          detail::gemm(s, kTile, q_tile, C3, kt, kTile, nq, kTile, HS, false);  // S = Q K^T
          for (int i = 0; i < nq; i++) {
            float* row = s + i * kTile;  // (kTile)
            const int jn = std::min(nk, q0 + i - k0 + 1);  // keys k0 .. k0+jn-1 visible
            float mt = -INFINITY;
            for (int j = 0; j < jn; j++) mt = std::max(mt, row[j] * scale);
            const float m_new = std::max(m[i], mt);
            const float corr = std::exp(m[i] - m_new);  // 0 on the first tile
            float psum = 0.0f;
#pragma omp simd reduction(+ : psum)
            for (int j = 0; j < kTile; j++) {
              const float p = j < jn ? detail::fast_expf(row[j] * scale - m_new) : 0.0f;
              row[j] = p;
              psum += p;
            }
            l[i] = l[i] * corr + psum;
            m[i] = m_new;
            float* o = o_tile + static_cast<size_t>(i) * C;  // (HS)
#pragma omp simd
            for (int d = 0; d < HS; d++) o[d] *= corr;
          }
          detail::gemm(o_tile, C, s, kTile, v_tile, C3, nq, HS, nk, true);  // O += P V
        }
        for (int i = 0; i < nq; i++) {
          float* o = o_tile + static_cast<size_t>(i) * C;  // (HS)
          const float inv = 1.0f / l[i];
#pragma omp simd
          for (int d = 0; d < HS; d++) o[d] *= inv;
          lse_bh[q0 + i] = m[i] + std::log(l[i]);
        }
      }
    }
  }
}

void attention_flash_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH) {
  // dqkv (B,T,3C) written, dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // One (b,h) pair per task: dq/dk/dv of a pair are only touched by that task,
  // accumulated in a fixed order => race-free and deterministic.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_scratch(2 * static_cast<size_t>(HS) * kTile + 4 * kTT + T);
      float* vt = kt + static_cast<size_t>(HS) * kTile;  // (HS, kTile)
      float* p = vt + static_cast<size_t>(HS) * kTile;  // scores -> P (kTile, kTile)
      float* ds = p + kTT;  // dP -> dS (kTile, kTile)
      float* pt = ds + kTT;  // P^T (kTile, kTile)
      float* dst = pt + kTT;  // dS^T (kTile, kTile)
      float* D = dst + kTT;  // rowsum(dout * out) (T)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* dqkv_b = dqkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      const float* dout_bh = dout + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      const float* out_bh = out + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      const float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;  // (T)
      for (int t = 0; t < T; t++) {
        for (int j = 0; j < 3; j++) {
          std::memset(dqkv_b + static_cast<size_t>(t) * C3 + j * C + h * HS, 0, sizeof(float) * HS);
        }
        const float* go = dout_bh + static_cast<size_t>(t) * C;  // (HS)
        const float* o = out_bh + static_cast<size_t>(t) * C;  // (HS)
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < HS; d++) acc += go[d] * o[d];
        D[t] = acc;
      }
      for (int k0 = 0; k0 < T; k0 += kTile) {  // kv tile outer: dK, dV finish per tile
        const int nk = std::min(kTile, T - k0);
        const size_t koff = static_cast<size_t>(k0) * C3 + h * HS;
        const float* k_tile = qkv_b + koff + C;  // (nk,HS) stride 3C
        const float* v_tile = qkv_b + koff + 2 * C;  // (nk,HS) stride 3C
        float* dk_tile = dqkv_b + koff + C;  // (nk,HS) stride 3C
        float* dv_tile = dqkv_b + koff + 2 * C;  // (nk,HS) stride 3C
        pack_transposed(kt, k_tile, C3, nk, HS);
        pack_transposed(vt, v_tile, C3, nk, HS);
        for (int q0 = k0; q0 < T; q0 += kTile) {  // causal: query tiles from the diagonal
          const int nq = std::min(kTile, T - q0);
          const size_t qoff = static_cast<size_t>(q0) * C3 + h * HS;
          const float* q_tile = qkv_b + qoff;  // (nq,HS) stride 3C
          float* dq_tile = dqkv_b + qoff;  // (nq,HS) stride 3C
          const float* do_tile = dout_bh + static_cast<size_t>(q0) * C;  // (nq,HS) stride C
          detail::gemm(p, kTile, q_tile, C3, kt, kTile, nq, kTile, HS, false);  // S = Q K^T
          detail::gemm(ds, kTile, do_tile, C, vt, kTile, nq, kTile, HS, false);  // dP = dO V^T
          for (int i = 0; i < nq; i++) {
            const int t = q0 + i;
            const int jn = std::min(nk, t - k0 + 1);
            const float lse_t = lse_bh[t];
            const float Dt = D[t];
            float* prow = p + i * kTile;  // (kTile)
            float* srow = ds + i * kTile;  // (kTile)
#pragma omp simd
            for (int j = 0; j < kTile; j++) {
              const float pj = j < jn ? detail::fast_expf(prow[j] * scale - lse_t) : 0.0f;
              prow[j] = pj;
              srow[j] = pj * (srow[j] - Dt) * scale;
            }
          }
          transpose_tile(pt, p, nq, nk);
          transpose_tile(dst, ds, nq, nk);
          detail::gemm(dv_tile, C3, pt, kTile, do_tile, C, nk, HS, nq, true);  // dV += P^T dO
          detail::gemm(dk_tile, C3, dst, kTile, q_tile, C3, nk, HS, nq, true);  // dK += dS^T Q
          detail::gemm(dq_tile, C3, ds, kTile, k_tile, C3, nq, HS, nk, true);  // dQ += dS K
        }
      }
    }
  }
}

}  // namespace ft::trainer::ops
