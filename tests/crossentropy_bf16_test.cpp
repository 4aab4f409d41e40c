// crossentropy_bf16_test.cpp: bf16-logit softmax cross-entropy against the double reference and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ft/trainer/ops.h"
#include "ft/trainer/precision.h"
#include "reference/grad_check.h"
#include "reference/ops_ref.h"

namespace ops = ft::trainer::ops;
namespace ref = ft::test::ref;
using ft::test::compare;
using ft::test::expect_close;

TEST(OpsGrad, CrossEntropyBf16) {
  const int N = 6, V = 301, Vp = 320;
  auto logits = ft::test::randn(static_cast<size_t>(N) * Vp, 77, 3.0f);
  logits[5] = 50.0f;  // stability
  std::vector<uint16_t> lb(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) lb[i] = ft::trainer::fp32_to_bf16_scalar(logits[i]);
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++) lb[n * Vp + i] = ft::trainer::fp32_to_bf16_scalar(1000.0f);
  // The reference sees exactly the bf16 values.
  std::vector<double> ld(lb.size());
  for (size_t i = 0; i < lb.size(); ++i) ld[i] = ft::trainer::bf16_to_fp32_scalar(lb[i]);
  const std::vector<int32_t> targets = {0, 300, 5, 17, 150, 3};
  const float dloss = 1.0f / N;
  const auto ref_losses = ref::crossentropy(ld, targets, N, V, Vp);

  std::vector<float> losses(N);
  ops::crossentropy_forward_bf16(lb.data(), losses.data(), targets.data(), N, V, Vp);
  // Tolerance: fp32 math on exact bf16 inputs, 1e-5 relative to the largest loss.
  expect_close("crossentropy_bf16 losses (fwd only)", compare(losses.data(), ref_losses), 1e-5);

  std::vector<uint16_t> d = lb;
  const double total =
      ops::crossentropy_forward_backward_bf16(d.data(), losses.data(), targets.data(), N, V, Vp, dloss);
  expect_close("crossentropy_bf16 losses (fwd+bwd)", compare(losses.data(), ref_losses), 1e-5);
  double ref_total = 0;
  for (double x : ref_losses) ref_total += x;
  EXPECT_NEAR(total, ref_total, 1e-5 * std::fabs(ref_total));

  const auto g = ft::test::fd_grad(
      [&](const std::vector<double>& x) {
        double s = 0.0;
        for (double l : ref::crossentropy(x, targets, N, V, Vp)) s += dloss * l;
        return s;
      },
      ld);
  std::vector<float> dl(d.size());
  for (size_t i = 0; i < d.size(); ++i) dl[i] = ft::trainer::bf16_to_fp32_scalar(d[i]);
  // Tolerance: dlogits are stored in bf16 (8 mantissa bits): 2^-8 relative to the largest.
  expect_close("crossentropy_bf16 dlogits", compare(dl.data(), g), 4e-3);
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++) EXPECT_EQ(d[n * Vp + i], 0) << "padding " << n << "," << i;
}
