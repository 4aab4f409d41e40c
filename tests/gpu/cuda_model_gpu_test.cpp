// cuda_model_gpu_test.cpp: the CUDA GPT against the CPU model: one step's loss and gradients,
// accumulation, block recompute, AdamW, and ten Trainer steps.
//
// Tolerances (the CUDA model keeps activations in X; the CPU model keeps them in fp32 and
// rounds only GEMM operands, so bf16/fp16 differ by more than one rounding):
//   loss, absolute:              fp32 2e-4, fp16 1e-2, bf16 4e-2 (losses are ~5.5)
//   gradients, relative L2 per tensor: fp32 2e-3, fp16 2e-2, bf16 8e-2
//   block recompute vs none (same engine): relative L2 1e-6 (expected bitwise; slack for
//   cuBLASLt reduction order)
#include <filesystem>

#include "engine_test_util.h"
#include "ft/core/atomic_file.h"
#include "ft/core/rng.h"
#include "ft/trainer/model.h"
#include "ft/trainer/model_backend.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/trainer.h"
#include "test_corpus.h"

namespace ft::test::gpu {
namespace {

using namespace ft::trainer;
namespace fs = std::filesystem;

struct PrecisionTol {
  Precision p;
  double loss, grad;
};
constexpr PrecisionTol kTols[] = {
    {Precision::kFp32, 2e-4, 2e-3}, {Precision::kFp16, 1e-2, 2e-2}, {Precision::kBf16, 4e-2, 8e-2}};

GptConfig tiny_config() {
  GptConfig g;
  g.max_seq_len = 64;
  g.vocab_size = 200;
  g.padded_vocab = 256;
  g.num_layers = 2;
  g.num_heads = 2;
  g.channels = 128;  // head size 64: bf16/fp16 attention runs on tensor cores
  return g;
}

std::vector<int32_t> tokens(size_t n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % V);
  return t;
}

void expect_grads_close(const GptModel& cpu, const std::vector<float>& gpu, double tol,
                        const std::string& what) {
  const ParamLayout& L = cpu.layout();
  for (int i = 0; i < kNumParamTensors; ++i) {
    const double e = rel_l2(gpu.data() + L.offsets[i], cpu.grads() + L.offsets[i], L.sizes[i]);
    EXPECT_LT(e, tol) << what << ": gradient of " << ParamLayout::name(i) << " rel L2 error " << e;
    for (size_t j = 0; j < L.sizes[i]; ++j) {
      ASSERT_TRUE(std::isfinite(gpu[L.offsets[i] + j])) << ParamLayout::name(i) << "[" << j << "]";
    }
  }
}

TEST(CudaModelTest, OneStepLossAndGradientsMatchTheCpuModel) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 64;
  const auto in = tokens(B * T, g.vocab_size, 1), tg = tokens(B * T, g.vocab_size, 2);
  for (const PrecisionTol& pt : kTols) {
    SCOPED_TRACE(precision_name(pt.p));
    ModelOptions o;
    o.precision = pt.p;
    CachingAllocator ha;
    GptModel cpu(g, ha, o);
    cpu.init_weights(42);
    auto gpu = make_cuda_backend(g, o, {});
    gpu->upload_state(cpu.params(), nullptr, nullptr);
    // fp16 keeps activation gradients in fp16 on the device: scale the loss, as training does.
    const float dloss = (pt.p == Precision::kFp16 ? 256.0f : 1.0f) / (B * T);
    const double lc = cpu.forward_backward(in.data(), tg.data(), B, T, dloss, true);
    const double lg = gpu->forward_backward(in.data(), tg.data(), B, T, dloss, true);
    std::printf("%s loss cpu %.6f cuda %.6f\n", precision_name(pt.p), lc, lg);
    EXPECT_NEAR(lg, lc, pt.loss);
    std::vector<float> grads(cpu.num_params());
    gpu->download_grads(grads.data());
    expect_grads_close(cpu, grads, pt.grad, "one micro-batch");
    // The gradient norm and the forward-only loss agree too.
    const double sq_cpu = ops::sum_squares(cpu.grads(), cpu.num_params());
    EXPECT_NEAR(gpu->grad_sum_squares(), sq_cpu, 2 * pt.grad * sq_cpu);
    EXPECT_NEAR(gpu->forward_loss(in.data(), tg.data(), B, T), lc, pt.loss);
    EXPECT_GT(gpu->memory_stats().peak_allocated, 0u);
  }
}

// Per-tensor relative L2 between two gradient vectors, the tensors above tol named (for the
// failure messages of the same-engine comparisons below).
std::string grad_diffs(const ParamLayout& L, const float* a, const float* b, double tol) {
  std::string out;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const double e = rel_l2(a + L.offsets[i], b + L.offsets[i], L.sizes[i]);
    if (!(e < tol)) out += std::string(" ") + ParamLayout::name(i) + "=" + std::to_string(e);
  }
  return out.empty() ? " none" : out;
}

// Two engines of one precision alive together, each against the CPU model and each run twice:
// every run matches the CPU within the precision's tolerance, and an engine repeats its own
// step bitwise (same inputs, same kernels, no atomics in the reductions).
TEST(CudaModelTest, TwoEnginesEachMatchTheCpuModelAndRepeatTheirStep) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 32;
  const auto in = tokens(B * T, g.vocab_size, 60), tg = tokens(B * T, g.vocab_size, 61);
  for (const PrecisionTol& pt : kTols) {
    SCOPED_TRACE(precision_name(pt.p));
    ModelOptions o;
    o.precision = pt.p;
    CachingAllocator ha;
    GptModel cpu(g, ha, o);
    cpu.init_weights(13);
    const float dloss = (pt.p == Precision::kFp16 ? 256.0f : 1.0f) / (B * T);
    const double lc = cpu.forward_backward(in.data(), tg.data(), B, T, dloss, true);
    auto a = make_cuda_backend(g, o, {});
    auto b = make_cuda_backend(g, o, {});
    a->upload_state(cpu.params(), nullptr, nullptr);
    b->upload_state(cpu.params(), nullptr, nullptr);
    const size_t n = cpu.num_params();
    std::vector<float> first(n), again(n);
    for (auto* e : {a.get(), b.get()}) {
      const char* which = e == a.get() ? "engine a" : "engine b";
      const double l1 = e->forward_backward(in.data(), tg.data(), B, T, dloss, true);
      e->download_grads(first.data());
      const double l2 = e->forward_backward(in.data(), tg.data(), B, T, dloss, true);
      e->download_grads(again.data());
      EXPECT_NEAR(l1, lc, pt.loss) << which;
      expect_grads_close(cpu, first, pt.grad, which);
      EXPECT_EQ(l1, l2) << which << " repeated";
      EXPECT_LT(rel_l2(again.data(), first.data(), n), 1e-6)
          << which << " repeated; tensors off:"
          << grad_diffs(cpu.layout(), again.data(), first.data(), 1e-6);
    }
  }
}

TEST(CudaModelTest, DeviceResidentTokensGiveTheSameStepAsHostTokens) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 32;
  const auto in = tokens(B * T, g.vocab_size, 30), tg = tokens(B * T, g.vocab_size, 31);
  ModelOptions o;
  o.precision = Precision::kBf16;
  CachingAllocator ha;
  GptModel init(g, ha, o);
  init.init_weights(11);
  auto a = make_cuda_backend(g, o, {});
  auto b = make_cuda_backend(g, o, {});
  a->upload_state(init.params(), nullptr, nullptr);
  b->upload_state(init.params(), nullptr, nullptr);
  ASSERT_NE(b->compute_stream(), nullptr);
  DeviceArray<int32_t> d_in(in.size()), d_tg(tg.size());
  FT_TEST_CUDA(cudaMemcpy(d_in.get(), in.data(), in.size() * 4, cudaMemcpyHostToDevice));
  FT_TEST_CUDA(cudaMemcpy(d_tg.get(), tg.data(), tg.size() * 4, cudaMemcpyHostToDevice));
  // A pageable cudaMemcpy may return before its DMA lands, and b's stream does not wait for the
  // legacy stream.
  FT_TEST_CUDA(cudaDeviceSynchronize());
  const double la = a->forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
  b->use_device_tokens(d_in.get(), d_tg.get());
  const double lb = b->forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
  EXPECT_EQ(la, lb);
  std::vector<float> ga(init.num_params()), gb(init.num_params());
  a->download_grads(ga.data());
  b->download_grads(gb.data());
  EXPECT_LT(rel_l2(gb.data(), ga.data(), ga.size()), 1e-6)
      << "tensors off:" << grad_diffs(init.layout(), gb.data(), ga.data(), 1e-6);
}

TEST(CudaModelTest, EnqueuedMicroBatchesGiveTheSameLossesAndGradients) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 32;
  ModelOptions o;
  o.precision = Precision::kBf16;
  CachingAllocator ha;
  GptModel init(g, ha, o);
  init.init_weights(12);
  auto a = make_cuda_backend(g, o, {});
  auto b = make_cuda_backend(g, o, {});
  a->upload_state(init.params(), nullptr, nullptr);
  b->upload_state(init.params(), nullptr, nullptr);
  std::vector<double> la;
  for (int k = 0; k < 3; ++k) {
    const auto in = tokens(B * T, g.vocab_size, 40 + k), tg = tokens(B * T, g.vocab_size, 50 + k);
    la.push_back(a->forward_backward(in.data(), tg.data(), B, T, 1.0f / (3 * B * T), k == 0));
    // The host buffers are gone before the device runs: the engine copied what it needs.
    b->forward_backward_async(in.data(), tg.data(), B, T, 1.0f / (3 * B * T), k == 0);
  }
  const std::vector<double> lb = b->wait_losses();
  ASSERT_EQ(lb.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(la[k], lb[k]) << "micro-batch " << k;
  EXPECT_TRUE(b->wait_losses().empty());
  std::vector<float> ga(init.num_params()), gb(init.num_params());
  a->download_grads(ga.data());
  b->download_grads(gb.data());
  EXPECT_LT(rel_l2(gb.data(), ga.data(), ga.size()), 1e-6)
      << "tensors off:" << grad_diffs(init.layout(), gb.data(), ga.data(), 1e-6);
}

TEST(CudaModelTest, GradientAccumulationMatchesTheCpuModel) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 48;
  ModelOptions o;  // fp32
  CachingAllocator ha;
  GptModel cpu(g, ha, o);
  cpu.init_weights(7);
  auto gpu = make_cuda_backend(g, o, {});
  gpu->upload_state(cpu.params(), nullptr, nullptr);
  const float dloss = 1.0f / (2 * B * T);
  for (int k = 0; k < 2; ++k) {
    const auto in = tokens(B * T, g.vocab_size, 10 + k), tg = tokens(B * T, g.vocab_size, 20 + k);
    cpu.forward_backward(in.data(), tg.data(), B, T, dloss, k == 0);
    gpu->forward_backward(in.data(), tg.data(), B, T, dloss, k == 0);
  }
  std::vector<float> grads(cpu.num_params());
  gpu->download_grads(grads.data());
  expect_grads_close(cpu, grads, 2e-3, "two accumulated micro-batches");
}

TEST(CudaModelTest, BlockRecomputeGivesTheSameGradientsAsNone) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 64;
  const auto in = tokens(B * T, g.vocab_size, 3), tg = tokens(B * T, g.vocab_size, 4);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(precision_name(p));
    ModelOptions none, block;
    none.precision = block.precision = p;
    block.checkpointing = Checkpointing::kBlock;
    CachingAllocator ha;
    GptModel init(g, ha, none);
    init.init_weights(5);
    auto a = make_cuda_backend(g, none, {});
    auto b = make_cuda_backend(g, block, {});
    a->upload_state(init.params(), nullptr, nullptr);
    b->upload_state(init.params(), nullptr, nullptr);
    const double la = a->forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
    const double lb = b->forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
    EXPECT_EQ(la, lb);
    std::vector<float> ga(init.num_params()), gb(init.num_params());
    a->download_grads(ga.data());
    b->download_grads(gb.data());
    EXPECT_LT(rel_l2(gb.data(), ga.data(), ga.size()), 1e-6)
        << "tensors off:" << grad_diffs(init.layout(), gb.data(), ga.data(), 1e-6);
    // Recompute saves activation memory.
    EXPECT_LT(b->activation_memory(B, T).saved_bytes, a->activation_memory(B, T).saved_bytes);
    EXPECT_LT(b->memory_stats().peak_allocated, a->memory_stats().peak_allocated);
  }
}

TEST(CudaModelTest, AdamWStepMatchesTheCpuOptimizer) {
  FT_REQUIRE_GPU();
  const GptConfig g = tiny_config();
  const int B = 2, T = 32;
  ModelOptions o;
  CachingAllocator ha;
  GptModel cpu(g, ha, o);
  cpu.init_weights(9);
  const size_t n = cpu.num_params();
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  auto cpu_backend = make_cpu_backend(cpu, m.data(), v.data(), ha);
  auto gpu = make_cuda_backend(g, o, {});
  gpu->upload_state(cpu.params(), m.data(), v.data());
  const std::vector<float> start(cpu.params(), cpu.params() + n);
  const auto in = tokens(B * T, g.vocab_size, 5), tg = tokens(B * T, g.vocab_size, 6);
  AdamWSettings s;
  for (int t = 1; t <= 2; ++t) {
    cpu_backend->forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
    gpu->forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T), true);
    cpu_backend->adamw_step(s, 1e-3f, 1.0f, t);
    gpu->adamw_step(s, 1e-3f, 1.0f, t);
  }
  std::vector<float> p(n), gm(n), gv(n);
  gpu->download_state(p.data(), gm.data(), gv.data());
  // The moments are linear / quadratic in the gradients: fp32 tolerance. The updates go
  // through m/sqrt(v), which is +-1 on the first step whatever |g|: an element whose tiny
  // gradient differs in sign moves 2 lr apart, so the updates compare in relative L2.
  EXPECT_LT(rel_l2(gm.data(), m.data(), n), 2e-3);
  EXPECT_LT(rel_l2(gv.data(), v.data(), n), 4e-3);
  std::vector<float> du_gpu(n), du_cpu(n);
  for (size_t i = 0; i < n; ++i) {
    du_gpu[i] = p[i] - start[i];
    du_cpu[i] = cpu.params()[i] - start[i];
  }
  EXPECT_LT(rel_l2(du_gpu.data(), du_cpu.data(), n), 0.1);
}

// The Trainer end to end: ten steps of --device cuda against --device cpu.
fs::path write_corpus(const fs::path& dir) {
  return ft::test::write_word_corpus(dir, 60);
}

TEST(CudaModelTest, TenTrainerStepsMatchTheCpuEngine) {
  FT_REQUIRE_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("ft_cuda_model_test_" + std::to_string(::getpid()));
  const fs::path corpus = write_corpus(dir);
  for (const PrecisionTol& pt : kTols) {
    SCOPED_TRACE(precision_name(pt.p));
    TrainConfig c;
    c.model.vocab_size = 256;
    c.model.padded_vocab = 256;
    c.model.channels = 128;
    c.model.num_heads = 2;
    c.model.num_layers = 2;
    c.model.max_seq_len = 64;
    c.seq_len = 64;
    c.micro_batch = 4;
    c.grad_accum = 2;
    c.steps = 10;
    c.warmup = 2;
    c.lr = 3e-3f;
    c.threads = 2;
    c.data = corpus.string();
    c.val_batches = 2;
    c.options.precision = pt.p;
    c.loss_scale = 1024.0f;  // fp16: no overflow skips, so both engines take the same steps
    std::vector<double> cpu_loss, gpu_loss;
    {
      Trainer t(c);
      while (!t.done()) cpu_loss.push_back(t.step().loss);
    }
    c.device = DeviceKind::kCuda;
    double val = -1;
    {
      Trainer t(c);
      EXPECT_EQ(t.backend().device(), DeviceKind::kCuda);
      while (!t.done()) {
        const StepMetrics m = t.step();
        gpu_loss.push_back(m.loss);
        EXPECT_GT(m.mem_reserved, 0u);
        EXPECT_GT(m.mfu, 0.0);
      }
      val = t.evaluate();
      // Checkpoints carry the device state: save, and the host mirror matches the device.
      t.save((dir / ("ckpt_" + std::string(precision_name(pt.p)))).string());
    }
    EXPECT_TRUE(std::isfinite(val));
    ASSERT_EQ(cpu_loss.size(), gpu_loss.size());
    for (size_t i = 0; i < cpu_loss.size(); ++i) {
      std::printf("%s step %zu: cpu %.5f cuda %.5f\n", precision_name(pt.p), i, cpu_loss[i],
                  gpu_loss[i]);
      // Differences grow a little as the runs diverge; allow 2x the one-step tolerance.
      EXPECT_NEAR(gpu_loss[i], cpu_loss[i], 2 * pt.loss) << "step " << i;
    }
    EXPECT_LT(gpu_loss.back(), gpu_loss.front());  // it learns
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::test::gpu
