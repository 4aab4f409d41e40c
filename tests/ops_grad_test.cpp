// ops_grad_test.cpp: checks the CPU op kernels (all but attention) against independent
// double references: forwards directly, backwards via central finite differences of
// L = sum(out * R) for a fixed random R.
#include <cmath>
#include <cstdio>
#include <limits>
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
constexpr double kFwdTol = 1e-5;   // float forward vs double reference (rel-to-max)
constexpr double kGradTol = 1e-4;  // float backward vs double central differences
}  // namespace

TEST(OpsGrad, Encoder) {
  const int B = 2, T = 5, C = 7, V = 6, maxT = 8;
  const std::vector<int32_t> inp = {0, 3, 3, 5, 1, 3, 0, 2, 3, 4};  // repeats exercise scatter-add
  auto wte = randn(static_cast<size_t>(V) * C, 1);
  auto wpe = randn(static_cast<size_t>(maxT) * C, 2);
  std::vector<float> out(static_cast<size_t>(B) * T * C);
  ops::encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  const auto ref_out = ref::encoder(inp, to_double(wte), to_double(wpe), B, T, C);
  expect_close("encoder forward", compare(out.data(), ref_out), kFwdTol);

  const auto R = to_double(randn(out.size(), 3));
  std::vector<float> dout(R.begin(), R.end());
  // gradients accumulate: start from non-zero and subtract afterwards
  std::vector<float> dwte(wte.size(), 0.5f), dwpe(wpe.size(), -0.25f);
  ops::encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  for (auto& x : dwte) x -= 0.5f;
  for (auto& x : dwpe) x += 0.25f;
  const auto wte_d = to_double(wte), wpe_d = to_double(wpe);
  const auto g_wte = fd_grad(
      [&](const std::vector<double>& x) { return ft::test::dot(ref::encoder(inp, x, wpe_d, B, T, C), R); },
      wte_d);
  const auto g_wpe = fd_grad(
      [&](const std::vector<double>& x) { return ft::test::dot(ref::encoder(inp, wte_d, x, B, T, C), R); },
      wpe_d);
  expect_close("encoder dwte", compare(dwte.data(), g_wte), kGradTol);
  expect_close("encoder dwpe", compare(dwpe.data(), g_wpe), kGradTol);
}

TEST(OpsGrad, LayerNorm) {
  const int N = 6, C = 24;
  auto inp = randn(static_cast<size_t>(N) * C, 10, 2.0f);
  for (int n = 0; n < N; n++)  // row offsets stress the mean subtraction
    for (int c = 0; c < C; c++) inp[n * C + c] += 3.0f * n - 5.0f;
  auto w = randn(C, 11);
  auto bias = randn(C, 12);
  std::vector<float> out(inp.size()), mean(N), rstd(N);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), bias.data(),
                         N, C);
  ref::Vec rmean, rrstd;
  const auto inp_d = to_double(inp), w_d = to_double(w), b_d = to_double(bias);
  const auto ref_out = ref::layernorm(inp_d, w_d, b_d, N, C, &rmean, &rrstd);
  expect_close("layernorm forward", compare(out.data(), ref_out), kFwdTol);
  expect_close("layernorm mean", compare(mean.data(), rmean), kFwdTol);
  expect_close("layernorm rstd", compare(rstd.data(), rrstd), kFwdTol);
  // null mean/rstd is allowed and gives the same output
  std::vector<float> out2(inp.size());
  ops::layernorm_forward(out2.data(), nullptr, nullptr, inp.data(), w.data(), bias.data(), N, C);
  EXPECT_EQ(out, out2);

  const auto R = to_double(randn(out.size(), 13));
  std::vector<float> dout(R.begin(), R.end());
  std::vector<float> dinp(inp.size(), 1.0f), dw(C, 2.0f), db(C, -1.0f);  // accumulate
  ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  for (auto& x : dinp) x -= 1.0f;
  for (auto& x : dw) x -= 2.0f;
  for (auto& x : db) x += 1.0f;
  const auto g_inp = fd_grad(
      [&](const ref::Vec& x) { return ft::test::dot(ref::layernorm(x, w_d, b_d, N, C), R); }, inp_d);
  const auto g_w = fd_grad(
      [&](const ref::Vec& x) { return ft::test::dot(ref::layernorm(inp_d, x, b_d, N, C), R); }, w_d);
  const auto g_b = fd_grad(
      [&](const ref::Vec& x) { return ft::test::dot(ref::layernorm(inp_d, w_d, x, N, C), R); }, b_d);
  expect_close("layernorm dinp", compare(dinp.data(), g_inp), kGradTol);
  expect_close("layernorm dweight", compare(dw.data(), g_w), kGradTol);
  expect_close("layernorm dbias", compare(db.data(), g_b), kGradTol);
}

TEST(OpsGrad, Gelu) {
  const size_t n = 1000;  // odd remainder vs vector width
  auto inp = randn(n, 20, 3.0f);
  inp[0] = 0.0f;
  inp[1] = 12.0f;
  inp[2] = -12.0f;
  inp[3] = 1e-4f;
  std::vector<float> out(n);
  ops::gelu_forward(out.data(), inp.data(), n);
  const auto inp_d = to_double(inp);
  expect_close("gelu forward", compare(out.data(), ref::gelu(inp_d)), kFwdTol);
  // in-place forward
  std::vector<float> inplace = inp;
  ops::gelu_forward(inplace.data(), inplace.data(), n);
  EXPECT_EQ(inplace, out);

  const auto R = to_double(randn(n, 21));
  std::vector<float> dout(R.begin(), R.end()), dinp(n);
  ops::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  const auto g = fd_grad([&](const ref::Vec& x) { return ft::test::dot(ref::gelu(x), R); }, inp_d);
  expect_close("gelu dinp", compare(dinp.data(), g), kGradTol);
  // in-place backward (dinp aliases dout)
  ops::gelu_backward(dout.data(), inp.data(), dout.data(), n);
  EXPECT_EQ(dout, dinp);
}

TEST(OpsGrad, Residual) {
  const size_t n = 333;
  auto a = randn(n, 30), b = randn(n, 31);
  std::vector<float> out(n);
  ops::residual_forward(out.data(), a.data(), b.data(), n);
  const auto a_d = to_double(a), b_d = to_double(b);
  expect_close("residual forward", compare(out.data(), ref::residual(a_d, b_d)), kFwdTol);
  // backward is the identity: check d/da of sum(out*R) = R by finite differences
  const auto R = to_double(randn(n, 32));
  const auto g = fd_grad([&](const ref::Vec& x) { return ft::test::dot(ref::residual(x, b_d), R); }, a_d);
  std::vector<float> Rf(R.begin(), R.end());
  expect_close("residual da (identity)", compare(Rf.data(), g), kGradTol);
  // aliasing out == a
  ops::residual_forward(a.data(), a.data(), b.data(), n);
  EXPECT_EQ(a, out);
}

TEST(OpsGrad, CrossEntropy) {
  const int N = 5, V = 37, Vp = 48;
  auto logits = randn(static_cast<size_t>(N) * Vp, 40, 2.0f);
  logits[3] = 60.0f;  // large logit: stability
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++) logits[n * Vp + i] = 1000.0f;  // padding must be ignored
  const std::vector<int32_t> targets = {0, 36, 5, 17, 3};
  const float dloss = 1.0f / N;
  std::vector<float> losses(N), losses2(N);
  const double total_fwd = ops::crossentropy_forward(logits.data(), losses.data(), targets.data(), N, V, Vp);
  const auto logits_d = to_double(logits);
  const auto ref_losses = ref::crossentropy(logits_d, targets, N, V, Vp);
  expect_close("crossentropy losses (fwd only)", compare(losses.data(), ref_losses), kFwdTol);
  double ref_total = 0.0;
  for (double x : ref_losses) ref_total += x;
  EXPECT_NEAR(total_fwd, ref_total, 1e-5 * std::fabs(ref_total));

  std::vector<float> dlogits = logits;
  const double total = ops::crossentropy_forward_backward(dlogits.data(), losses2.data(),
                                                          targets.data(), N, V, Vp, dloss);
  expect_close("crossentropy losses (fwd+bwd)", compare(losses2.data(), ref_losses), kFwdTol);
  EXPECT_NEAR(total, ref_total, 1e-5 * std::fabs(ref_total));
  std::printf("  crossentropy total=%.9f ref=%.9f\n", total, ref_total);

  auto g = fd_grad(
      [&](const ref::Vec& x) {
        double s = 0.0;
        for (double l : ref::crossentropy(x, targets, N, V, Vp)) s += dloss * l;
        return s;
      },
      logits_d);
  expect_close("crossentropy dlogits", compare(dlogits.data(), g), kGradTol);
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++) EXPECT_EQ(dlogits[n * Vp + i], 0.0f) << "padding " << n << "," << i;
}

TEST(OpsGrad, AdamW) {
  const size_t n = 515;
  auto p = randn(n, 50), m = randn(n, 51, 0.01f), v = randn(n, 52, 0.01f);
  for (auto& x : v) x = x * x;
  auto p_d = to_double(p), m_d = to_double(m), v_d = to_double(v);
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.25f;
  for (int t = 1; t <= 3; t++) {
    const auto g = randn(n, 60 + t, 4.0f);
    const auto p_prev = p;
    const auto p_prev_d = p_d;
    ops::adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, gs, t);
    ref::adamw(p_d, to_double(g), m_d, v_d, lr, b1, b2, eps, wd, gs, t);
    expect_close("adamw params step " + std::to_string(t), compare(p.data(), p_d), 1e-6);
    // the update itself (p_new - p_old), relative to its own magnitude
    std::vector<float> delta(n);
    ref::Vec delta_d(n);
    for (size_t i = 0; i < n; i++) {
      delta[i] = p[i] - p_prev[i];
      delta_d[i] = p_d[i] - p_prev_d[i];
    }
    expect_close("adamw update step " + std::to_string(t), compare(delta.data(), delta_d), 1e-4);
    expect_close("adamw m step " + std::to_string(t), compare(m.data(), m_d), 1e-6);
    expect_close("adamw v step " + std::to_string(t), compare(v.data(), v_d), 1e-6);
  }
  // wd = 0 leaves a zero-gradient parameter untouched (m = v = 0 initially)
  std::vector<float> p0 = {1.5f}, g0 = {0.0f}, m0 = {0.0f}, v0 = {0.0f};
  ops::adamw_update(p0.data(), g0.data(), m0.data(), v0.data(), 1, lr, b1, b2, eps, 0.0f, 1.0f, 1);
  EXPECT_EQ(p0[0], 1.5f);
}

TEST(OpsReductions, SumSquares) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{257}, size_t{100003}}) {
    auto x = randn(n, 70);
    double ref = 0.0;
    for (float f : x) ref += static_cast<double>(f) * f;
    const double got = ops::sum_squares(x.data(), n);
    std::printf("  sum_squares n=%zu got=%.12g ref=%.12g\n", n, got, ref);
    EXPECT_NEAR(got, ref, 1e-12 * std::max(1.0, ref));
  }
}

TEST(OpsReductions, HasNonfinite) {
  const size_t n = 1031;
  auto x = randn(n, 80);
  x[5] = std::numeric_limits<float>::max();
  x[6] = std::numeric_limits<float>::denorm_min();
  x[7] = -std::numeric_limits<float>::max();
  EXPECT_FALSE(ops::has_nonfinite(x.data(), n));
  EXPECT_FALSE(ops::has_nonfinite(x.data(), 0));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t pos : {size_t{0}, size_t{500}, n - 1}) {
      auto y = x;
      y[pos] = bad;
      EXPECT_TRUE(ops::has_nonfinite(y.data(), n)) << "value " << bad << " at " << pos;
    }
  }
}
