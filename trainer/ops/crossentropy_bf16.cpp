// crossentropy_bf16.cpp: fused softmax + cross-entropy over bf16 logits, fp32 math, bf16 dlogits in place.
#include <cmath>
#include <cstring>
#include <vector>

#include "ft/trainer/ops.h"
#include "ft/trainer/precision.h"
#include "simd_math.h"

namespace ft::trainer::ops {

namespace {

// Row scratch, allocated once per thread and reused (fresh pages are expensive).
std::vector<float>& row_scratch(int Vp) {
  thread_local std::vector<float> buf;
  if (static_cast<int>(buf.size()) < Vp) buf.resize(Vp);
  return buf;
}

inline void widen(float* out, const uint16_t* in, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    out[i] = f;
  }
}

// Fills x (V) with exp(x - max) and returns the loss terms for one row.
inline void softmax_row(float* x, int V, float* maxv_out, float* sum_out) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < V; i++) {
    const float e = detail::fast_expf(x[i] - m);
    x[i] = e;
    sum += e;
  }
  *maxv_out = m;
  *sum_out = sum;
}

}  // namespace

double crossentropy_forward_backward_bf16(uint16_t* logits, float* losses,
                                          const int32_t* targets, int N, int V, int Vp,
                                          float dloss) {
  // logits (N,Vp) bf16 in, dlogits (N,Vp) bf16 out; losses (N); targets (N)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    uint16_t* row = logits + static_cast<size_t>(n) * Vp;  // (Vp)
    float* x = row_scratch(Vp).data();                      // (Vp) fp32
    widen(x, row, V);
    const int tgt = targets[n];
    const float x_tgt = x[tgt];
    float maxv, sum;
    softmax_row(x, V, &maxv, &sum);
    losses[n] = std::log(sum) + maxv - x_tgt;
    const float g = dloss / sum;
#pragma omp simd
    for (int i = 0; i < V; i++) x[i] *= g;
    x[tgt] -= dloss;
    fp32_to_bf16(row, x, V);
    std::memset(row + V, 0, sizeof(uint16_t) * (Vp - V));
  }
  double total = 0.0;
  for (int n = 0; n < N; n++) total += losses[n];
  return total;
}

double crossentropy_forward_bf16(const uint16_t* logits, float* losses, const int32_t* targets,
                                 int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = row_scratch(Vp).data();  // (Vp)
    widen(x, logits + static_cast<size_t>(n) * Vp, V);
    const float x_tgt = x[targets[n]];
    float maxv, sum;
    softmax_row(x, V, &maxv, &sum);
    losses[n] = std::log(sum) + maxv - x_tgt;
  }
  double total = 0.0;
  for (int n = 0; n < N; n++) total += losses[n];
  return total;
}

}  // namespace ft::trainer::ops
