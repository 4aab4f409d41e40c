// attention_flash.cpp: memory-efficient causal multi-head attention (tiled online softmax,
// FlashAttention-2 style) that saves only a per-row log-sum-exp and recomputes
// probabilities tile by tile in the backward pass. Nothing of size T*T is allocated.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ft/trainer/ops.h"
#include "simd_math.h"

namespace ft::trainer::ops {

namespace {

constexpr int kTile = kFlashTile;

// Per-thread packing scratch: a transposed K (and V) tile, (HS, kTile) each.
// Grows once to the largest HS seen; reused across calls (no per-call allocation).
float* thread_tile_scratch(size_t floats) {
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

}  // namespace

void attention_flash_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) {
  // out (B,T,C), lse (B,NH,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const size_t C3 = static_cast<size_t>(C) * 3;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_tile_scratch(static_cast<size_t>(HS) * kTile);  // (HS, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;  // (T)
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        float m[kTile];  // running row max (kTile)
        float l[kTile];  // running row sum (kTile)
        for (int i = 0; i < nq; i++) {
          m[i] = -INFINITY;
          l[i] = 0.0f;
          std::memset(out + (static_cast<size_t>(b) * T + q0 + i) * C + h * HS, 0,
                      sizeof(float) * HS);
        }
        for (int k0 = 0; k0 <= q0; k0 += kTile) {  // causal: tiles up to the diagonal
          const int nk = std::min(kTile, T - k0);
          pack_transposed(kt, qkv_b + k0 * C3 + C + h * HS, C3, nk, HS);
          for (int i = 0; i < nq; i++) {
            const int t = q0 + i;
            const int jn = std::min(nk, t - k0 + 1);  // keys k0 .. k0+jn-1 are visible
            const float* q = qkv_b + t * C3 + h * HS;  // (HS)
            float* o = out + (static_cast<size_t>(b) * T + t) * C + h * HS;  // (HS)
            float s[kTile];  // scaled scores (kTile)
#pragma omp simd
            for (int j = 0; j < kTile; j++) s[j] = 0.0f;
            for (int d = 0; d < HS; d++) {
              const float qd = q[d] * scale;
              const float* krow = kt + static_cast<size_t>(d) * kTile;  // (kTile)
#pragma omp simd
              for (int j = 0; j < kTile; j++) s[j] += qd * krow[j];
            }
            float mt = -INFINITY;
            for (int j = 0; j < jn; j++) mt = s[j] > mt ? s[j] : mt;
            const float m_new = std::max(m[i], mt);
            const float corr = std::exp(m[i] - m_new);  // 0 on the first tile
            float psum = 0.0f;
#pragma omp simd reduction(+ : psum)
            for (int j = 0; j < jn; j++) {
              const float p = detail::fast_expf(s[j] - m_new);
              s[j] = p;
              psum += p;
            }
            l[i] = l[i] * corr + psum;
            m[i] = m_new;
#pragma omp simd
            for (int d = 0; d < HS; d++) o[d] *= corr;
            for (int j = 0; j < jn; j++) {
              const float* v = qkv_b + (k0 + j) * C3 + 2 * C + h * HS;  // (HS)
              const float p = s[j];
#pragma omp simd
              for (int d = 0; d < HS; d++) o[d] += p * v[d];
            }
          }
        }
        for (int i = 0; i < nq; i++) {
          float* o = out + (static_cast<size_t>(b) * T + q0 + i) * C + h * HS;  // (HS)
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
  const size_t C3 = static_cast<size_t>(C) * 3;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // One (b,h) pair per task: dq/dk/dv of a pair are only touched by that task,
  // accumulated in a fixed order => race-free and deterministic.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_tile_scratch(static_cast<size_t>(2) * HS * kTile);  // (HS, kTile)
      float* vt = kt + static_cast<size_t>(HS) * kTile;  // (HS, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* dqkv_b = dqkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      const float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;  // (T)
      for (int t = 0; t < T; t++) {
        for (int j = 0; j < 3; j++) {
          std::memset(dqkv_b + t * C3 + j * C + h * HS, 0, sizeof(float) * HS);
        }
      }
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        float D[kTile];  // D_i = rowsum(dout * out) (kTile)
        for (int i = 0; i < nq; i++) {
          const size_t off = (static_cast<size_t>(b) * T + q0 + i) * C + h * HS;
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int d = 0; d < HS; d++) acc += dout[off + d] * out[off + d];
          D[i] = acc;
        }
        for (int k0 = 0; k0 <= q0; k0 += kTile) {
          const int nk = std::min(kTile, T - k0);
          pack_transposed(kt, qkv_b + k0 * C3 + C + h * HS, C3, nk, HS);
          pack_transposed(vt, qkv_b + k0 * C3 + 2 * C + h * HS, C3, nk, HS);
          for (int i = 0; i < nq; i++) {
            const int t = q0 + i;
            const int jn = std::min(nk, t - k0 + 1);
            const float* q = qkv_b + t * C3 + h * HS;  // (HS)
            float* dq = dqkv_b + t * C3 + h * HS;  // (HS)
            const float* dout_t = dout + (static_cast<size_t>(b) * T + t) * C + h * HS;  // (HS)
            float s[kTile];   // scores, then probabilities (kTile)
            float dp[kTile];  // dout_t . v_j, then dS (kTile)
#pragma omp simd
            for (int j = 0; j < kTile; j++) {
              s[j] = 0.0f;
              dp[j] = 0.0f;
            }
            for (int d = 0; d < HS; d++) {
              const float qd = q[d] * scale;
              const float gd = dout_t[d];
              const float* krow = kt + static_cast<size_t>(d) * kTile;  // (kTile)
              const float* vrow = vt + static_cast<size_t>(d) * kTile;  // (kTile)
#pragma omp simd
              for (int j = 0; j < kTile; j++) {
                s[j] += qd * krow[j];
                dp[j] += gd * vrow[j];
              }
            }
            const float lse_t = lse_bh[t];
            const float Di = D[i];
#pragma omp simd
            for (int j = 0; j < jn; j++) {
              const float p = detail::fast_expf(s[j] - lse_t);
              s[j] = p;
              dp[j] = p * (dp[j] - Di) * scale;
            }
            for (int j = 0; j < jn; j++) {
              const size_t r = static_cast<size_t>(k0 + j) * C3 + h * HS;
              const float* k = qkv_b + r + C;  // (HS)
              float* dk = dqkv_b + r + C;  // (HS)
              float* dv = dqkv_b + r + 2 * C;  // (HS)
              const float p = s[j];
              const float ds = dp[j];
#pragma omp simd
              for (int d = 0; d < HS; d++) {
                dv[d] += p * dout_t[d];
                dk[d] += ds * q[d];
                dq[d] += ds * k[d];
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace ft::trainer::ops
