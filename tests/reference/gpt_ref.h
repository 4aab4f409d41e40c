// gpt_ref.h: an independent, naive double-precision GPT-2 forward used as the gradient reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ft/trainer/gpt_config.h"

namespace ft::test {

// Mean cross-entropy of the GPT-2 forward pass, computed with plain loops in
// double. params uses ft's (llm.c's) flat layout.
inline double ref_gpt_loss(const trainer::GptConfig& g, const std::vector<double>& params,
                           const int32_t* inputs, const int32_t* targets, int B, int T) {
  using trainer::ParamLayout;
  const ParamLayout lay = ParamLayout::make(g);
  const int C = g.channels, L = g.num_layers, NH = g.num_heads, V = g.vocab_size;
  const int HS = C / NH;
  auto P = [&](int idx) { return params.data() + lay.offsets[idx]; };
  auto layernorm = [&](const std::vector<double>& x, const double* w, const double* b) {
    std::vector<double> out(x.size());
    for (int r = 0; r < B * T; ++r) {
      double mean = 0, var = 0;
      for (int c = 0; c < C; ++c) mean += x[r * C + c];
      mean /= C;
      for (int c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
      var /= C;
      const double rstd = 1.0 / std::sqrt(var + 1e-5);
      for (int c = 0; c < C; ++c) out[r * C + c] = (x[r * C + c] - mean) * rstd * w[c] + b[c];
    }
    return out;
  };
  // y (rows, OC) = x (rows, IC) @ W (OC, IC)^T + b
  auto linear = [&](const std::vector<double>& x, const double* W, const double* bias, int IC,
                    int OC) {
    const int rows = B * T;
    std::vector<double> y(static_cast<size_t>(rows) * OC);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < OC; ++o) {
        double s = bias ? bias[o] : 0.0;
        for (int i = 0; i < IC; ++i) s += x[static_cast<size_t>(r) * IC + i] * W[static_cast<size_t>(o) * IC + i];
        y[static_cast<size_t>(r) * OC + o] = s;
      }
    return y;
  };
  std::vector<double> x(static_cast<size_t>(B) * T * C);  // (B, T, C)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        x[(b * T + t) * C + c] = P(trainer::kWte)[inputs[b * T + t] * C + c] + P(trainer::kWpe)[t * C + c];
  for (int l = 0; l < L; ++l) {
    auto ln1 = layernorm(x, P(trainer::kLn1w) + l * C, P(trainer::kLn1b) + l * C);
    auto qkv = linear(ln1, P(trainer::kQkvw) + static_cast<size_t>(l) * 3 * C * C,
                      P(trainer::kQkvb) + l * 3 * C, C, 3 * C);  // (B, T, 3C)
    std::vector<double> atty(x.size(), 0.0);                    // (B, T, C)
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          const double* q = &qkv[(b * T + t) * 3 * C + h * HS];
          std::vector<double> s(t + 1);
          double mx = -1e300;
          for (int u = 0; u <= t; ++u) {
            const double* k = &qkv[(b * T + u) * 3 * C + C + h * HS];
            double d = 0;
            for (int i = 0; i < HS; ++i) d += q[i] * k[i];
            s[u] = d * scale;
            mx = std::max(mx, s[u]);
          }
          double z = 0;
          for (int u = 0; u <= t; ++u) z += (s[u] = std::exp(s[u] - mx));
          for (int u = 0; u <= t; ++u) {
            const double* v = &qkv[(b * T + u) * 3 * C + 2 * C + h * HS];
            for (int i = 0; i < HS; ++i) atty[(b * T + t) * C + h * HS + i] += s[u] / z * v[i];
          }
        }
    auto proj = linear(atty, P(trainer::kAttprojw) + static_cast<size_t>(l) * C * C,
                       P(trainer::kAttprojb) + l * C, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    auto ln2 = layernorm(x, P(trainer::kLn2w) + l * C, P(trainer::kLn2b) + l * C);
    auto fc = linear(ln2, P(trainer::kFcw) + static_cast<size_t>(l) * 4 * C * C,
                     P(trainer::kFcb) + l * 4 * C, C, 4 * C);
    const double k0 = std::sqrt(2.0 / M_PI);
    for (double& v : fc) v = 0.5 * v * (1.0 + std::tanh(k0 * (v + 0.044715 * v * v * v)));
    auto fp = linear(fc, P(trainer::kFcprojw) + static_cast<size_t>(l) * C * 4 * C,
                     P(trainer::kFcprojb) + l * C, 4 * C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += fp[i];
  }
  auto lnf = layernorm(x, P(trainer::kLnfw), P(trainer::kLnfb));
  double loss = 0;
  for (int r = 0; r < B * T; ++r) {
    std::vector<double> logits(V);
    double mx = -1e300;
    for (int v = 0; v < V; ++v) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += lnf[r * C + c] * P(trainer::kWte)[static_cast<size_t>(v) * C + c];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(logits[v] - mx);
    loss += -(logits[targets[r]] - mx - std::log(z));
  }
  return loss / (B * T);
}

}  // namespace ft::test
