// simd_math.h: private vectorisable math helpers shared by the CPU op kernels (not a public header).
//
// fast_expf is branch-free arithmetic (range reduction + Cephes polynomial) so
// that GCC vectorises it inside `#pragma omp simd` loops without -ffast-math,
// which libm's expf would prevent. Max relative error ~2 ulp on [-87, 88];
// returns exactly 0 below -87 (those terms are negligible in every softmax here).
#pragma once

#include <bit>
#include <cstdint>

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

}  // namespace ft::trainer::ops::detail
