// sgemm.h: private fp32 GEMM (packed GotoBLAS-style, AVX-512 micro-kernel, OpenMP over 2+ threads).
#pragma once

namespace ft::trainer::ops {

// C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta * C, all row-major with leading dimensions.
//   trans_a: A is stored (K,M) with row stride lda, else (M,K).
//   trans_b: B is stored (N,K) with row stride ldb, else (K,N).
// beta == 0 never reads C (it may hold NaN). Each C element is summed over k in ascending
// order by exactly one thread with a fixed blocking, so results are bitwise identical for
// any thread count and across runs. Uses the calling OpenMP team size (omp_get_max_threads)
// unless the problem is tiny. Not reentrant from inside an OpenMP parallel region.
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

// True when sgemm has its AVX-512 kernel compiled in (otherwise it is a slow portable loop).
bool sgemm_is_vectorised();

}  // namespace ft::trainer::ops
