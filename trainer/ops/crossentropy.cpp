// crossentropy.cpp: fused, numerically stable softmax + cross-entropy over padded logits;
// the forward-backward variant overwrites the logits with dlogits in place.
#include <cmath>

#include "ft/trainer/ops.h"
#include "simd_math.h"

namespace ft::trainer::ops {

namespace {

inline float row_max(const float* x, int V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
  return m;
}

// Sum of losses in fixed row order (deterministic, independent of threads).
inline double sum_losses(const float* losses, int N) {
  double total = 0.0;
  for (int n = 0; n < N; n++) total += losses[n];
  return total;
}

}  // namespace

double crossentropy_forward_backward(float* logits, float* losses, const int32_t* targets,
                                     int N, int V, int Vp, float dloss) {
  // logits (N,Vp) in, dlogits (N,Vp) out in place; losses (N); targets (N)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits + static_cast<size_t>(n) * Vp;  // (Vp)
    const int tgt = targets[n];
    const float maxv = row_max(x, V);
    const float x_tgt = x[tgt];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; i++) {
      const float e = detail::fast_expf(x[i] - maxv);
      x[i] = e;
      sum += e;
    }
    losses[n] = std::log(sum) + maxv - x_tgt;
    const float g = dloss / sum;
#pragma omp simd
    for (int i = 0; i < V; i++) x[i] *= g;
    x[tgt] -= dloss;
#pragma omp simd
    for (int i = V; i < Vp; i++) x[i] = 0.0f;
  }
  return sum_losses(losses, N);
}

double crossentropy_forward(const float* logits, float* losses, const int32_t* targets, int N,
                            int V, int Vp) {
  // logits (N,Vp), losses (N), targets (N)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits + static_cast<size_t>(n) * Vp;  // (Vp)
    const float maxv = row_max(x, V);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; i++) sum += detail::fast_expf(x[i] - maxv);
    losses[n] = std::log(sum) + maxv - x[targets[n]];
  }
  return sum_losses(losses, N);
}

}  // namespace ft::trainer::ops
