// small_gemm.h: private register-blocked small matrix multiply used by the attention kernels.
// (not a public header). C (M,N) (+)= A (M,K) . B (K,N); A has arbitrary row/column strides
// (so A^T needs no transpose), B and C are row-major with leading dims.
//
// AVX-512 path: 6x64 micro-tiles (24 zmm accumulators, broadcast + fmadd), the last 16-wide
// column vector masked so any N works. Optional causal limits skip work that is known to be
// masked. Every element is one fmadd chain over k in increasing order whatever the blocking,
// so results are deterministic. Without AVX-512 a scalar fallback computes the same thing.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ft::trainer::ops::detail {

enum class Init { kZero, kAccumulate, kRowScale };  // C = AB | C += AB | C = s[r]*C + AB

// Causal limits, as offsets relative to a row block [r0, r1) of C: only k in
// [max(0, r0 + k_lo), min(K, r1 + k_hi)) is summed and only columns from max(0, r0 + n_lo)
// (rounded down to a multiple of 16) to min(N, r1 + n_hi) are written. Callers guarantee the
// skipped A entries are zero / skipped C entries unused.
struct Limits {
  static constexpr int kNone = 1 << 28;
  int k_lo = -kNone;
  int k_hi = kNone;
  int n_lo = -kNone;
  int n_hi = kNone;
};

#if defined(__AVX512F__)

constexpr int kMR = 6;  // micro-tile rows
inline constexpr float kOnes[kMR] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};

inline __mmask16 tail_mask(int n) {  // n in [1,16]
  return static_cast<__mmask16>((1u << n) - 1u);
}

// MR rows x NV vectors of C; the last vector is stored/loaded under `last`.
template <int MR, int NV>
inline void gemm_micro(float* C, int ldc, const float* A, int a_rs, int a_cs, const float* B,
                       int ldb, int kb, int ke, __mmask16 last, Init init,
                       const float* rs) {  // rs (MR)
  // Branch-free init (masked load x per-row factor); the unroll pragmas let GCC keep c[][] in
  // registers (without them it stores every accumulator to the stack each k step).
  const __mmask16 ld =
      init == Init::kZero ? static_cast<__mmask16>(0) : static_cast<__mmask16>(0xFFFF);
  __m512 c[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    const __m512 f = _mm512_set1_ps(rs[r]);
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      const __mmask16 m = ld & (v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF));
      c[r][v] =
          _mm512_mul_ps(_mm512_maskz_loadu_ps(m, C + static_cast<size_t>(r) * ldc + 16 * v), f);
    }
  }
  const float* a = A + static_cast<ptrdiff_t>(kb) * a_cs;
  const float* b = B + static_cast<ptrdiff_t>(kb) * ldb;
  for (int k = kb; k < ke; k++, a += a_cs, b += ldb) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(last, b + 16 * (NV - 1));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m512 av = _mm512_set1_ps(a[static_cast<ptrdiff_t>(r) * a_rs]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    float* cr = C + static_cast<size_t>(r) * ldc;
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; v++) _mm512_storeu_ps(cr + 16 * v, c[r][v]);
    _mm512_mask_storeu_ps(cr + 16 * (NV - 1), last, c[r][NV - 1]);
  }
}

template <int MR>
inline void gemm_rows(float* C, int ldc, const float* A, int a_rs, int a_cs, const float* B,
                      int ldb, int N, int kb, int ke, Init init, const float* rs) {
  int j = 0;
  for (; j + 64 <= N; j += 64)
    gemm_micro<MR, 4>(C + j, ldc, A, a_rs, a_cs, B + j, ldb, kb, ke, 0xFFFF, init, rs);
  const int rem = N - j;
  if (rem <= 0) return;
  const __mmask16 last = tail_mask(rem - 16 * ((rem - 1) / 16));
  switch ((rem + 15) / 16) {
    case 1:
      gemm_micro<MR, 1>(C + j, ldc, A, a_rs, a_cs, B + j, ldb, kb, ke, last, init, rs);
      break;
    case 2:
      gemm_micro<MR, 2>(C + j, ldc, A, a_rs, a_cs, B + j, ldb, kb, ke, last, init, rs);
      break;
    case 3:
      gemm_micro<MR, 3>(C + j, ldc, A, a_rs, a_cs, B + j, ldb, kb, ke, last, init, rs);
      break;
    default:
      gemm_micro<MR, 4>(C + j, ldc, A, a_rs, a_cs, B + j, ldb, kb, ke, last, init, rs);
      break;
  }
}

#endif  // __AVX512F__

// C (M,N) = / += / row-scaled+= A (M,K) . B (K,N). A(r,k) = A[r*a_rs + k*a_cs].
// row_scale (M) is read only for Init::kRowScale.
inline void gemm(float* C, int ldc, const float* A, int a_rs, int a_cs, const float* B, int ldb,
                 int M, int N, int K, Init init, const float* row_scale = nullptr,
                 Limits lim = {}) {
#if defined(__AVX512F__)
  for (int i = 0; i < M; i += kMR) {
    const int mr = std::min(kMR, M - i);
    const int kb = std::max(0, i + lim.k_lo);
    const int ke = std::max(kb, std::min(K, i + mr + lim.k_hi));
    const int ne = std::min(N, i + mr + lim.n_hi);
    const int nb = std::max(0, i + lim.n_lo) & ~15;
    if (ne <= nb) continue;
    float* c = C + static_cast<size_t>(i) * ldc + nb;
    const float* a = A + static_cast<ptrdiff_t>(i) * a_rs;
    const float* rs = init == Init::kRowScale ? row_scale + i : kOnes;  // (mr)
    const float* b = B + nb;
    switch (mr) {
      case 6:
        gemm_rows<6>(c, ldc, a, a_rs, a_cs, b, ldb, ne - nb, kb, ke, init, rs);
        break;
      case 5:
        gemm_rows<5>(c, ldc, a, a_rs, a_cs, b, ldb, ne - nb, kb, ke, init, rs);
        break;
      case 4:
        gemm_rows<4>(c, ldc, a, a_rs, a_cs, b, ldb, ne - nb, kb, ke, init, rs);
        break;
      case 3:
        gemm_rows<3>(c, ldc, a, a_rs, a_cs, b, ldb, ne - nb, kb, ke, init, rs);
        break;
      case 2:
        gemm_rows<2>(c, ldc, a, a_rs, a_cs, b, ldb, ne - nb, kb, ke, init, rs);
        break;
      default:
        gemm_rows<1>(c, ldc, a, a_rs, a_cs, b, ldb, ne - nb, kb, ke, init, rs);
        break;
    }
  }
#else
  constexpr int kMR = 6;  // same row blocking as the AVX-512 path (same causal limits)
  for (int i0 = 0; i0 < M; i0 += kMR) {
    const int mr = std::min(kMR, M - i0);
    const int kb = std::max(0, i0 + lim.k_lo);
    const int ke = std::max(kb, std::min(K, i0 + mr + lim.k_hi));
    const int ne = std::min(N, i0 + mr + lim.n_hi);
    const int nb = std::max(0, i0 + lim.n_lo) & ~15;
    for (int i = i0; i < i0 + mr; i++) {
      float* c = C + static_cast<size_t>(i) * ldc;
      for (int j = nb; j < ne; j++) {
        float s = init == Init::kZero         ? 0.0f
                  : init == Init::kAccumulate ? c[j]
                                              : c[j] * row_scale[i];
        for (int k = kb; k < ke; k++)
          s = std::fma(A[static_cast<ptrdiff_t>(i) * a_rs + static_cast<ptrdiff_t>(k) * a_cs],
                       B[static_cast<size_t>(k) * ldb + j], s);
        c[j] = s;
      }
    }
  }
#endif
}

#if defined(__AVX512F__)
// dst (16, ld_dst) <- transpose of the 16x16 block src (row stride ld_src), in registers.
inline void transpose16x16(float* dst, size_t ld_dst, const float* src, size_t ld_src) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld_src);
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {  // 32-bit interleave of row pairs
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {  // 64-bit interleave: r[4i+j] lane L = column 4L+j, rows 4i..
    const __m512d a0 = _mm512_castps_pd(t[4 * i]), a1 = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d b0 = _mm512_castps_pd(t[4 * i + 2]), b1 = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, b0));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, b0));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, b1));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, b1));
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {  // 128-bit lane shuffles
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[j + 4] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    t[j + 8] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[j + 12] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    r[j + 4] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0x88);
    r[j + 12] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0xdd);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 16; c++) _mm512_storeu_ps(dst + c * ld_dst, r[c]);
}
#endif

// dst (HS, ld) <- transpose of n rows of src (each HS contiguous, row stride `stride`):
// dst[d*ld + j] = src[j*stride + d]. AVX-512: 16x16 register transposes, 16-lane gathers for
// the partial blocks.
inline void pack_transposed(float* dst, int ld, const float* src, size_t stride, int n, int HS) {
#if defined(__AVX512F__)
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(stride)));
  for (int j = 0; j < n; j += 16) {
    const int nj = std::min(16, n - j);
    const __mmask16 m = tail_mask(nj);
    const float* s = src + j * stride;  // rows j .. j+15
    int d = 0;
    if (nj == 16) {
      for (; d + 16 <= HS; d += 16)
        transpose16x16(dst + static_cast<size_t>(d) * ld + j, ld, s + d, stride);
    }
    for (; d < HS; d++) {
      const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, s + d, 4);
      _mm512_mask_storeu_ps(dst + static_cast<size_t>(d) * ld + j, m, v);
    }
  }
#else
  for (int j = 0; j < n; j++) {
    const float* s = src + j * stride;  // (HS)
    for (int d = 0; d < HS; d++) dst[static_cast<size_t>(d) * ld + j] = s[d];
  }
#endif
}

// dst (n, HS) contiguous <- n rows of src (row stride `stride`). Used for B operands: rows
// of qkv are 3C apart, which maps a 64-row tile onto a few L1 sets and thrashes them.
inline void copy_rows(float* dst, const float* src, size_t stride, int n, int HS) {
  for (int j = 0; j < n; j++) {
    float* d = dst + static_cast<size_t>(j) * HS;  // (HS)
    const float* s = src + j * stride;             // (HS)
#if defined(__AVX512F__)
    for (int c = 0; c < HS; c += 16) {
      const __mmask16 m = tail_mask(std::min(16, HS - c));
      _mm512_mask_storeu_ps(d + c, m, _mm512_maskz_loadu_ps(m, s + c));
    }
#else
    std::memcpy(d, s, sizeof(float) * HS);
#endif
  }
}

// Per-thread attention scratch, grown once to the largest size seen and reused across
// calls (fresh pages cost ~13 us each here). Shared by both attention kernels: neither
// calls the other while holding its pointer.
inline float* thread_scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

// Leading dim for packed (HS, T) transposes: 16-aligned plus one vector, so the rows do not
// fall into the same few L1 sets (a power-of-two stride would).
inline int packed_ld(int T) { return ((T + 15) & ~15) + 16; }

}  // namespace ft::trainer::ops::detail
