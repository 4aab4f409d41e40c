// small_gemm.h: private register-blocked small matrix multiply used by the attention kernels
// (not a public header). C (M,N) (+)= A (M,K) . B (K,N), all row-major with leading dims.
//
// Uses GCC/Clang vector extensions (16 floats = one AVX-512 register) so the 4x64
// micro-tile stays in registers without intrinsics; columns not a multiple of 16 fall
// back to a scalar loop. Summation order over K is fixed => deterministic.
#pragma once

#include <algorithm>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vector ABI note when AVX-512 is not enabled
#endif

namespace ft::trainer::ops::detail {

using v16 = float __attribute__((vector_size(64)));

inline v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store16(float* p, v16 v) { std::memcpy(p, &v, sizeof(v)); }

// MR rows x (NV*16) columns of C.
template <int MR, int NV>
inline void gemm_micro(float* C, int ldc, const float* A, int lda, const float* B, int ldb, int K,
                       bool accumulate) {
  v16 c[MR][NV];
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) c[r][v] = accumulate ? load16(C + r * ldc + 16 * v) : v16{};
  for (int k = 0; k < K; k++) {
    v16 b[NV];
    for (int v = 0; v < NV; v++) b[v] = load16(B + static_cast<size_t>(k) * ldb + 16 * v);
    for (int r = 0; r < MR; r++) {
      const float a = A[r * lda + k];
      for (int v = 0; v < NV; v++) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NV; v++) store16(C + r * ldc + 16 * v, c[r][v]);
}

template <int MR>
inline void gemm_rows(float* C, int ldc, const float* A, int lda, const float* B, int ldb, int N,
                      int K, bool accumulate) {
  int j = 0;
  for (; j + 64 <= N; j += 64) gemm_micro<MR, 4>(C + j, ldc, A, lda, B + j, ldb, K, accumulate);
  for (; j + 16 <= N; j += 16) gemm_micro<MR, 1>(C + j, ldc, A, lda, B + j, ldb, K, accumulate);
  for (; j < N; j++) {  // scalar tail columns
    for (int r = 0; r < MR; r++) {
      float s = accumulate ? C[r * ldc + j] : 0.0f;
      for (int k = 0; k < K; k++) s += A[r * lda + k] * B[static_cast<size_t>(k) * ldb + j];
      C[r * ldc + j] = s;
    }
  }
}

// C (M,N) = or += A (M,K) . B (K,N).
inline void gemm(float* C, int ldc, const float* A, int lda, const float* B, int ldb, int M, int N,
                 int K, bool accumulate) {
  int i = 0;
  for (; i + 4 <= M; i += 4)
    gemm_rows<4>(C + static_cast<size_t>(i) * ldc, ldc, A + static_cast<size_t>(i) * lda, lda, B,
                 ldb, N, K, accumulate);
  for (; i < M; i++)
    gemm_rows<1>(C + static_cast<size_t>(i) * ldc, ldc, A + static_cast<size_t>(i) * lda, lda, B,
                 ldb, N, K, accumulate);
}

}  // namespace ft::trainer::ops::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
