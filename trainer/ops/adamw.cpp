// adamw.cpp: fused AdamW parameter update (bias-corrected, decoupled weight decay) and
// the global reductions used for gradient clipping / overflow checks.
#include <algorithm>
#include <bit>
#include <cmath>

#include "ft/trainer/ops.h"

namespace ft::trainer::ops {

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int t) {
  // params (n), grads (n), m (n), v (n)
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  const float inv_bc1 = 1.0f / bc1;
  const float inv_bc2 = 1.0f / bc2;
  const float one_m_b1 = 1.0f - beta1;
  const float one_m_b2 = 1.0f - beta2;
  const auto N = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; i++) {
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
