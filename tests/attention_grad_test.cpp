// attention_grad_test.cpp: checks materialised and flash (tiled) causal attention against
// the double reference forward, against each other, and their backwards against central
// finite differences of L = sum(out * R) for a fixed random R.
#include <omp.h>

#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ft/trainer/ops.h"
#include "reference/grad_check.h"
#include "reference/ops_ref.h"

namespace ops = ft::trainer::ops;
namespace ref = ft::test::ref;
using ft::test::compare;
using ft::test::expect_close;
using ft::test::fd_grad;
using ft::test::randn;
using ft::test::to_double;

namespace {

constexpr double kFwdTol = 1e-5;    // float forward vs double reference (rel-to-max)
constexpr double kGradTol = 1e-4;   // float backward vs double central differences
constexpr double kFlashTol = 1e-5;  // flash vs materialised (both float)

struct Shape {
  int B, T, C, NH;
  float stddev;    // qkv scale: larger => peakier softmax, exercises online rescaling
  int fd_samples;  // 0 => finite differences on every qkv coordinate
};

std::vector<size_t> sample_indices(size_t n, int count, uint32_t seed) {
  std::vector<size_t> idx;
  if (count <= 0) return idx;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> dist(0, n - 1);
  for (int i = 0; i < count; i++) idx.push_back(dist(rng));
  idx.push_back(0);
  idx.push_back(n - 1);  // last position, v of the last head
  return idx;
}

// Restrict a comparison to the sampled coordinates.
ft::test::Diff compare_at(const float* a, const std::vector<double>& b,
                          const std::vector<size_t>& idx) {
  if (idx.empty()) return compare(a, b);
  std::vector<float> as;
  std::vector<double> bs;
  for (size_t k : idx) {
    as.push_back(a[k]);
    bs.push_back(b[k]);
  }
  return compare(as.data(), bs);
}

void run_case(const Shape& s, uint32_t seed) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  std::printf("shape B=%d T=%d C=%d NH=%d (tile %d)\n", B, T, C, NH, ops::kFlashTile);
  const size_t nqkv = static_cast<size_t>(B) * T * 3 * C;
  const size_t nout = static_cast<size_t>(B) * T * C;
  const size_t natt = static_cast<size_t>(B) * NH * T * T;
  const auto qkv = randn(nqkv, seed, s.stddev);
  const auto qkv_d = to_double(qkv);
  ref::Vec ratt, rlse;
  const auto rout = ref::attention(qkv_d, B, T, C, NH, &ratt, &rlse);

  // materialised forward
  std::vector<float> out(nout), att(natt, -1.0f);
  ops::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  expect_close("attention forward out", compare(out.data(), rout), kFwdTol);
  expect_close("attention forward att", compare(att.data(), ratt), kFwdTol);  // incl. zero upper triangle

  // flash forward
  std::vector<float> fout(nout), lse(static_cast<size_t>(B) * NH * T);
  ops::attention_flash_forward(fout.data(), lse.data(), qkv.data(), B, T, C, NH);
  expect_close("flash forward out", compare(fout.data(), rout), kFwdTol);
  expect_close("flash forward lse", compare(lse.data(), rlse), kFwdTol);
  expect_close("flash vs materialised out", compare(fout.data(), to_double(out)), kFlashTol);

  // backwards
  const auto R = to_double(randn(nout, seed + 1));
  const std::vector<float> dout(R.begin(), R.end());
  std::vector<float> dqkv(nqkv, 123.0f), datt(natt);  // dqkv is written, not accumulated
  ops::attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  std::vector<float> fdqkv(nqkv, -7.0f);
  ops::attention_flash_backward(fdqkv.data(), dout.data(), qkv.data(), fout.data(), lse.data(), B,
                                T, C, NH);
  expect_close("flash vs materialised dqkv", compare(fdqkv.data(), to_double(dqkv)), kFlashTol);

  const auto idx = sample_indices(nqkv, s.fd_samples, seed + 2);
  const auto g = fd_grad(
      [&](const ref::Vec& x) { return ft::test::dot(ref::attention(x, B, T, C, NH), R); }, qkv_d,
      1e-6, idx);
  expect_close("attention dqkv vs finite diff", compare_at(dqkv.data(), g, idx), kGradTol);
  expect_close("flash dqkv vs finite diff", compare_at(fdqkv.data(), g, idx), kGradTol);
}

}  // namespace

TEST(AttentionGrad, SmallerThanTile) { run_case({2, 9, 8, 2, 1.0f, 0}, 100); }
TEST(AttentionGrad, OneTile) { run_case({1, 20, 12, 2, 1.5f, 0}, 200); }  // HS = 6
TEST(AttentionGrad, ExactTile) { run_case({1, ops::kFlashTile, 8, 2, 1.0f, 300}, 300); }
TEST(AttentionGrad, T70) { run_case({2, 70, 16, 2, 2.0f, 400}, 400); }
TEST(AttentionGrad, T130) { run_case({1, 130, 24, 3, 2.0f, 400}, 500); }
// Head sizes that hit the vectorised (16-wide) small-GEMM paths, with and without a tail.
TEST(AttentionGrad, HS16) { run_case({2, 33, 32, 2, 1.0f, 300}, 600); }
TEST(AttentionGrad, HS64T70) { run_case({1, 70, 128, 2, 1.0f, 150}, 700); }
TEST(AttentionGrad, HS24T130) { run_case({1, 130, 48, 2, 1.5f, 150}, 800); }

TEST(AttentionGrad, FlashDeterministicAcrossThreads) {
  const int B = 2, T = 100, C = 32, NH = 4;
  const auto qkv = randn(static_cast<size_t>(B) * T * 3 * C, 7);
  const auto dout = randn(static_cast<size_t>(B) * T * C, 8);
  auto run = [&](int threads, std::vector<float>& out, std::vector<float>& dqkv) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> lse(static_cast<size_t>(B) * NH * T);
    out.assign(static_cast<size_t>(B) * T * C, 0.0f);
    dqkv.assign(qkv.size(), 0.0f);
    ops::attention_flash_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    ops::attention_flash_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B,
                                  T, C, NH);
    omp_set_num_threads(saved);
  };
  std::vector<float> o1, d1, o2, d2, o3, d3;
  run(1, o1, d1);
  run(2, o2, d2);
  run(2, o3, d3);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(o2, o3);
  EXPECT_EQ(d2, d3);
}
