// cuda_ops_gpu_test.cpp: every CUDA kernel against its CPU twin (trainer/ops) on random data, in
// fp32, bf16 and fp16.
//
// Inputs are rounded to X on the host first, so both sides see the same values; the CPU twin
// computes in fp32. Tolerances (Tol<X>): one rounding of the output to X, i.e. rel 1e-4 (fp32),
// 1.6e-2 (bf16), 2e-3 (fp16), plus an absolute floor of Tol<X>::abs times the tensor's largest
// magnitude. Outputs start as NaN, so an unwritten element fails.
#include <numeric>

#include "engine_test_util.h"
#include "ft/trainer/ops.h"

namespace ft::test::gpu {
namespace {

namespace tg = ft::trainer::gpu;
namespace ops = ft::trainer::ops;

template <typename X>
class CudaOpsTest : public ::testing::Test {};
using ActTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(CudaOpsTest, ActTypes);

std::vector<int32_t> random_tokens(size_t n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % V);
  return t;
}

template <typename T>
void put(T* dst, const std::vector<T>& v) {
  cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
}

// Host code: runs without a device.
TEST(TokenBucketsTest, GroupsPositionsByTokenInAscendingOrder) {
  const std::vector<int32_t> inp = {5, 0, 5, 2, 0, 5, 9};
  tg::TokenBuckets b;
  b.build(inp.data(), static_cast<int>(inp.size()));
  EXPECT_EQ(b.token, (std::vector<int32_t>{0, 2, 5, 9}));
  EXPECT_EQ(b.start, (std::vector<int32_t>{0, 2, 3, 6, 7}));
  EXPECT_EQ(b.order, (std::vector<int32_t>{1, 4, 3, 0, 2, 5, 6}));
  const auto many = random_tokens(5000, 300, 9);
  b.build(many.data(), 5000);
  ASSERT_EQ(b.start.size(), b.token.size() + 1);
  for (size_t u = 0; u < b.token.size(); ++u) {
    for (int32_t k = b.start[u]; k < b.start[u + 1]; ++k) {
      ASSERT_EQ(many[b.order[k]], b.token[u]);
      if (k > b.start[u]) {
        ASSERT_LT(b.order[k - 1], b.order[k]);
      }
    }
  }
}

TYPED_TEST(CudaOpsTest, EncoderForwardAndBackward) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  const int B = 3, T = 37, C = 96, V = 20;  // few tokens: many repeats per bucket
  const size_t N = static_cast<size_t>(B) * T;
  const auto wte = random_vec(static_cast<size_t>(V) * C, 1),
             wpe = random_vec(static_cast<size_t>(T) * C, 2);
  const auto tokens = random_tokens(N, V, 3);
  DeviceArray<float> d_wte(wte.size()), d_wpe(wpe.size());
  DeviceArray<int32_t> d_tok(N);
  DeviceArray<X> d_out(N * C);
  upload(d_wte.get(), wte);
  upload(d_wpe.get(), wpe);
  put(d_tok.get(), tokens);
  tg::encoder_forward(d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), B, T, C, nullptr);
  std::vector<float> want(N * C);
  ops::encoder_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(close(download(d_out.get(), N * C), want, Tol<X>::rel, Tol<X>::abs));

  // Backward accumulates into non-zero gradients.
  const auto dout = round_to<X>(random_vec(N * C, 4));
  auto dwte = random_vec(wte.size(), 5), dwpe = random_vec(wpe.size(), 6);
  DeviceArray<X> d_dout(N * C);
  upload(d_dout.get(), dout);
  upload(d_wte.get(), dwte);
  upload(d_wpe.get(), dwpe);
  tg::TokenBuckets buckets;
  buckets.build(tokens.data(), static_cast<int>(N));
  ASSERT_EQ(buckets.order.size(), N);
  ASSERT_EQ(buckets.start.back(), static_cast<int32_t>(N));
  DeviceArray<int32_t> d_order(N), d_start(buckets.start.size()), d_btok(buckets.token.size());
  put(d_order.get(), buckets.order);
  put(d_start.get(), buckets.start);
  put(d_btok.get(), buckets.token);
  tg::encoder_backward(d_wte.get(), d_wpe.get(), d_dout.get(), d_order.get(), d_start.get(),
                       d_btok.get(), static_cast<int>(buckets.token.size()), B, T, C, nullptr);
  ops::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_TRUE(close(download(d_wte.get(), dwte.size()), dwte, 1e-5, 1e-5));
  EXPECT_TRUE(close(download(d_wpe.get(), dwpe.size()), dwpe, 1e-5, 1e-5));
}

TYPED_TEST(CudaOpsTest, LayerNormForwardAndBackward) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  const int N = 301, C = 200;  // 301 rows: several column-reduction chunks
  const size_t NC = static_cast<size_t>(N) * C;
  const auto inp = round_to<X>(random_vec(NC, 10, -2.0f, 3.0f));
  const auto w = random_vec(C, 11, 0.5f, 1.5f), b = random_vec(C, 12);
  DeviceArray<X> d_inp(NC), d_out(NC);
  DeviceArray<float> d_w(C), d_b(C), d_mean(N), d_rstd(N);
  upload(d_inp.get(), inp);
  upload(d_w.get(), w);
  upload(d_b.get(), b);
  tg::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(),
                        N, C, nullptr);
  std::vector<float> out(NC), mean(N), rstd(N);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                         C);
  EXPECT_TRUE(close(download(d_out.get(), NC), out, Tol<X>::rel, Tol<X>::abs));
  EXPECT_TRUE(close(download(d_mean.get(), N), mean, 1e-5, 1e-6));
  EXPECT_TRUE(close(download(d_rstd.get(), N), rstd, 1e-5, 1e-6));

  const auto dout = round_to<X>(random_vec(NC, 13));
  auto dinp = round_to<X>(random_vec(NC, 14));  // accumulated into
  auto dw = random_vec(C, 15), db = random_vec(C, 16);
  DeviceArray<X> d_dout(NC), d_dinp(NC);
  DeviceArray<float> d_dw(C), d_db(C), scratch(tg::layernorm_backward_scratch(N, C));
  upload(d_dout.get(), dout);
  upload(d_dinp.get(), dinp);
  upload(d_dw.get(), dw);
  upload(d_db.get(), db);
  // The kernel reads back the stats it saved (the CPU twin gets the CPU's).
  tg::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), scratch.get(), d_dout.get(),
                         d_inp.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C, nullptr);
  ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(close(download(d_dinp.get(), NC), dinp, Tol<X>::rel, Tol<X>::abs));
  EXPECT_TRUE(close(download(d_dw.get(), C), dw, 1e-4, 1e-5));
  EXPECT_TRUE(close(download(d_db.get(), C), db, 1e-4, 1e-5));
}

TYPED_TEST(CudaOpsTest, GeluForwardBackwardAndResidual) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  const size_t n = 100003;
  const auto x = round_to<X>(random_vec(n, 20, -5.0f, 5.0f));
  const auto y = round_to<X>(random_vec(n, 21));
  DeviceArray<X> d_x(n), d_y(n), d_out(n);
  upload(d_x.get(), x);
  upload(d_y.get(), y);
  tg::gelu_forward(d_out.get(), d_x.get(), n, nullptr);
  std::vector<float> want(n);
  ops::gelu_forward(want.data(), x.data(), n);
  EXPECT_TRUE(close(download(d_out.get(), n), want, Tol<X>::rel, Tol<X>::abs));
  // backward in place on dout (the model's aliasing)
  upload(d_out.get(), y);
  tg::gelu_backward(d_out.get(), d_x.get(), d_out.get(), n, nullptr);
  ops::gelu_backward(want.data(), x.data(), y.data(), n);
  EXPECT_TRUE(close(download(d_out.get(), n), want, Tol<X>::rel, Tol<X>::abs));
  DeviceArray<X> d_sum(n);
  tg::residual_forward(d_sum.get(), d_x.get(), d_y.get(), n, nullptr);
  ops::residual_forward(want.data(), x.data(), y.data(), n);
  EXPECT_TRUE(close(download(d_sum.get(), n), want, Tol<X>::rel, Tol<X>::abs));
}

TYPED_TEST(CudaOpsTest, BiasBackwardAndAddBias) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  const int N = 517, OC = 300;
  const size_t n = static_cast<size_t>(N) * OC;
  const auto dout = round_to<X>(random_vec(n, 30));
  auto dbias = random_vec(OC, 31);
  DeviceArray<X> d_dout(n);
  DeviceArray<float> d_dbias(OC), scratch(tg::bias_backward_scratch(N, OC));
  upload(d_dout.get(), dout);
  upload(d_dbias.get(), dbias);
  tg::bias_backward(d_dbias.get(), scratch.get(), d_dout.get(), N, OC, nullptr);
  for (int c = 0; c < OC; ++c) {  // the CPU twin: Gemm::backward's column sums
    double s = 0;
    for (int r = 0; r < N; ++r) s += dout[static_cast<size_t>(r) * OC + c];
    dbias[c] += static_cast<float>(s);
  }
  EXPECT_TRUE(close(download(d_dbias.get(), OC), dbias, 1e-4, 1e-5));
  const auto bias = random_vec(OC, 32);
  upload(d_dbias.get(), bias);
  tg::add_bias(d_dout.get(), d_dbias.get(), N, OC, nullptr);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = dout[i] + bias[i % OC];
  EXPECT_TRUE(close(download(d_dout.get(), n), want, Tol<X>::rel, Tol<X>::abs));
}

TYPED_TEST(CudaOpsTest, FusedCrossEntropyWithPaddedVocab) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  const int N = 67, V = 1000, Vp = 1024;
  const size_t n = static_cast<size_t>(N) * Vp;
  auto logits = round_to<X>(random_vec(n, 40, -4.0f, 4.0f));
  for (int r = 0; r < N; ++r) {  // padding columns hold garbage that must be ignored
    for (int i = V; i < Vp; ++i) logits[static_cast<size_t>(r) * Vp + i] = 1000.0f;
  }
  const auto targets = random_tokens(N, V, 41);
  const float dloss = 1.0f / N;
  DeviceArray<X> d_logits(n);
  DeviceArray<float> d_losses(N);
  DeviceArray<int32_t> d_targets(N);
  upload(d_logits.get(), logits);
  put(d_targets.get(), targets);
  // Forward only first: logits untouched.
  tg::crossentropy_forward(d_logits.get(), d_losses.get(), d_targets.get(), N, V, Vp, nullptr);
  std::vector<float> losses(N);
  ops::crossentropy_forward(logits.data(), losses.data(), targets.data(), N, V, Vp);
  EXPECT_TRUE(close(download(d_losses.get(), N), losses, 1e-5, 1e-6));
  EXPECT_TRUE(close(download(d_logits.get(), n), round_to<X>(logits), 0, 0));
  cudaMemset(d_losses.get(), 0xFF, N * sizeof(float));
  tg::crossentropy_forward_backward(d_logits.get(), d_losses.get(), d_targets.get(), N, V, Vp,
                                    dloss, nullptr);
  std::vector<float> want = logits;
  ops::crossentropy_forward_backward(want.data(), losses.data(), targets.data(), N, V, Vp, dloss);
  EXPECT_TRUE(close(download(d_losses.get(), N), losses, 1e-5, 1e-6));
  const auto got = download(d_logits.get(), n);
  EXPECT_TRUE(close(got, want, Tol<X>::rel, Tol<X>::abs));
  for (int r = 0; r < N; ++r) {
    for (int i = V; i < Vp; ++i) ASSERT_EQ(got[static_cast<size_t>(r) * Vp + i], 0.0f);
  }
}

TYPED_TEST(CudaOpsTest, AdamWMatchesCpuAndWritesTheLowPrecisionCopy) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  const size_t n = 70001;
  auto p = random_vec(n, 50), m = random_vec(n, 51, -0.1f, 0.1f),
       v = random_vec(n, 52, 0.0f, 0.01f);
  const auto g = random_vec(n, 53);
  DeviceArray<float> d_p(n), d_g(n), d_m(n), d_v(n);
  DeviceArray<X> d_lp(n);
  upload(d_p.get(), p);
  upload(d_g.get(), g);
  upload(d_m.get(), m);
  upload(d_v.get(), v);
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  const int t = 7;
  tg::adamw_update(d_p.get(), d_lp.get(), d_g.get(), d_m.get(), d_v.get(), n, lr, b1, b2, eps, wd,
                   gs, t, nullptr);
  ops::adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, gs, t);
  EXPECT_TRUE(close(download(d_p.get(), n), p, 1e-6, 1e-7));
  EXPECT_TRUE(close(download(d_m.get(), n), m, 1e-6, 1e-7));
  EXPECT_TRUE(close(download(d_v.get(), n), v, 1e-6, 1e-7));
  // The copy is the updated fp32 parameter rounded once to X.
  EXPECT_TRUE(close(download(d_lp.get(), n), round_to<X>(download(d_p.get(), n)), 0, 0));
}

TYPED_TEST(CudaOpsTest, CastsRoundToNearestEvenLikeTheCpu) {
  FT_REQUIRE_GPU();
  using X = TypeParam;
  std::vector<float> v = random_vec(4099, 60, -70000.0f, 70000.0f);
  v.push_back(1.0f + 1.0f / 256);  // a bf16 tie
  v.push_back(65520.0f);           // rounds to inf in fp16
  v.push_back(-0.0f);
  DeviceArray<float> d_in(v.size()), d_back(v.size());
  DeviceArray<X> d_x(v.size());
  upload(d_in.get(), v);
  tg::cast_from_fp32(d_x.get(), d_in.get(), v.size(), nullptr);
  tg::cast_to_fp32(d_back.get(), d_x.get(), v.size(), nullptr);
  const auto got = download(d_back.get(), v.size());
  const auto want = round_to<X>(v);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << "element " << i << " = " << v[i] << ": got " << got[i] << " want "
                    << want[i];
  }
}

TEST(CudaReduceTest, SumsInDoubleMatchTheCpu) {
  FT_REQUIRE_GPU();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{3'000'017}}) {
    const auto x = random_vec(n, 70 + static_cast<uint32_t>(n));
    DeviceArray<float> d_x(n);
    DeviceArray<double> out(1), partials(tg::kReducePartials);
    upload(d_x.get(), x);
    tg::sum_squares(out.get(), partials.get(), d_x.get(), n, nullptr);
    double got = 0;
    cudaMemcpy(&got, out.get(), sizeof(double), cudaMemcpyDeviceToHost);
    EXPECT_NEAR(got, ops::sum_squares(x.data(), n), 1e-12 * n) << "n=" << n;
    tg::sum_to_double(out.get(), partials.get(), d_x.get(), n, nullptr);
    cudaMemcpy(&got, out.get(), sizeof(double), cudaMemcpyDeviceToHost);
    double want = 0;
    for (float f : x) want += f;
    EXPECT_NEAR(got, want, 1e-12 * n) << "n=" << n;
  }
}

}  // namespace
}  // namespace ft::test::gpu
