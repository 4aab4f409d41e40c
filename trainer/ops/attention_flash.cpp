// attention_flash.cpp: memory-efficient causal multi-head attention (tiled online softmax,
// FlashAttention-2 style) that saves only a per-row log-sum-exp and recomputes
// probabilities tile by tile in the backward pass. Nothing of size T*T is allocated:
// per-thread scratch is a few (T, HS) copies plus a few kFlashTile x kFlashTile tiles.
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
constexpr int kTT = kTile * kTile;

// Online-softmax step for one key tile in transposed layout. st (nk, kTile) holds raw scores
// S^T[j][i] (key j, query i < nq); query i sees key j iff j <= i + off (every query sees key 0).
// Updates the running max m and sum l (nq), writes the O rescale corr (nq, unless first) and
// overwrites st with P^T = exp(scale * S^T - m), 0 where masked. Reductions run down the
// columns (16 queries per vector), so there are no horizontal sums.
void softmax_tile_t(float* st, int nk, int nq, int off, float scale, bool first, float* m, float* l,
                    float* corr) {
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(scale);
  for (int qb = 0; qb < nq; qb += 16) {
    const __mmask16 live = detail::lane_mask(qb, nq);
    auto visible = [&](int j) {  // lanes (queries qb + lane) that see key j
      const int lo = j - off - qb;
      if (lo <= 0) return live;
      if (lo >= 16) return static_cast<__mmask16>(0);
      return static_cast<__mmask16>(live & (0xFFFFu << lo));
    };
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < nk; j++) {
      const __mmask16 v = visible(j);
      mx = _mm512_mask_max_ps(mx, v, mx, _mm512_maskz_loadu_ps(v, st + j * kTile + qb));
    }
    __m512 m_new = _mm512_mul_ps(mx, vs);
    __m512 cr = _mm512_setzero_ps();
    if (!first) {
      const __m512 m_old = _mm512_maskz_loadu_ps(live, m + qb);
      m_new = _mm512_max_ps(m_old, m_new);
      cr = detail::fast_exp512(_mm512_sub_ps(m_old, m_new));
      _mm512_mask_storeu_ps(corr + qb, live, cr);
    }
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
      const __mmask16 v = visible(j);
      float* row = st + j * kTile + qb;  // (16)
      const __m512 x = _mm512_maskz_loadu_ps(v, row);
      const __m512 p = _mm512_maskz_mov_ps(v, detail::fast_exp512(_mm512_fmsub_ps(x, vs, m_new)));
      _mm512_storeu_ps(row, p);
      sum = _mm512_add_ps(sum, p);
    }
    const __m512 l_new =
        first ? sum : _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, l + qb), cr, sum);
    _mm512_mask_storeu_ps(l + qb, live, l_new);
    _mm512_mask_storeu_ps(m + qb, live, m_new);
  }
#else
  for (int i = 0; i < nq; i++) {
    const int jn = std::min(nk, i + off + 1);  // keys 0 .. jn-1 visible
    float mx = -INFINITY;
    for (int j = 0; j < jn; j++) mx = std::max(mx, st[j * kTile + i]);
    float m_new = mx * scale;
    float cr = 0.0f;
    if (!first) {
      m_new = std::max(m[i], m_new);
      cr = detail::fast_expf(m[i] - m_new);
      corr[i] = cr;
    }
    float sum = 0.0f;
    for (int j = 0; j < nk; j++) {
      float& x = st[j * kTile + i];
      x = j < jn ? detail::fast_expf(std::fma(x, scale, -m_new)) : 0.0f;
      sum += x;
    }
    l[i] = first ? sum : std::fma(l[i], cr, sum);
    m[i] = m_new;
  }
#endif
}

}  // namespace

void attention_flash_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) {
  // out (B,T,C), lse (B,NH,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const int C3 = 3 * C;
  const int ldq = packed_ld(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* qt = thread_scratch(static_cast<size_t>(HS) * (ldq + T) + kTT);  // Q^T (HS, ldq)
      float* v_all = qt + static_cast<size_t>(HS) * ldq;  // V (T, HS) contiguous
      float* st = v_all + static_cast<size_t>(HS) * T;    // S^T then P^T (kTile keys, kTile)
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;     // (T,3C)
      float* out_bh = out + static_cast<size_t>(b) * T * C + h * HS;  // (T,HS) stride C
      float* lse_bh = lse + (static_cast<size_t>(b) * NH + h) * T;    // (T)
      detail::pack_transposed(qt, ldq, qkv_b + h * HS, C3, T, HS);
      detail::copy_rows(v_all, qkv_b + 2 * C + h * HS, C3, T, HS);
      for (int q0 = 0; q0 < T; q0 += kTile) {
        const int nq = std::min(kTile, T - q0);
        float* o_tile = out_bh + static_cast<size_t>(q0) * C;  // (nq,HS) stride C
        alignas(64) float m[kTile];     // running max of scaled scores per query (kTile)
        alignas(64) float l[kTile];     // running sum per query (kTile)
        alignas(64) float corr[kTile];  // per-query rescale of O for this key tile (kTile)
        for (int k0 = 0; k0 <= q0; k0 += kTile) {  // causal: tiles up to the diagonal
          const int nk = std::min(kTile, T - k0);
          const int off = q0 - k0;  // query i sees key j iff j <= i + off
          // S^T = K Q^T (nk, nq): the softmax then runs down columns, 16 queries per vector
          const float* k_tile = qkv_b + static_cast<size_t>(k0) * C3 + C + h * HS;  // (nk,HS)
          detail::gemm(st, kTile, k_tile, C3, 1, qt + q0, ldq, nk, nq, HS, Init::kZero, nullptr,
                       Limits{.n_lo = -off});
          softmax_tile_t(st, nk, nq, off, scale, k0 == 0, m, l, corr);
          // O = corr * O + P V (nq, HS), P read transposed from P^T; query i needs keys <= i + off
          detail::gemm(o_tile, C, st, 1, kTile, v_all + static_cast<size_t>(k0) * HS, HS, nq, HS,
                       nk, k0 == 0 ? Init::kZero : Init::kRowScale, corr, Limits{.k_hi = off});
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
