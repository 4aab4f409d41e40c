// attention.cpp: causal multi-head self-attention with the (B,NH,T,T) probabilities materialised.
#include <cmath>
#include <cstring>

#include "ft/trainer/ops.h"
#include "simd_math.h"

namespace ft::trainer::ops {

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) = q|k|v each (B,T,NH,HS)
  const int HS = C / NH;
  const size_t C3 = static_cast<size_t>(C) * 3;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
        const float* q = qkv_b + t * C3 + h * HS;  // (HS)
        float* att_row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;  // (T)
        // scores and running max over t2 <= t
        float maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv_b + t2 * C3 + C + h * HS;  // (HS)
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int i = 0; i < HS; i++) dot += q[i] * k[i];
          dot *= scale;
          att_row[t2] = dot;
          maxval = dot > maxval ? dot : maxval;
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int t2 = 0; t2 <= t; t2++) {
          const float e = detail::fast_expf(att_row[t2] - maxval);
          att_row[t2] = e;
          sum += e;
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int t2 = 0; t2 <= t; t2++) att_row[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) att_row[t2] = 0.0f;
        // out[t] = sum_t2 att[t2] * v[t2]
        float* o = out + (static_cast<size_t>(b) * T + t) * C + h * HS;  // (HS)
        std::memset(o, 0, sizeof(float) * HS);
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv_b + t2 * C3 + 2 * C + h * HS;  // (HS)
          const float a = att_row[t2];
#pragma omp simd
          for (int i = 0; i < HS; i++) o[i] += a * v[i];
        }
      }
    }
  }
}

void attention_backward(float* dqkv, float* datt_scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  // dqkv (B,T,3C) written, datt_scratch (B,NH,T,T), dout (B,T,C), qkv (B,T,3C),
  // att (B,NH,T,T)
  const int HS = C / NH;
  const size_t C3 = static_cast<size_t>(C) * 3;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // dk/dv of position t2 receive contributions from every t >= t2, so each
  // (b,h) pair is one task, processed serially => race-free and deterministic.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float* qkv_b = qkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      float* dqkv_b = dqkv + static_cast<size_t>(b) * T * C3;  // (T,3C)
      for (int t = 0; t < T; t++) {
        for (int j = 0; j < 3; j++) std::memset(dqkv_b + t * C3 + j * C + h * HS, 0, sizeof(float) * HS);
      }
      for (int t = 0; t < T; t++) {
        const size_t row = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const float* att_row = att + row;  // (T)
        float* datt_row = datt_scratch + row;  // (T)
        const float* q = qkv_b + t * C3 + h * HS;  // (HS)
        float* dq = dqkv_b + t * C3 + h * HS;  // (HS)
        const float* dout_t = dout + (static_cast<size_t>(b) * T + t) * C + h * HS;  // (HS)
        // datt[t2] = dout_t . v[t2]; dv[t2] += att[t2] * dout_t
        float dot_ad = 0.0f;  // sum_t2 att[t2] * datt[t2]
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv_b + t2 * C3 + 2 * C + h * HS;  // (HS)
          float* dv = dqkv_b + t2 * C3 + 2 * C + h * HS;  // (HS)
          const float a = att_row[t2];
          float d = 0.0f;
#pragma omp simd reduction(+ : d)
          for (int i = 0; i < HS; i++) {
            d += dout_t[i] * v[i];
            dv[i] += a * dout_t[i];
          }
          datt_row[t2] = d;
          dot_ad += a * d;
        }
        // softmax backward: dpreatt = att * (datt - sum(att * datt)), then the
        // scaled q.k product
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv_b + t2 * C3 + C + h * HS;  // (HS)
          float* dk = dqkv_b + t2 * C3 + C + h * HS;  // (HS)
          const float dpre = att_row[t2] * (datt_row[t2] - dot_ad) * scale;
#pragma omp simd
          for (int i = 0; i < HS; i++) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
    }
  }
}

}  // namespace ft::trainer::ops
