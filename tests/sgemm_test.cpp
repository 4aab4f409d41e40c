// sgemm_test: ft's packed fp32 sgemm against a double-precision reference, plus determinism checks.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../trainer/ops/sgemm.h"

namespace {

using ft::trainer::ops::sgemm;

struct Case {
  int m, n, k;
  int pad_a = 0, pad_b = 0, pad_c = 0;  // extra leading-dimension elements beyond the minimum
};

struct Operands {
  int lda, ldb, ldc;
  std::vector<float> a, b, c;  // a: (m,k) or (k,m); b: (k,n) or (n,k); c: (m,n), padded rows
};

Operands make_operands(const Case& t, bool ta, bool tb, unsigned seed) {
  Operands o;
  o.lda = (ta ? t.m : t.k) + t.pad_a;
  o.ldb = (tb ? t.k : t.n) + t.pad_b;
  o.ldc = t.n + t.pad_c;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  o.a.resize(static_cast<size_t>(ta ? t.k : t.m) * o.lda);
  o.b.resize(static_cast<size_t>(tb ? t.n : t.k) * o.ldb);
  o.c.resize(static_cast<size_t>(t.m) * o.ldc);
  for (float& x : o.a) x = dist(rng);
  for (float& x : o.b) x = dist(rng);
  for (float& x : o.c) x = dist(rng);
  return o;
}

// Reference C = op(A) op(B) + beta C in double; returns max |sgemm - ref| over the valid region
// and checks the padding columns of C are untouched.
double max_error(const Case& t, bool ta, bool tb, float beta, unsigned seed) {
  Operands o = make_operands(t, ta, tb, seed);
  const std::vector<float> c0 = o.c;
  if (beta == 0.0f) {  // beta == 0 must not read C: poison the valid region with NaN
    for (int i = 0; i < t.m; ++i) {
      for (int j = 0; j < t.n; ++j) o.c[static_cast<size_t>(i) * o.ldc + j] = NAN;
    }
  }
  sgemm(ta, tb, t.m, t.n, t.k, o.a.data(), o.lda, o.b.data(), o.ldb, beta, o.c.data(), o.ldc);
  double err = 0;
  for (int i = 0; i < t.m; ++i) {
    for (int j = 0; j < t.n; ++j) {
      double ref = beta * static_cast<double>(c0[static_cast<size_t>(i) * o.ldc + j]);
      for (int p = 0; p < t.k; ++p) {
        const double a = ta ? o.a[static_cast<size_t>(p) * o.lda + i] : o.a[static_cast<size_t>(i) * o.lda + p];
        const double b = tb ? o.b[static_cast<size_t>(j) * o.ldb + p] : o.b[static_cast<size_t>(p) * o.ldb + j];
        ref += a * b;
      }
      const double got = o.c[static_cast<size_t>(i) * o.ldc + j];
      err = std::isfinite(got) ? std::max(err, std::abs(got - ref)) : INFINITY;
    }
    for (int j = t.n; j < o.ldc; ++j) {
      EXPECT_EQ(o.c[static_cast<size_t>(i) * o.ldc + j], c0[static_cast<size_t>(i) * o.ldc + j])
          << "padding column " << j << " of row " << i << " was written";
    }
  }
  return err;
}

// Shapes straddling every blocking size of the kernel (MR 14, NR 32, KC 256, MC 336, NC 2048)
// and the 16-wide transposes, plus padded leading dimensions.
std::vector<Case> cases() {
  return {
      {1, 1, 1},        {13, 17, 19},      {129, 65, 300},    {14, 32, 16},
      {15, 33, 17},     {13, 31, 15},      {28, 64, 256},     {29, 63, 257},
      {27, 65, 255},    {336, 40, 20},     {337, 45, 33},     {335, 31, 512},
      {20, 2048, 24},   {21, 2049, 18},    {17, 2047, 513},   {3, 5000, 7},
      {700, 3, 9},      {64, 64, 1000},    {1, 100, 1},       {100, 1, 100},
      {13, 17, 19, 3, 5, 7}, {129, 65, 300, 1, 16, 31}, {50, 70, 33, 17, 1, 2},
      {340, 2050, 260, 5, 3, 1},
  };
}

class SgemmTest : public ::testing::TestWithParam<std::tuple<bool, bool, float>> {};

TEST_P(SgemmTest, MatchesDoubleReference) {
  const auto [ta, tb, beta] = GetParam();
  double worst_ratio = 0;
  unsigned seed = 1;
  for (const Case& t : cases()) {
    const double err = max_error(t, ta, tb, beta, seed++);
    // Operands are in [-1, 1], so each fp32 partial sum is bounded by K; fp32 accumulation
    // of K products has error <= ~K * eps * K in the worst case, typically far less. We allow
    // 1e-5 * K * max|a| * max|b| (+ |beta C| rounding), i.e. about 84 * K ulps of one product.
    const double tol = 1e-5 * t.k * 1.0 * 1.0 + 1e-6;
    EXPECT_LE(err, tol) << "m=" << t.m << " n=" << t.n << " k=" << t.k << " trans_a=" << ta
                        << " trans_b=" << tb << " beta=" << beta;
    worst_ratio = std::max(worst_ratio, err / tol);
    std::printf("  %s%s beta=%g m=%d n=%d k=%d lda+%d ldb+%d ldc+%d: max|diff| %.3g (tol %.3g)\n",
                ta ? "T" : "N", tb ? "T" : "N", beta, t.m, t.n, t.k, t.pad_a, t.pad_b, t.pad_c,
                err, tol);
  }
  std::printf("  worst max|diff| / tol = %.4f\n", worst_ratio);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, SgemmTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0.0f, 1.0f, 0.5f)));

TEST(SgemmTest, ZeroKScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  sgemm(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  sgemm(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

// Runs one GEMM with `threads` OpenMP threads and returns C.
std::vector<float> run_with_threads(const Case& t, bool ta, bool tb, float beta, int threads) {
  Operands o = make_operands(t, ta, tb, 42);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  sgemm(ta, tb, t.m, t.n, t.k, o.a.data(), o.lda, o.b.data(), o.ldb, beta, o.c.data(), o.ldc);
  omp_set_num_threads(saved);
  return o.c;
}

// Bitwise reproducibility: repeated runs, and 1 vs 2 vs 3 threads (threads own whole C tiles and
// never split K, so the split cannot change any element's summation order).
TEST(SgemmTest, DeterministicAcrossRunsAndThreadCounts) {
  // Several C tiles per thread (kMC 336 rows x kNC 512 columns), several K slices (kKC 256),
  // and a B wider than one packed super-block (kBBuf / kKC = 4096 columns), at a third of the
  // FLOPs the first version used (145 s on an AVX2-only Zen 3, where the portable path runs).
  const std::vector<Case> shapes = {{700, 768, 256}, {768, 256, 2048}, {301, 517, 600, 3, 2, 1},
                                    {400, 5000, 256}};
  for (const Case& t : shapes) {
    for (int combo = 0; combo < 4; ++combo) {
      const bool ta = combo & 1, tb = combo & 2;
      const float beta = combo == 1 ? 1.0f : 0.0f;
      const std::vector<float> ref = run_with_threads(t, ta, tb, beta, 2);
      const std::vector<float> again = run_with_threads(t, ta, tb, beta, 2);
      const std::vector<float> one = run_with_threads(t, ta, tb, beta, 1);
      const std::vector<float> three = run_with_threads(t, ta, tb, beta, 3);
      const size_t bytes = ref.size() * sizeof(float);
      EXPECT_EQ(std::memcmp(ref.data(), again.data(), bytes), 0) << "run-to-run m=" << t.m;
      EXPECT_EQ(std::memcmp(ref.data(), one.data(), bytes), 0) << "1 vs 2 threads m=" << t.m;
      EXPECT_EQ(std::memcmp(ref.data(), three.data(), bytes), 0) << "3 vs 2 threads m=" << t.m;
    }
  }
}

}  // namespace
