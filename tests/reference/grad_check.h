// grad_check.h: test helpers: seeded random fills, float-vs-double comparison with a
// relative-to-max-abs metric, and central finite differences of a double objective.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ft::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

struct Diff {
  double max_abs = 0.0;  // max |a - b|
  double max_ref = 0.0;  // max |b|
  double rel() const { return max_abs / std::max(1e-6, max_ref); }
};

// a: values under test (float or double), b: reference.
template <typename A>
Diff compare(const A* a, const std::vector<double>& b) {
  Diff d;
  for (size_t i = 0; i < b.size(); i++) {
    d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(a[i]) - b[i]));
    d.max_ref = std::max(d.max_ref, std::fabs(b[i]));
  }
  return d;
}

// Print and assert rel <= tol (rel = max|a-b| / max(1e-6, max|b|)).
inline void expect_close(const std::string& what, const Diff& d, double tol) {
  std::printf("  %-34s max_abs=%.3e max|ref|=%.3e rel=%.3e (tol %.1e)\n", what.c_str(),
              d.max_abs, d.max_ref, d.rel(), tol);
  ::testing::Test::RecordProperty(what + "_rel", std::to_string(d.rel()));
  EXPECT_LE(d.rel(), tol) << what;
  EXPECT_TRUE(std::isfinite(d.rel())) << what;
}

// Central finite differences of f at x in double: g[k] = (f(x+h e_k) - f(x-h e_k)) / 2h.
// If `indices` is non-empty only those coordinates are computed (others left 0).
inline std::vector<double> fd_grad(const std::function<double(const std::vector<double>&)>& f,
                                   std::vector<double> x, double h = 1e-6,
                                   const std::vector<size_t>& indices = {}) {
  std::vector<double> g(x.size(), 0.0);
  auto one = [&](size_t k) {
    const double x0 = x[k];
    x[k] = x0 + h;
    const double fp = f(x);
    x[k] = x0 - h;
    const double fm = f(x);
    x[k] = x0;
    g[k] = (fp - fm) / (2 * h);
  };
  if (indices.empty()) {
    for (size_t k = 0; k < x.size(); k++) one(k);
  } else {
    for (size_t k : indices) one(k);
  }
  return g;
}

// sum(out * R)
inline double dot(const std::vector<double>& out, const std::vector<double>& R) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * R[i];
  return s;
}

}  // namespace ft::test
