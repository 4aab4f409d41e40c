// ops_ref.h: independent naive double-precision reference forwards of the ft CPU ops,
// used by the tests both to check float forwards and as the function whose central
// finite differences check the float backwards. Deliberately simple loops, no tricks.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <vector>

namespace ft::test::ref {

using Vec = std::vector<double>;

// out (B,T,C) = wte[inp] (V,C) + wpe[t] (maxT,C)
inline Vec encoder(const std::vector<int32_t>& inp, const Vec& wte, const Vec& wpe, int B, int T,
                   int C) {
  Vec out(static_cast<size_t>(B) * T * C);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        out[(static_cast<size_t>(b) * T + t) * C + c] =
            wte[static_cast<size_t>(inp[b * T + t]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
  return out;
}

// out (N,C); mean (N), rstd (N) optional; eps 1e-5, biased variance.
inline Vec layernorm(const Vec& inp, const Vec& w, const Vec& bias, int N, int C,
                     Vec* mean = nullptr, Vec* rstd = nullptr) {
  Vec out(inp.size());
  if (mean) mean->assign(N, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; n++) {
    const double* x = &inp[static_cast<size_t>(n) * C];
    double m = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    double var = 0.0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; c++) out[static_cast<size_t>(n) * C + c] = (x[c] - m) * s * w[c] + bias[c];
    if (mean) (*mean)[n] = m;
    if (rstd) (*rstd)[n] = s;
  }
  return out;
}

inline double gelu(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

inline Vec gelu(const Vec& x) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = gelu(x[i]);
  return out;
}

inline Vec residual(const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); i++) out[i] = a[i] + b[i];
  return out;
}

// Causal MHA. qkv (B,T,3C) = q|k|v, each (B,T,NH,HS). out (B,T,C);
// att (B,NH,T,T) probabilities and lse (B,NH,T) of the scaled scores, both optional.
inline Vec attention(const Vec& qkv, int B, int T, int C, int NH, Vec* att = nullptr,
                     Vec* lse = nullptr) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  Vec out(static_cast<size_t>(B) * T * C, 0.0);
  if (att) att->assign(static_cast<size_t>(B) * NH * T * T, 0.0);
  if (lse) lse->assign(static_cast<size_t>(B) * NH * T, 0.0);
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * HS + i];
  };
  std::vector<double> s(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          double d = 0.0;
          for (int i = 0; i < HS; i++) d += at(b, t, 0, h, i) * at(b, t2, 1, h, i);
          s[t2] = d * scale;
          mx = std::max(mx, s[t2]);
        }
        double sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) sum += std::exp(s[t2] - mx);
        const size_t row = (static_cast<size_t>(b) * NH + h) * T + t;
        if (lse) (*lse)[row] = mx + std::log(sum);
        for (int t2 = 0; t2 <= t; t2++) {
          const double p = std::exp(s[t2] - mx) / sum;
          if (att) (*att)[row * T + t2] = p;
          for (int i = 0; i < HS; i++)
            out[(static_cast<size_t>(b) * T + t) * C + h * HS + i] += p * at(b, t2, 2, h, i);
        }
      }
  return out;
}

// losses (N) = -log softmax(logits[n, :V])[target]; logits (N,Vp).
inline Vec crossentropy(const Vec& logits, const std::vector<int32_t>& targets, int N, int V,
                        int Vp) {
  Vec losses(N);
  for (int n = 0; n < N; n++) {
    const double* x = &logits[static_cast<size_t>(n) * Vp];
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = std::max(mx, x[i]);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += std::exp(x[i] - mx);
    losses[n] = std::log(sum) + mx - x[targets[n]];
  }
  return losses;
}

// One AdamW step in double (bias-corrected, decoupled weight decay), in place.
inline void adamw(Vec& p, const Vec& g, Vec& m, Vec& v, double lr, double b1, double b2,
                  double eps, double wd, double grad_scale, int t) {
  for (size_t i = 0; i < p.size(); i++) {
    const double gi = g[i] * grad_scale;
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    const double mhat = m[i] / (1 - std::pow(b1, t));
    const double vhat = v[i] / (1 - std::pow(b2, t));
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
  }
}

}  // namespace ft::test::ref
