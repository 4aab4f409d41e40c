// model_backend_test.cpp: the backend seam on the CPU (the CPU engine behind ModelBackend) and
// --device cuda's error without a device.
#include "ft/trainer/model_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ft/core/error.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/train_config.h"
#include "ft/trainer/trainer.h"
#include "reference/run_cli.h"

namespace ft::trainer {
namespace {

GptConfig tiny() {
  GptConfig g;
  g.max_seq_len = 16;
  g.vocab_size = 64;
  g.padded_vocab = 64;
  g.num_layers = 1;
  g.num_heads = 2;
  g.channels = 32;
  return g;
}

std::vector<int32_t> tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 64);
  return t;
}

TEST(ModelBackendTest, CpuBackendRunsTheCpuModelAndItsOptimizer) {
  const GptConfig g = tiny();
  CachingAllocator alloc;
  GptModel a(g, alloc, {}), b(g, alloc, {});
  a.init_weights(3);
  b.init_weights(3);
  const size_t n = a.num_params();
  std::vector<float> m(n, 0.0f), v(n, 0.0f), mb(n, 0.0f), vb(n, 0.0f);
  auto backend = make_cpu_backend(a, m.data(), v.data(), alloc);
  EXPECT_EQ(backend->device(), DeviceKind::kCpu);
  EXPECT_EQ(backend->num_params(), n);
  const auto in = tokens(2 * 16, 1), tg = tokens(2 * 16, 2);
  const double la = backend->forward_backward(in.data(), tg.data(), 2, 16, 1.0f / 32, true);
  const double lb = b.forward_backward(in.data(), tg.data(), 2, 16, 1.0f / 32, true);
  EXPECT_EQ(la, lb);  // the same model code: bitwise
  EXPECT_EQ(backend->grad_sum_squares(), ops::sum_squares(b.grads(), n));
  AdamWSettings s;
  backend->adamw_step(s, 1e-3f, 0.5f, 1);
  // The reference: the same update, tensor by tensor, with weight decay on matrices only.
  const ParamLayout& L = b.layout();
  for (int i = 0; i < kNumParamTensors; ++i) {
    ops::adamw_update(b.params() + L.offsets[i], b.grads() + L.offsets[i], mb.data() + L.offsets[i],
                      vb.data() + L.offsets[i], L.sizes[i], 1e-3f, s.beta1, s.beta2, s.eps,
                      ParamLayout::decays(i) ? s.weight_decay : 0.0f, 0.5f, 1);
  }
  EXPECT_EQ(std::memcmp(a.params(), b.params(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(m.data(), mb.data(), n * sizeof(float)), 0);
  // download/upload copy between the mirror and the engine (here the same memory).
  std::vector<float> p(n);
  backend->download_state(p.data(), nullptr, nullptr);
  EXPECT_EQ(std::memcmp(p.data(), a.params(), n * sizeof(float)), 0);
  p[0] += 1.0f;
  backend->upload_state(p.data(), nullptr, nullptr);
  EXPECT_EQ(a.params()[0], p[0]);
  EXPECT_GT(backend->memory_stats().peak_allocated, 0u);
}

TEST(ModelBackendTest, DeviceFlagParses) {
  const char* argv[] = {"ft-train", "--device", "cuda", "--tf32", "true"};
  auto c = parse_train_args(5, argv);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->device, DeviceKind::kCuda);
  EXPECT_TRUE(c->tf32);
  EXPECT_EQ(c->to_json().at("device"), "cuda");
  const char* bad[] = {"ft-train", "--device", "tpu"};
  EXPECT_THROW(parse_train_args(3, bad), ConfigError);
  const char* dflt[] = {"ft-train"};
  EXPECT_EQ(parse_train_args(1, dflt)->device, DeviceKind::kCpu);
}

TEST(ModelBackendTest, CudaWithoutADeviceIsAConfigErrorNamingTheReason) {
  std::string why;
  if (!cuda_devices(&why).empty()) GTEST_SKIP() << "a CUDA device is present";
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  try {
    Trainer t(c);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--device cuda: no CUDA device: " + why), std::string::npos) << m;
  }
  EXPECT_THROW(make_cuda_backend(tiny(), {}, {}), ConfigError);
  // The command line says the same and fails.
  const auto r = ft::testing::run_cli("ft-train", "--device cuda --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("no CUDA device"), std::string::npos) << r.out;
  if (built_with_cuda()) {
    EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
  } else {
    EXPECT_NE(why.find("without FT_WITH_CUDA"), std::string::npos) << why;
  }
}

// Distributed or ZeRO training on CUDA is refused with a ConfigError that says why, GPU or
// not (the check precedes the device query); the CPU engine takes the same configuration.
TEST(ModelBackendTest, CudaRefusesZeroAndMultiProcessRunsWithAConfigError) {
  TrainConfig c;
  c.device = DeviceKind::kCuda;
  c.parallel.zero = 1;
  try {
    Trainer t(c);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--device cuda runs one process without ZeRO"), std::string::npos) << m;
    EXPECT_NE(m.find("--zero 1"), std::string::npos) << m;
  }
  const auto r = ft::testing::run_cli("ft-train", "--device cuda --zero 2 --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("runs one process without ZeRO"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ft::trainer
