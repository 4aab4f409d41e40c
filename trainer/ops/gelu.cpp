// gelu.cpp: GPT-2 GELU (tanh approximation) forward/backward, and the residual add.
#include <cmath>

#include "ft/trainer/ops.h"
#include "simd_math.h"

namespace ft::trainer::ops {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  // out (n), inp (n); may alias
  const auto N = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + detail::fast_tanhf(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  // dinp (n), inp (n), dout (n); dinp may alias dout
  const auto N = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = detail::fast_tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float local = 0.5f * (1.0f + th) +
                        0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = local * dout[i];
  }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  // out (n), a (n), b (n); out may alias a or b
  const auto N = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

}  // namespace ft::trainer::ops
