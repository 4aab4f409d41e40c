// attention_gpu_test.cpp: the CUDA flash attention (tensor-core and warp-per-row kernels) against
// the CPU's tiled attention.
//
// The CPU twin (ops::attention_flash_*) computes in fp32 on the X-rounded qkv. Tolerances:
// fp32 rel 1e-4 / abs 1e-5 of the tensor's largest magnitude; fp16 2e-3 / 3e-3 and bf16
// 2e-2 / 2e-2 (the tensor-core kernels also round P and dS to X before their GEMMs, as
// FlashAttention-2 does). lse is fp32 on both sides: 1e-4 absolute.
#include "engine_test_util.h"
#include "ft/core/error.h"
#include "ft/trainer/ops.h"

namespace ft::test::gpu {
namespace {

namespace tg = ft::trainer::gpu;
namespace ops = ft::trainer::ops;

template <typename X>
struct AttnTol {
  static constexpr double rel = std::is_same_v<X, float>  ? 1e-4
                                : std::is_same_v<X, bf16> ? 2e-2
                                                          : 2e-3;
  static constexpr double abs = std::is_same_v<X, float>  ? 1e-5
                                : std::is_same_v<X, bf16> ? 2e-2
                                                          : 3e-3;
};

struct Shape {
  int B, T, NH, HS;
};

template <typename X>
void check_attention(const Shape& s, uint32_t seed) {
  const int C = s.NH * s.HS;
  const size_t n_qkv = static_cast<size_t>(s.B) * s.T * 3 * C,
               n_out = static_cast<size_t>(s.B) * s.T * C;
  const size_t n_lse = static_cast<size_t>(s.B) * s.NH * s.T;
  SCOPED_TRACE(::testing::Message()
               << type_name<X>() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH << " HS=" << s.HS
               << " tensor cores " << tg::attention_uses_tensor_cores<X>(s.HS));
  const auto qkv = round_to<X>(random_vec(n_qkv, seed, -2.0f, 2.0f));
  const auto dout = round_to<X>(random_vec(n_out, seed + 1));
  DeviceArray<X> d_qkv(n_qkv), d_out(n_out), d_dout(n_out), d_dqkv(n_qkv);
  DeviceArray<float> d_lse(n_lse), d_scratch(n_lse);
  upload(d_qkv.get(), qkv);
  upload(d_dout.get(), dout);
  tg::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), s.B, s.T, C, s.NH, nullptr);
  std::vector<float> out(n_out), lse(n_lse), dqkv(n_qkv);
  ops::attention_flash_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH);
  const auto got_out = download(d_out.get(), n_out);
  EXPECT_TRUE(close(got_out, out, AttnTol<X>::rel, AttnTol<X>::abs));
  EXPECT_TRUE(close(download(d_lse.get(), n_lse), lse, 0, 1e-4 / 8));
  // Backward from the device's own forward output; the CPU from the same (rounded) output.
  tg::attention_backward(d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                         d_lse.get(), s.B, s.T, C, s.NH, nullptr);
  ops::attention_flash_backward(dqkv.data(), dout.data(), qkv.data(), got_out.data(), lse.data(),
                                s.B, s.T, C, s.NH);
  const auto got = download(d_dqkv.get(), n_qkv);
  // Compare q, k and v gradients separately (their scales differ).
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g, w;
    for (size_t bt = 0; bt < static_cast<size_t>(s.B) * s.T; ++bt) {
      for (int c = 0; c < C; ++c) {
        g.push_back(got[bt * 3 * C + part * C + c]);
        w.push_back(dqkv[bt * 3 * C + part * C + c]);
      }
    }
    EXPECT_TRUE(close(g, w, AttnTol<X>::rel, AttnTol<X>::abs)) << "d"
                                                               << "qkv"[part];
  }
}

template <typename X>
class CudaAttentionTest : public ::testing::Test {};
using ActTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(CudaAttentionTest, ActTypes);

TYPED_TEST(CudaAttentionTest, HeadSize64PartialTiles) {
  FT_REQUIRE_GPU();
  // T = 100: one full and one partial 64-row tile; bf16/fp16 take the tensor-core kernels.
  check_attention<TypeParam>({2, 100, 2, 64}, 100);
}

TYPED_TEST(CudaAttentionTest, HeadSize64ManyTiles) {
  FT_REQUIRE_GPU();
  check_attention<TypeParam>({1, 256, 3, 64}, 200);
}

TYPED_TEST(CudaAttentionTest, OtherHeadSizesUseTheRowKernel) {
  FT_REQUIRE_GPU();
  check_attention<TypeParam>({2, 37, 3, 16}, 300);
  check_attention<TypeParam>({1, 70, 2, 48}, 400);
}

TEST(CudaAttentionShapeTest, RejectsHeadsThatDoNotDivideChannels) {
  FT_REQUIRE_GPU();
  DeviceArray<float> buf(64 * 3 * 30);
  EXPECT_THROW(tg::attention_forward(buf.get(), buf.get(), buf.get(), 1, 8, 30, 4, nullptr),
               ft::Error);
}

}  // namespace
}  // namespace ft::test::gpu
