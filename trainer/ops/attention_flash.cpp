// attention_flash.cpp: memory-efficient causal multi-head attention (tiled online softmax,
// FlashAttention-2 style) that saves only a per-row log-sum-exp and recomputes
// probabilities tile by tile in the backward pass. Nothing of size T*T is allocated:
// per-thread scratch is a few (T, HS) copies plus a few kFlashTile x kFlashTile tiles.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 false positive inside its AVX-512 headers (masked loads of fresh vectors).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ft/trainer/ops.h"
#include "simd_math.h"
#include "small_gemm.h"

namespace ft::trainer::ops {

namespace {

using detail::Init;
using detail::Limits;
constexpr int kTile = kFlashTile;
constexpr int kTT = kTile * kTile;

// Per-thread scratch, grown once to the largest size seen and reused across calls.
float* thread_scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

int round16(int n) { return (n + 15) & ~15; }
}  // namespace

void attention_flash_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) {
  // out (B,T,C), lse (B,NH,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const int ldk = round16(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_scratch(static_cast<size_t>(HS) * (ldk + T) + kTT);  // K^T (HS, ldk)
      float* v_all = kt + static_cast<size_t>(HS) * ldk;  // V (T, HS) contiguous
      float* s = v_all + static_cast<size_t>(HS) * T;     // scores then probs (kTile, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;     // (T,3C)
      float* out_bh = out + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;    // (T)
      detail::pack_transposed(kt, ldk, qkv_b + C + h * HS, C3, T, HS);
      detail::copy_rows(v_all, qkv_b + 2 * C + h * HS, C3, T, HS);
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        const float* q_tile = qkv_b + static_cast<size_t>(q0) * C3 + h * HS;  // (nq,HS) stride 3C
        float* o_tile = out_bh + static_cast<size_t>(q0) * C;                 // (nq,HS) stride C
        float m[kTile];                            // running row max of scaled scores (kTile)
        float l[kTile];                            // running row sum (kTile)
        float corr[kTile];                         // per-row rescale of O for this key tile (kTile)
        for (int k0 = 0; k0 <= q0; k0 += kTile) {  // causal: tiles up to the diagonal
          const int nk = std::min(kTile, T - k0);
          const int off = q0 - k0;  // query row i sees key columns j <= i + off
          // S = Q K^T (nq, nk); on the diagonal only the lower triangle (+ micro-tile slack)
          detail::gemm(s, kTile, q_tile, C3, 1, kt + k0, ldk, nq, nk, HS, Init::kZero, nullptr,
                       Limits{.n_hi = off});
          for (int i = 0; i < nq; i++) {
            float* row = s + i * kTile;                // (kTile)
            const int jn = std::min(nk, off + i + 1);  // keys k0 .. k0+jn-1 visible
            const float mt = detail::row_max(row, jn) * scale;
            const float m_new = k0 == 0 ? mt : std::max(m[i], mt);
            const float psum = detail::row_exp(row, jn, nk, scale, m_new);
            if (k0 == 0) {
              l[i] = psum;
            } else {
              corr[i] = std::exp(m[i] - m_new);
              l[i] = l[i] * corr[i] + psum;
            }
            m[i] = m_new;
          }
          // O = corr * O + P V (nq, HS); row i needs P columns j <= i + off
          detail::gemm(o_tile, C, s, kTile, 1, v_all + static_cast<size_t>(k0) * HS, HS, nq, HS, nk,
                       k0 == 0 ? Init::kZero : Init::kRowScale, corr, Limits{.k_hi = off});
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
      const size_t n_all = static_cast<size_t>(T) * HS;
      float* kt = thread_scratch(2 * static_cast<size_t>(HS) * kTile + 4 * n_all + 2 * kTT + T);
      float* vt = kt + static_cast<size_t>(HS) * kTile;            // V^T tile (HS, kTile)
      float* q_all = vt + static_cast<size_t>(HS) * kTile;         // Q (T, HS) contiguous
      float* k_all = q_all + n_all;                                // K (T, HS) contiguous
      float* v_all = k_all + n_all;                                // V (T, HS) contiguous
      float* do_all = v_all + n_all;                               // dO (T, HS) contiguous
      float* p = do_all + n_all;                                   // scores -> P (kTile, kTile)
      float* ds = p + kTT;                                         // dP -> dS (kTile, kTile)
      float* D = ds + kTT;                                         // rowsum(dout * out) (T)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* dqkv_b = dqkv + static_cast<size_t>(b) * T * C3;      // (T,3C)
      const float* dout_bh = dout + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      const float* out_bh = out + static_cast<size_t>(b) * T * C + h * HS;    // (T,HS) stride C
      const float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;      // (T)
      detail::copy_rows(q_all, qkv_b + h * HS, C3, T, HS);
      detail::copy_rows(k_all, qkv_b + C + h * HS, C3, T, HS);
      detail::copy_rows(v_all, qkv_b + 2 * C + h * HS, C3, T, HS);
      detail::copy_rows(do_all, dout_bh, C, T, HS);
      for (int t = 0; t < T; t++) {
        const float* go = dout_bh + static_cast<size_t>(t) * C;  // (HS)
        const float* o = out_bh + static_cast<size_t>(t) * C;    // (HS)
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < HS; d++) acc += go[d] * o[d];
        D[t] = acc;
      }
      for (int k0 = 0; k0 < T; k0 += kTile) {  // kv tile outer: dK, dV finish per tile
        const int nk = std::min(kTile, T - k0);
        const size_t koff = static_cast<size_t>(k0) * C3 + h * HS;
        const float* k_tile = k_all + static_cast<size_t>(k0) * HS;  // (nk,HS)
        float* dk_tile = dqkv_b + koff + C;                          // (nk,HS) stride 3C
        float* dv_tile = dqkv_b + koff + 2 * C;                      // (nk,HS) stride 3C
        detail::pack_transposed(kt, kTile, k_tile, HS, nk, HS);
        detail::pack_transposed(vt, kTile, v_all + static_cast<size_t>(k0) * HS, HS, nk, HS);
        for (int q0 = k0; q0 < T; q0 += kTile) {  // causal: query tiles from the diagonal
          const int nq = std::min(kTile, T - q0);
          const int off = q0 - k0;  // query row i sees key columns j <= i + off
          const size_t qoff = static_cast<size_t>(q0) * C3 + h * HS;
          const float* q_tile = q_all + static_cast<size_t>(q0) * HS;    // (nq,HS)
          float* dq_tile = dqkv_b + qoff;                                // (nq,HS) stride 3C
          const float* do_tile = do_all + static_cast<size_t>(q0) * HS;  // (nq,HS)
          const Limits tri{.n_hi = off};
          detail::gemm(p, kTile, q_tile, HS, 1, kt, kTile, nq, nk, HS, Init::kZero, nullptr,
                       tri);  // S = Q K^T
          detail::gemm(ds, kTile, do_tile, HS, 1, vt, kTile, nq, nk, HS, Init::kZero, nullptr,
                       tri);  // dP = dO V^T
          for (int i = 0; i < nq; i++) {
            const int t = q0 + i;
            detail::row_softmax_grad(p + i * kTile, ds + i * kTile, std::min(nk, off + i + 1), nk,
                                     scale, lse_bh[t], D[t]);
          }
          // key row j gets query rows i >= j - off; the first (diagonal) tile writes
          const Init kv_init = q0 == k0 ? Init::kZero : Init::kAccumulate;
          const Limits below{.k_lo = -off};
          detail::gemm(dv_tile, C3, p, 1, kTile, do_tile, HS, nk, HS, nq, kv_init, nullptr,
                       below);  // dV += P^T dO
          detail::gemm(dk_tile, C3, ds, 1, kTile, q_tile, HS, nk, HS, nq, kv_init, nullptr,
                       below);  // dK += dS^T Q
          detail::gemm(dq_tile, C3, ds, kTile, 1, k_tile, HS, nq, HS, nk,
                       k0 == 0 ? Init::kZero : Init::kAccumulate, nullptr,
                       Limits{.k_hi = off});  // dQ += dS K
        }
      }
    }
  }
}

}  // namespace ft::trainer::ops
