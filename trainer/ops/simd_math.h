// simd_math.h: private vectorisable math helpers shared by the CPU op kernels (not a public header).
//
// fast_expf is branch-free arithmetic (range reduction + Cephes polynomial) so
// that GCC vectorises it inside `#pragma omp simd` loops without -ffast-math,
// which libm's expf would prevent. Max relative error ~2 ulp on [-87, 88];
// returns exactly 0 below -87 (those terms are negligible in every softmax here).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ft::trainer::ops::detail {

#pragma omp declare simd notinbranch
inline float fast_expf(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.3f ? 88.3f : x);
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest integer
  float r = xc - n * 0.693359375f;                  // ln2 split in hi + lo parts
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
  return x < -87.0f ? 0.0f : y * scale;
}

// tanh via exp: tanh(u) = 1 - 2 / (exp(2u) + 1). Absolute error ~1e-7.
#pragma omp declare simd notinbranch
inline float fast_tanhf(float u) {
  return 1.0f - 2.0f / (fast_expf(2.0f * u) + 1.0f);
}

#if defined(__AVX512F__)
// 16-lane fast_expf (same range reduction and polynomial, fused multiply-adds); 0 below -87.
inline __m512 fast_exp512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(ok, _mm512_scalef_ps(y, n));
}

inline __mmask16 lane_mask(int j, int n) {  // lanes j..j+15 that are < n
  const int k = std::clamp(n - j, 0, 16);
  return static_cast<__mmask16>((1u << k) - 1u);
}
#endif

// max_j x[j] over j < n (n >= 1).
inline float row_max(const float* x, int n) {
#if defined(__AVX512F__)
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < n; j += 16)
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, lane_mask(j, n), x + j));
  return _mm512_reduce_max_ps(m);
#else
  float m = -INFINITY;
  for (int j = 0; j < n; j++) m = std::max(m, x[j]);
  return m;
#endif
}

// x[j] <- exp(x[j] * scale - bias) for j < n, 0 for n <= j < n_zero; returns the sum over j < n.
inline float row_exp(float* x, int n, int n_zero, float scale, float bias) {
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(scale), vb = _mm512_set1_ps(bias);
  __m512 acc = _mm512_setzero_ps();
  for (int j = 0; j < n_zero; j += 16) {
    const __mmask16 live = lane_mask(j, n);
    const __m512 xv = _mm512_maskz_loadu_ps(live, x + j);
    const __m512 e = _mm512_maskz_mov_ps(live, fast_exp512(_mm512_fmsub_ps(xv, vs, vb)));
    acc = _mm512_add_ps(acc, e);
    _mm512_mask_storeu_ps(x + j, lane_mask(j, n_zero), e);
  }
  return _mm512_reduce_add_ps(acc);
#else
  float sum = 0.0f;
  for (int j = 0; j < n; j++) {
    x[j] = fast_expf(std::fma(x[j], scale, -bias));
    sum += x[j];
  }
  for (int j = n; j < n_zero; j++) x[j] = 0.0f;
  return sum;
#endif
}

// Flash backward row: p[j] <- exp(s[j] * scale - lse), ds[j] <- p[j] * (ds[j] - d) * scale for
// j < n; both 0 for n <= j < n_zero.
inline void row_softmax_grad(float* p, float* ds, int n, int n_zero, float scale, float lse,
                             float d) {
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(scale), vl = _mm512_set1_ps(lse), vd = _mm512_set1_ps(d);
  for (int j = 0; j < n_zero; j += 16) {
    const __mmask16 live = lane_mask(j, n), out = lane_mask(j, n_zero);
    const __m512 pv = _mm512_maskz_mov_ps(
        live, fast_exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(live, p + j), vs, vl)));
    const __m512 g = _mm512_sub_ps(_mm512_maskz_loadu_ps(live, ds + j), vd);
    _mm512_mask_storeu_ps(p + j, out, pv);
    _mm512_mask_storeu_ps(ds + j, out, _mm512_mul_ps(_mm512_mul_ps(pv, g), vs));
  }
#else
  for (int j = 0; j < n; j++) {
    p[j] = fast_expf(std::fma(p[j], scale, -lse));
    ds[j] = p[j] * (ds[j] - d) * scale;
  }
  for (int j = n; j < n_zero; j++) p[j] = ds[j] = 0.0f;
#endif
}

// x[j] *= f for j < n.
inline void row_scale(float* x, int n, float f) {
#if defined(__AVX512F__)
  const __m512 vf = _mm512_set1_ps(f);
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = lane_mask(j, n);
    _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), vf));
  }
#else
  for (int j = 0; j < n; j++) x[j] *= f;
#endif
}

// Softmax backward of one row: d[j] <- a[j] * (d[j] - sum_k a[k] d[k]) * scale for j < n,
// 0 for n <= j < n_zero (a = probabilities, d = their gradient on entry).
inline void row_softmax_bwd(const float* a, float* d, int n, int n_zero, float scale) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = lane_mask(j, n);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_maskz_loadu_ps(m, d + j), acc);
  }
  const __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(acc)), vs = _mm512_set1_ps(scale);
  for (int j = 0; j < n_zero; j += 16) {
    const __mmask16 m = lane_mask(j, n);
    const __m512 g = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, d + j), dot);
    const __m512 r = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + j), g), vs);
    _mm512_mask_storeu_ps(d + j, lane_mask(j, n_zero), _mm512_maskz_mov_ps(m, r));
  }
#else
  float dot = 0.0f;
  for (int j = 0; j < n; j++) dot += a[j] * d[j];
  for (int j = 0; j < n; j++) d[j] = a[j] * (d[j] - dot) * scale;
  for (int j = n; j < n_zero; j++) d[j] = 0.0f;
#endif
}

}  // namespace ft::trainer::ops::detail
