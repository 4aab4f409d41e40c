// sgemm.cpp: fp32 GEMM with packed panels, an AVX-512 FMA micro-kernel and a deterministic thread split.
//
// Structure (GotoBLAS/BLIS): for each NC-column block, pack a K super-block of op(B) (up to
// kBBuf floats) as NR-wide k-major panels, one KC slice after another; for each MC-row block
// and each KC slice, pack op(A) (MC, KC) into MR-tall k-major panels and run the micro-kernel
// with the A micro-panel held in L1 (ir outer) while B micro-panels stream from L2 (jr inner).
// The MR x NR tile of C lives in 28 zmm registers for a whole KC slice.
// Threads own disjoint contiguous ranges of C rows or columns and never split K, and every
// C element is accumulated as acc = fma(a_k, b_k, acc) for k ascending within each KC slice,
// then added to C slice by slice, so the result does not depend on the thread count.

// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "sgemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace ft::trainer::ops {
namespace {

// Scales C (M,N) by beta in place (used when K == 0); beta == 0 writes zeros.
void scale_c(int M, int N, float beta, float* C, int ldc) {
  for (int m = 0; m < M; ++m) {
    float* row = C + static_cast<size_t>(m) * ldc;
    for (int n = 0; n < N; ++n) row[n] = beta == 0.0f ? 0.0f : beta * row[n];
  }
}

#if defined(__AVX512F__)

constexpr int kMR = 14;          // rows of the register tile (broadcasts of A)
constexpr int kNV = 2;           // zmm vectors per tile row
constexpr int kNR = 16 * kNV;    // columns of the register tile
constexpr int kKC = 256;         // K slice: one A micro-panel (kKC, kMR) = 14 KiB stays in L1
constexpr int kMC = kMR * 24;    // rows per packed A block (kMC, kKC) = 336 KiB
constexpr int kNC = kNR * 16;    // columns per block: B slice (kKC, kNC) 512 KiB + C block in L2
constexpr int kBBuf = 1 << 20;   // floats of packed B per thread (4 MiB): a K super-block
constexpr int kPrefetchK = 16;   // B rows prefetched ahead in the micro-kernel
constexpr int kPackPrefetchRows = 4;  // source rows prefetched ahead when packing op(A)^T

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// Per-thread packing buffers, allocated once per thread and reused by every call (fresh pages
// are expensive on this VM). OpenMP pool threads persist, so this happens once per thread.
struct PackBuffers {
  std::unique_ptr<float, FreeDeleter> a, b;
  PackBuffers()
      : a(static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kMC * kKC))),
        b(static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kBBuf))) {}
};

PackBuffers& thread_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

__mmask16 tail_mask(int count) {  // lowest `count` lanes, count clamped to [0, 16]
  if (count >= 16) return 0xFFFF;
  if (count <= 0) return 0;
  return static_cast<__mmask16>((1u << count) - 1);
}

// In-place 16x16 transpose: on entry r[i] is row i, on exit r[j] is column j.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane L, r[4i+j] holds column 4L+j of rows 4i..4i+3
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    const __m512 u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
    t[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    t[8 + j] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    t[4 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Copies the (rows, kc) row-major block src (row stride ld; rows <= 16) transposed into dst:
// dst[k * dst_stride + i] = src[i * ld + k] for i < width, where rows..width-1 are zero.
// Stores `width` floats per k (width <= 16).
void pack_transposed(const float* src, int ld, int rows, int kc, float* dst, int dst_stride,
                     int width) {
  const __mmask16 store_mask = tail_mask(width);
  int k = 0;
  for (; k + 16 <= kc; k += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = i < rows ? _mm512_loadu_ps(src + static_cast<size_t>(i) * ld + k)
                      : _mm512_setzero_ps();
    }
    transpose16(r);
    for (int j = 0; j < 16; ++j) {
      _mm512_mask_storeu_ps(dst + static_cast<size_t>(k + j) * dst_stride, store_mask, r[j]);
    }
  }
  for (; k < kc; ++k) {
    float* d = dst + static_cast<size_t>(k) * dst_stride;
    for (int i = 0; i < width; ++i) d[i] = i < rows ? src[static_cast<size_t>(i) * ld + k] : 0.0f;
  }
}

// Packs op(A)[m0:m0+mc, k0:k0+kc] into kMR-row panels; rows past mc are zero. Both layouts are
// plain copies of the source: trans: panel p at ap + p * kc, (kc, kMR) k-major; not trans:
// panel p at ap + p * kKC, (kMR, kKC) row-major (row stride kKC even when kc < kKC).
void pack_a(bool trans, const float* A, int lda, int m0, int mc, int k0, int kc, float* ap) {
  if (trans) {  // op(A)(m,k) = A[k * lda + m]: walk each source row once, left to right
    const __mmask16 store_mask = tail_mask(kMR);
    for (int k = 0; k < kc; ++k) {
      const float* src = A + static_cast<size_t>(k0 + k) * lda + m0;
      if (k + kPackPrefetchRows < kc) {  // short strided runs defeat the hardware prefetcher
        const float* ahead = src + static_cast<size_t>(kPackPrefetchRows) * lda;
        for (int p = 0; p < mc; p += 16) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + p), _MM_HINT_T0);
        }
      }
      for (int p = 0; p < mc; p += kMR) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(mc - p), src + p);
        _mm512_mask_storeu_ps(ap + static_cast<size_t>(p) * kc + k * kMR, store_mask, v);
      }
    }
    return;
  }
  for (int p = 0; p < mc; p += kMR) {  // op(A)(m,k) = A[m * lda + k]: copy kMR rows as they are
    const int mr = std::min(kMR, mc - p);
    float* dst = ap + static_cast<size_t>(p) * kKC;  // (kMR, kKC) row-major
    for (int i = 0; i < kMR; ++i) {
      if (i < mr) {
        std::memcpy(dst + i * kKC, A + static_cast<size_t>(m0 + p + i) * lda + k0, sizeof(float) * kc);
      } else {
        std::memset(dst + i * kKC, 0, sizeof(float) * kc);
      }
    }
  }
}

// Packs op(B)[k0:k0+kc, n0:n0+nc] into kNR-column panels, panel q at bp + q * kc laid out
// (kc, kNR) k-major; columns past nc are zero.
void pack_b(bool trans, const float* B, int ldb, int k0, int kc, int n0, int nc, float* bp) {
  for (int q = 0; q < nc; q += kNR) {
    const int nr = std::min(kNR, nc - q);
    float* dst = bp + static_cast<size_t>(q) * kc;  // (kc, kNR)
    if (!trans) {  // op(B)(k,n) = B[k * ldb + n]: each k is a contiguous run of nr values
      __mmask16 masks[kNV];
      for (int v = 0; v < kNV; ++v) masks[v] = tail_mask(nr - 16 * v);
      for (int k = 0; k < kc; ++k) {
        const float* src = B + static_cast<size_t>(k0 + k) * ldb + n0 + q;
        for (int v = 0; v < kNV; ++v) {
          _mm512_store_ps(dst + k * kNR + 16 * v, _mm512_maskz_loadu_ps(masks[v], src + 16 * v));
        }
      }
    } else {  // op(B)(k,n) = B[n * ldb + k]: transpose 16 columns at a time
      for (int v = 0; v < kNV; ++v) {
        const int rows = std::clamp(nr - 16 * v, 0, 16);
        pack_transposed(B + static_cast<size_t>(n0 + q + 16 * v) * ldb + k0, ldb, rows, kc,
                        dst + 16 * v, kNR, 16);
      }
    }
  }
}

// C tile (m, n) = acc + scale * C, acc = a panel @ b (kc, NR) panel; the a panel is (kc, MR)
// k-major when AKMajor, else (MR, kKC) row-major. scale == 0 does not read C. m <= MR and
// n <= NR select the valid part of the tile.
template <int MR, int NV, bool AKMajor>
void micro_kernel(int kc, const float* __restrict a, const float* __restrict b, float* c,
                  int ldc, int m, int n, float scale) {
  constexpr int NR = 16 * NV;
  for (int i = 0; i < MR; ++i) {
    if (i < m) {
      _mm_prefetch(reinterpret_cast<const char*>(c + static_cast<size_t>(i) * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + static_cast<size_t>(i) * ldc + NR - 1),
                   _MM_HINT_T0);
    }
  }
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + k * NR + 16 * v);
    _mm_prefetch(reinterpret_cast<const char*>(b + (k + kPrefetchK) * NR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + (k + kPrefetchK) * NR + 16), _MM_HINT_T0);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(AKMajor ? a[k * MR + i] : a[i * kKC + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
  if (n == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
      float* row = c + static_cast<size_t>(i) * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __m512 r = acc[i][v];
        if (scale != 0.0f) r = _mm512_fmadd_ps(_mm512_loadu_ps(row + 16 * v), sv, r);
        _mm512_storeu_ps(row + 16 * v, r);
      }
    }
  } else {
    __mmask16 masks[NV];
    for (int v = 0; v < NV; ++v) masks[v] = tail_mask(n - 16 * v);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
      float* row = c + static_cast<size_t>(i) * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        __m512 r = acc[i][v];
        if (scale != 0.0f) r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(masks[v], row + 16 * v), sv, r);
        _mm512_mask_storeu_ps(row + 16 * v, masks[v], r);
      }
    }
  }
}

// One thread's share: C[m_begin:m_end, n_begin:n_end] over all of K.
void gemm_range(bool trans_a, bool trans_b, int m_begin, int m_end, int n_begin, int n_end, int K,
                const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  PackBuffers& buf = thread_buffers();
  float* ap = buf.a.get();
  float* bp = buf.b.get();
  for (int jc = n_begin; jc < n_end; jc += kNC) {
    const int nc = std::min(kNC, n_end - jc);
    // K super-block: as many KC slices of op(B) as fit the buffer, packed once, so each C
    // block (kMC, nc) takes all of the super-block's slices while it is hot in L2.
    const int kb_max = std::max(kKC, kBBuf / (kNC * kKC) * kKC);
    for (int kb = 0; kb < K; kb += kb_max) {
      const int kb_len = std::min(kb_max, K - kb);
      for (int pc = kb; pc < kb + kb_len; pc += kKC) {
        pack_b(trans_b, B, ldb, pc, std::min(kKC, K - pc), jc, nc,
               bp + static_cast<size_t>(pc - kb) * kNC);
      }
      for (int ic = m_begin; ic < m_end; ic += kMC) {
        const int mc = std::min(kMC, m_end - ic);
        for (int pc = kb; pc < kb + kb_len; pc += kKC) {
          const int kc = std::min(kKC, K - pc);
          const float scale = pc == 0 ? beta : 1.0f;
          const float* bslice = bp + static_cast<size_t>(pc - kb) * kNC;  // (kc, nc) in panels
          pack_a(trans_a, A, lda, ic, mc, pc, kc, ap);
          for (int ir = 0; ir < mc; ir += kMR) {
            for (int jr = 0; jr < nc; jr += kNR) {
              const float* bpanel = bslice + static_cast<size_t>(jr) * kc;
              float* ctile = C + static_cast<size_t>(ic + ir) * ldc + jc + jr;
              const int m = std::min(kMR, mc - ir), n = std::min(kNR, nc - jr);
              if (trans_a) {
                micro_kernel<kMR, kNV, true>(kc, ap + static_cast<size_t>(ir) * kc, bpanel, ctile,
                                             ldc, m, n, scale);
              } else {
                micro_kernel<kMR, kNV, false>(kc, ap + static_cast<size_t>(ir) * kKC, bpanel,
                                              ctile, ldc, m, n, scale);
              }
            }
          }
        }
      }
    }
  }
}

#endif  // __AVX512F__

}  // namespace

bool sgemm_is_vectorised() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
#if defined(__AVX512F__)
  // Tiny problems run on the calling thread; the split never changes the arithmetic.
  const double flops = 2.0 * M * N * K;
  const int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int threads = flops < 4.0e6 ? 1 : max_threads;
  if (threads == 1) {
    gemm_range(trans_a, trans_b, 0, M, 0, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split the larger of M and N into contiguous, tile-aligned ranges, one per thread.
  const int m_units = (M + kMR - 1) / kMR, n_units = (N + kNR - 1) / kNR;
  const bool split_n = n_units >= m_units;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int units = split_n ? n_units : m_units;
    const int u0 = static_cast<int>(static_cast<long long>(units) * t / nt);
    const int u1 = static_cast<int>(static_cast<long long>(units) * (t + 1) / nt);
    if (u0 < u1) {
      if (split_n) {
        gemm_range(trans_a, trans_b, 0, M, u0 * kNR, std::min(N, u1 * kNR), K, A, lda, B, ldb,
                   beta, C, ldc);
      } else {
        gemm_range(trans_a, trans_b, u0 * kMR, std::min(M, u1 * kMR), 0, N, K, A, lda, B, ldb,
                   beta, C, ldc);
      }
    }
  }
#else
  // Portable fallback: same per-element order (k ascending), no blocking.
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) {
        const float a = trans_a ? A[static_cast<size_t>(k) * lda + m] : A[static_cast<size_t>(m) * lda + k];
        const float b = trans_b ? B[static_cast<size_t>(n) * ldb + k] : B[static_cast<size_t>(k) * ldb + n];
        acc += a * b;
      }
      float& c = C[static_cast<size_t>(m) * ldc + n];
      c = beta == 0.0f ? acc : acc + beta * c;
    }
  }
#endif
}

}  // namespace ft::trainer::ops
