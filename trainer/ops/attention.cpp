// attention.cpp: causal multi-head self-attention with the (B,NH,T,T) probabilities materialised.
// Works per (b,h) pair directly on the HS-contiguous q|k|v layout of qkv, using the
// register-blocked small GEMM over kFlashTile-row query tiles; masked work is skipped.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 false positives inside its AVX-512 headers (masked loads, _mm512_undefined_*).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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
using detail::packed_ld;
using detail::thread_scratch;
constexpr int kTile = kFlashTile;

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const int ldk = packed_ld(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* kt = thread_scratch(static_cast<size_t>(HS) * (ldk + T));  // K^T (HS, ldk)
      float* v_all = kt + static_cast<size_t>(HS) * ldk;                // V (T, HS) contiguous
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;       // (T,3C)
      float* att_bh = att + (static_cast<size_t>(b) * NH + h) * T * T;  // (T,T)
      detail::pack_transposed(kt, ldk, qkv_b + C + h * HS, C3, T, HS);
      detail::copy_rows(v_all, qkv_b + 2 * C + h * HS, C3, T, HS);
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        const float* q_tile = qkv_b + static_cast<size_t>(q0) * C3 + h * HS;  // (nq,HS) stride 3C
        float* att_rows = att_bh + static_cast<size_t>(q0) * T;               // (nq,T)
        // raw scores S = Q K^T, row i only up to column q0 + i (+ micro-tile slack)
        detail::gemm(att_rows, T, q_tile, C3, 1, kt, ldk, nq, q0 + nq, HS, Init::kZero, nullptr,
                     Limits{.n_hi = q0});
        for (int i = 0; i < nq; i++) {  // causal softmax per row, zero upper triangle
          const int t = q0 + i;
          float* row = att_rows + static_cast<size_t>(i) * T;  // (T)
          const float maxv = detail::row_max(row, t + 1) * scale;
          const float sum = detail::row_exp(row, t + 1, T, scale, maxv);
          const float inv = 1.0f / sum;
          detail::row_scale(row, t + 1, inv);
        }
        // out rows = att (nq, q0+nq) . V (q0+nq, HS); masked entries are zero
        detail::gemm(out + (static_cast<size_t>(b) * T + q0) * C + h * HS, C, att_rows, T, 1, v_all,
                     HS, nq, HS, q0 + nq, Init::kZero, nullptr, Limits{.k_hi = q0});
      }
    }
  }
}

void attention_backward(float* dqkv, float* /*datt_scratch*/, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  // dqkv (B,T,3C) written, datt_scratch (B,NH,T,T) unused, dout (B,T,C), qkv (B,T,3C),
  // att (B,NH,T,T)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const int ldk = packed_ld(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // Each (b,h) pair is one task touching only its own dq/dk/dv columns => race-free,
  // fixed summation order => deterministic.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const size_t n_all = static_cast<size_t>(T) * HS;
      float* vt = thread_scratch(static_cast<size_t>(HS) * ldk + 4 * n_all +
                                 static_cast<size_t>(T) * T);      // V^T (HS, ldk)
      float* q_all = vt + static_cast<size_t>(HS) * ldk;           // Q (T, HS) contiguous
      float* k_all = q_all + n_all;                                // K (T, HS) contiguous
      float* v_all = k_all + n_all;                                // V (T, HS) contiguous
      float* do_all = v_all + n_all;                               // dO (T, HS) contiguous
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* dqkv_b = dqkv + static_cast<size_t>(b) * T * C3;      // (T,3C)
      const float* att_bh = att + (static_cast<size_t>(b) * NH + h) * T * T;  // (T,T)
      // dpreatt (T,T) lives in per-thread scratch reused across pairs: it stays in L2, where
      // a fresh datt_scratch slice per pair would cost a DRAM read-for-ownership + write-back.
      float* dpre_bh = do_all + n_all;  // (T,T)
      detail::copy_rows(q_all, qkv_b + h * HS, C3, T, HS);
      detail::copy_rows(k_all, qkv_b + C + h * HS, C3, T, HS);
      detail::copy_rows(v_all, qkv_b + 2 * C + h * HS, C3, T, HS);
      detail::copy_rows(do_all, dout + static_cast<size_t>(b) * T * C + h * HS, C, T, HS);
      detail::pack_transposed(vt, ldk, v_all, HS, T, HS);
      // pass 1, per query tile: datt = dO V^T, softmax backward, dQ = dpre K
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        const float* do_tile = do_all + static_cast<size_t>(q0) * HS;  // (nq,HS)
        float* dpre_rows = dpre_bh + static_cast<size_t>(q0) * T;      // (nq,T)
        detail::gemm(dpre_rows, T, do_tile, HS, 1, vt, ldk, nq, q0 + nq, HS, Init::kZero, nullptr,
                     Limits{.n_hi = q0});
        for (int i = 0; i < nq; i++) {
          const int t = q0 + i;
          const float* arow = att_bh + static_cast<size_t>(t) * T;  // (T)
          float* drow = dpre_rows + static_cast<size_t>(i) * T;     // (T)
          detail::row_softmax_bwd(arow, drow, t + 1, T, scale);
        }
        detail::gemm(dqkv_b + static_cast<size_t>(q0) * C3 + h * HS, C3, dpre_rows, T, 1, k_all, HS,
                     nq, HS, q0 + nq, Init::kZero, nullptr, Limits{.k_hi = q0});
      }
      // pass 2, per key tile: dV = att^T dO, dK = dpre^T Q over queries t >= k0
      // (A read transposed through strides; key row j only needs queries t >= j)
      for (int k0 = 0; k0 < T; k0 += kTile) {
        const int nk = std::min(kTile, T - k0);
        const size_t koff = static_cast<size_t>(k0) * C3 + h * HS;
        const size_t blk = static_cast<size_t>(k0) * T + k0;  // (t = k0, j = k0)
        detail::gemm(dqkv_b + koff + 2 * C, C3, att_bh + blk, 1, T,
                     do_all + static_cast<size_t>(k0) * HS, HS, nk, HS, T - k0, Init::kZero,
                     nullptr, Limits{.k_lo = 0});
        detail::gemm(dqkv_b + koff + C, C3, dpre_bh + blk, 1, T,
                     q_all + static_cast<size_t>(k0) * HS, HS, nk, HS, T - k0, Init::kZero, nullptr,
                     Limits{.k_lo = 0});
      }
    }
  }
}

}  // namespace ft::trainer::ops
