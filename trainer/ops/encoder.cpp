// encoder.cpp: token + position embedding (GPT-2 wte/wpe), forward and backward.
#include <omp.h>

#include <algorithm>

#include "ft/trainer/ops.h"

namespace ft::trainer::ops {

void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int B, int T, int C) {
  // out (B,T,C), inp (B,T), wte (V,C), wpe (maxT,C)
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float* out_bt = out + (static_cast<size_t>(b) * T + t) * C;  // (C)
      const float* wte_ix = wte + static_cast<size_t>(inp[b * T + t]) * C;  // (C)
      const float* wpe_t = wpe + static_cast<size_t>(t) * C;  // (C)
#pragma omp simd
      for (int i = 0; i < C; i++) out_bt[i] = wte_ix[i] + wpe_t[i];
    }
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int B, int T, int C) {
  // dwte (V,C), dwpe (maxT,C), dout (B,T,C), inp (B,T)
  // dwpe: each t owns its row; sum over b in fixed order.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float* dwpe_t = dwpe + static_cast<size_t>(t) * C;  // (C)
    for (int b = 0; b < B; b++) {
      const float* dout_bt = dout + (static_cast<size_t>(b) * T + t) * C;  // (C)
#pragma omp simd
      for (int i = 0; i < C; i++) dwpe_t[i] += dout_bt[i];
    }
  }
  // dwte scatter-add: race-free by splitting CHANNELS across threads; each
  // thread walks all tokens in (b,t) order, so the summation order (and the
  // result) is independent of the thread count.
#pragma omp parallel
  {
    const int nth = omp_get_num_threads();
    const int tid = omp_get_thread_num();
    const int per = ((C + nth - 1) / nth + 15) / 16 * 16;  // 64-byte aligned chunks
    const int c0 = std::min(C, tid * per);
    const int c1 = std::min(C, c0 + per);
    if (c0 < c1) {
      for (int bt = 0; bt < B * T; bt++) {
        const float* dout_bt = dout + static_cast<size_t>(bt) * C;  // (C)
        float* dwte_ix = dwte + static_cast<size_t>(inp[bt]) * C;  // (C)
#pragma omp simd
        for (int i = c0; i < c1; i++) dwte_ix[i] += dout_bt[i];
      }
    }
  }
}

}  // namespace ft::trainer::ops
