// layernorm.cpp: LayerNorm over the channel dimension (eps 1e-5), forward and backward.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ft/trainer/ops.h"

namespace ft::trainer::ops {

namespace {
constexpr float kEps = 1e-5f;
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  // out (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;  // (C)
    float* o = out + static_cast<size_t>(n) * C;  // (C)
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < C; i++) sum += x[i];
    const float m = sum / static_cast<float>(C);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int i = 0; i < C; i++) {
      const float d = x[i] - m;
      var += d * d;
    }
    const float s = 1.0f / std::sqrt(var / static_cast<float>(C) + kEps);
#pragma omp simd
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
  // dinp (N,C) accumulates, dweight (C), dbias (C) accumulate,
  // dout (N,C), inp (N,C), weight (C), mean (N), rstd (N)
  const int max_threads = omp_get_max_threads();
  // per-thread partial dweight|dbias (nthreads, 2, C); one allocation per call,
  // reduced afterwards in fixed thread order => deterministic for a thread count.
  std::vector<float> partial(static_cast<size_t>(max_threads) * 2 * C, 0.0f);
  int used_threads = 1;
#pragma omp parallel
  {
    const int nth = omp_get_num_threads();
    const int tid = omp_get_thread_num();
#pragma omp single
    used_threads = nth;
    float* dw_part = partial.data() + static_cast<size_t>(tid) * 2 * C;  // (C)
    float* db_part = dw_part + C;  // (C)
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float* dout_n = dout + static_cast<size_t>(n) * C;  // (C)
      const float* x = inp + static_cast<size_t>(n) * C;  // (C)
      float* dinp_n = dinp + static_cast<size_t>(n) * C;  // (C)
      const float m = mean[n];
      const float s = rstd[n];
      float dnorm_mean = 0.0f;
      float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int i = 0; i < C; i++) {
        const float norm = (x[i] - m) * s;
        const float dnorm = weight[i] * dout_n[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= static_cast<float>(C);
      dnorm_norm_mean /= static_cast<float>(C);
#pragma omp simd
      for (int i = 0; i < C; i++) {
        const float norm = (x[i] - m) * s;
        const float dnorm = weight[i] * dout_n[i];
        db_part[i] += dout_n[i];
        dw_part[i] += norm * dout_n[i];
        dinp_n[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
    // implicit barrier; reduce the partials over channels in fixed thread order
#pragma omp for schedule(static)
    for (int i = 0; i < C; i++) {
      float dw = 0.0f;
      float db = 0.0f;
      for (int k = 0; k < used_threads; k++) {
        dw += partial[static_cast<size_t>(k) * 2 * C + i];
        db += partial[static_cast<size_t>(k) * 2 * C + C + i];
      }
      if (dweight) dweight[i] += dw;
      if (dbias) dbias[i] += db;
    }
  }
}

}  // namespace ft::trainer::ops
