// cublaslt_gemm_gpu_test.cpp: the cuBLASLt linear-layer GEMMs (fp32, TF32, bf16, fp16; bias
// epilogue; accumulate) against the CPU Gemm.
//
// The CPU twin is ft's CPU Gemm in fp32 on the X-rounded operands, so products are exact on
// both sides and only the fp32 summation order differs. Tolerances: outputs stored in X get
// Tol<X> (one rounding); fp32 weight gradients rel 1e-4; TF32 rel 5e-3 (10-bit mantissas).
#include "../../trainer/cuda/cublaslt_gemm.h"
#include "engine_test_util.h"
#include "ft/core/allocator.h"
#include "ft/trainer/matmul.h"

namespace ft::test::gpu {
namespace {

namespace tg = ft::trainer::gpu;
using ft::trainer::Gemm;
using ft::trainer::Precision;

template <typename X>
constexpr tg::DType dtype() {
  if constexpr (std::is_same_v<X, float>) return tg::DType::kF32;
  if constexpr (std::is_same_v<X, bf16>) return tg::DType::kBF16;
  return tg::DType::kF16;
}

struct GemmShape {
  int N, IC, OC;
};

template <typename X>
void check_gemm(const GemmShape& s, tg::GemmMath math, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << type_name<X>() << " N=" << s.N << " IC=" << s.IC << " OC="
                                    << s.OC << (math == tg::GemmMath::kTf32 ? " tf32" : ""));
  const bool tf32 = math == tg::GemmMath::kTf32;
  const double rel_x = tf32 ? 5e-3 : Tol<X>::rel, abs_x = tf32 ? 5e-3 : Tol<X>::abs;
  const double rel_w = tf32 ? 5e-3 : 1e-4, abs_w = tf32 ? 5e-3 : 1e-5;
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0));
  tg::LtGemm gemm(alloc, nullptr);
  gemm.set_math(math);
  CachingAllocator host_alloc;
  Gemm cpu(host_alloc);
  const size_t n_in = static_cast<size_t>(s.N) * s.IC, n_w = static_cast<size_t>(s.OC) * s.IC;
  const size_t n_out = static_cast<size_t>(s.N) * s.OC;
  const auto inp = round_to<X>(random_vec(n_in, seed));
  const auto w = round_to<X>(random_vec(n_w, seed + 1));
  const auto bias = random_vec(s.OC, seed + 2);
  const auto dout = round_to<X>(random_vec(n_out, seed + 3));
  DeviceArray<X> d_in(n_in), d_w(n_w), d_out(n_out), d_dout(n_out), d_dinp(n_in);
  DeviceArray<float> d_bias(s.OC), d_dw(n_w);
  upload(d_in.get(), inp);
  upload(d_w.get(), w);
  upload(d_bias.get(), bias);
  upload(d_dout.get(), dout);
  constexpr tg::DType dt = dtype<X>();

  // forward, with and without bias
  std::vector<float> want(n_out);
  for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
    cudaMemset(d_out.get(), 0xFF, n_out * sizeof(X));
    gemm.forward(d_out.get(), dt, d_in.get(), d_w.get(), dt, b ? d_bias.get() : nullptr, s.N, s.IC,
                 s.OC);
    cpu.forward(want.data(), inp.data(), w.data(), nullptr, b, s.N, s.IC, s.OC, Precision::kFp32);
    EXPECT_TRUE(close(download(d_out.get(), n_out), want, rel_x, abs_x))
        << (b ? "bias" : "no bias");
  }
  EXPECT_EQ(gemm.bias_epilogue_calls() + gemm.bias_kernel_calls(), 1u);
  uint64_t extra_calls = 0;
  if constexpr (!std::is_same_v<X, float>) {
    // The bias also in X (what the engine passes from its 16-bit parameter copy): the epilogue
    // may take it where it refuses the fp32 one; the sum is the rounded bias's either way.
    const auto bias_x = round_to<X>(bias);
    DeviceArray<X> d_bias_x(s.OC);
    upload(d_bias_x.get(), bias_x);
    const uint64_t epi = gemm.bias_epilogue_calls();
    cudaMemset(d_out.get(), 0xFF, n_out * sizeof(X));
    gemm.forward(d_out.get(), dt, d_in.get(), d_w.get(), dt, d_bias.get(), s.N, s.IC, s.OC,
                 d_bias_x.get());
    ++extra_calls;
    if (gemm.bias_epilogue_calls() > epi) {
      cpu.forward(want.data(), inp.data(), w.data(), nullptr, bias_x.data(), s.N, s.IC, s.OC,
                  Precision::kFp32);
    }
    EXPECT_TRUE(close(download(d_out.get(), n_out), want, rel_x, abs_x)) << "bias in X";
    std::printf("%s bias epilogue with the bias in X: %s\n", type_name<X>(),
                gemm.bias_epilogue_calls() > epi ? "yes" : "no (add kernel)");
  }

  // backward: dinp written, then accumulated; dweight written, then accumulated
  std::vector<float> dinp(n_in), dw(n_w);
  gemm.backward_input(d_dinp.get(), dt, d_dout.get(), d_w.get(), dt, s.N, s.IC, s.OC);
  gemm.backward_weight(d_dw.get(), d_dout.get(), d_in.get(), dt, s.N, s.IC, s.OC, false);
  cpu.backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), nullptr, s.N,
               s.IC, s.OC, false, Precision::kFp32);
  const auto got_dinp = download(d_dinp.get(), n_in);
  EXPECT_TRUE(close(got_dinp, dinp, rel_x, abs_x)) << "dinp";
  EXPECT_TRUE(close(download(d_dw.get(), n_w), dw, rel_w, abs_w)) << "dweight";
  gemm.backward_input(d_dinp.get(), dt, d_dout.get(), d_w.get(), dt, s.N, s.IC, s.OC, true);
  gemm.backward_weight(d_dw.get(), d_dout.get(), d_in.get(), dt, s.N, s.IC, s.OC, true);
  std::vector<float> twice_dinp(n_in), twice_dw(n_w);
  for (size_t i = 0; i < n_in; ++i) twice_dinp[i] = got_dinp[i] + dinp[i];
  for (size_t i = 0; i < n_w; ++i) twice_dw[i] = 2 * dw[i];
  EXPECT_TRUE(close(download(d_dinp.get(), n_in), twice_dinp, rel_x, abs_x)) << "dinp +=";
  EXPECT_TRUE(close(download(d_dw.get(), n_w), twice_dw, rel_w, abs_w)) << "dweight +=";

  // Plans are cached per shape: repeating a call creates none.
  const size_t plans = gemm.cached_plans();
  gemm.backward_weight(d_dw.get(), d_dout.get(), d_in.get(), dt, s.N, s.IC, s.OC, false);
  EXPECT_EQ(gemm.cached_plans(), plans);
  EXPECT_EQ(gemm.stats().calls, 7u + extra_calls);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

template <typename X>
class CublasLtGemmTest : public ::testing::Test {};
using ActTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(CublasLtGemmTest, ActTypes);

TYPED_TEST(CublasLtGemmTest, LinearLayerShapes) {
  FT_REQUIRE_GPU();
  check_gemm<TypeParam>({96, 64, 192}, tg::GemmMath::kFp32, 1);   // qkv-like
  check_gemm<TypeParam>({40, 256, 64}, tg::GemmMath::kFp32, 11);  // fcproj-like
  check_gemm<TypeParam>({64, 64, 320}, tg::GemmMath::kFp32, 21);  // LM-head-like
}

TEST(CublasLtGemmTf32Test, Tf32WithinItsTolerance) {
  FT_REQUIRE_GPU();
  check_gemm<float>({128, 128, 128}, tg::GemmMath::kTf32, 31);
}

TEST(CublasLtGemmInfoTest, NamesTheLibrary) {
  FT_REQUIRE_GPU();
  EXPECT_NE(tg::LtGemm::library_info().find("cuBLASLt"), std::string::npos);
}

}  // namespace
}  // namespace ft::test::gpu
