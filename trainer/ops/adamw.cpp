// adamw.cpp: fused AdamW parameter update (bias-corrected, decoupled weight decay) and
// the global reductions used for gradient clipping / overflow checks.
#include <algorithm>
#include <bit>
#include <cmath>

#include "ft/trainer/ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

// GCC 12's avx512fintrin.h self-initialises an "undefined" vector inside
// _mm512_set1_ps, which trips -Wmaybe-uninitialized under -Werror (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ft::trainer::ops {

namespace {

// One contiguous chunk of the update. With errno semantics (no -ffast-math) GCC
// will not vectorise a loop calling sqrtf, so the AVX-512 path is explicit; the
// scalar loop handles the tail (and non-AVX-512 builds) with the same formula.
void adamw_chunk(float* params, const float* grads, float* m, float* v, size_t lo, size_t hi,
                 float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, float inv_bc1, float inv_bc2) {
  // params, grads, m, v: [lo, hi)
  const float one_m_b1 = 1.0f - beta1;
  const float one_m_b2 = 1.0f - beta2;
  size_t i = lo;
#if defined(__AVX512F__)
  const __m512 vb1 = _mm512_set1_ps(beta1), vb2 = _mm512_set1_ps(beta2);
  const __m512 v1b1 = _mm512_set1_ps(one_m_b1), v1b2 = _mm512_set1_ps(one_m_b2);
  const __m512 vgs = _mm512_set1_ps(grad_scale), vlr = _mm512_set1_ps(lr);
  const __m512 veps = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(weight_decay);
  const __m512 vbc1 = _mm512_set1_ps(inv_bc1), vbc2 = _mm512_set1_ps(inv_bc2);
  for (; i + 16 <= hi; i += 16) {
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grads + i), vgs);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(v1b1, g));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(v1b2, g), g));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 mhat = _mm512_mul_ps(mi, vbc1);
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, vbc2)), veps);
    const __m512 p = _mm512_loadu_ps(params + i);
    const __m512 upd = _mm512_add_ps(_mm512_div_ps(mhat, den), _mm512_mul_ps(vwd, p));
    _mm512_storeu_ps(params + i, _mm512_sub_ps(p, _mm512_mul_ps(vlr, upd)));
  }
#endif
  for (; i < hi; i++) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + one_m_b1 * g;
    const float vi = beta2 * v[i] + one_m_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1;
    const float vhat = vi * inv_bc2;
    const float p = params[i];
    params[i] = p - lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * p);
  }
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int t) {
  // params (n), grads (n), m (n), v (n)
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  constexpr size_t kChunk = 16384;
  const auto nchunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; c++) {
    const size_t lo = static_cast<size_t>(c) * kChunk;
    adamw_chunk(params, grads, m, v, lo, std::min(n, lo + kChunk), lr, beta1, beta2, eps,
                weight_decay, grad_scale, 1.0f / bc1, 1.0f / bc2);
  }
}

double sum_squares(const float* x, size_t n) {
  // x (n). Fixed 256-way split (independent of the thread count), each chunk
  // summed in double, chunks combined in order => deterministic everywhere.
  constexpr int kChunks = 256;
  double partial[kChunks];
  const size_t per = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < kChunks; c++) {
    const size_t lo = std::min(n, static_cast<size_t>(c) * per);
    const size_t hi = std::min(n, lo + per);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = lo; i < hi; i++) {
      const double d = x[i];
      acc += d * d;
    }
    partial[c] = acc;
  }
  double total = 0.0;
  for (int c = 0; c < kChunks; c++) total += partial[c];
  return total;
}

bool has_nonfinite(const float* x, size_t n) {
  // x (n). inf/NaN <=> all exponent bits set.
  const auto N = static_cast<int64_t>(n);
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad)
  for (int64_t i = 0; i < N; i++) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i]);
    bad |= static_cast<int>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad != 0;
}

}  // namespace ft::trainer::ops
