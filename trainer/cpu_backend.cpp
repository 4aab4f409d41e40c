// cpu_backend.cpp: the CPU engine behind the ModelBackend seam (GptModel + ops), and the
// CUDA factory's stand-in when ft is built without CUDA.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ft/core/error.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/model_backend.h"
#include "ft/trainer/ops.h"

namespace ft::trainer {
namespace {

class CpuBackend final : public ModelBackend {
 public:
  CpuBackend(GptModel& model, float* adam_m, float* adam_v, CachingAllocator& alloc)
      : model_(model), adam_m_(adam_m), adam_v_(adam_v), alloc_(alloc) {}

  DeviceKind device() const override { return DeviceKind::kCpu; }
  std::string describe() const override { return "cpu (" + Gemm::library_info() + ")"; }
  size_t num_params() const override { return model_.num_params(); }

  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss_per_token, bool first_micro) override {
    return model_.forward_backward(inputs, targets, B, T, dloss_per_token, first_micro);
  }
  double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) override {
    return model_.forward_loss(inputs, targets, B, T);
  }
  double grad_sum_squares() override {
    return ops::sum_squares(model_.grads(), model_.num_params());
  }

  void adamw_step(const AdamWSettings& s, float lr, float grad_scale, int t) override {
    const ParamLayout& L = model_.layout();
    // Chunks of 1 MiB of parameters: the low-precision copy of each chunk is made
    // right after its update, while it is still in cache.
    constexpr size_t kChunk = 256 * 1024;
    for (int i = 0; i < kNumParamTensors; ++i) {
      const float wd = ParamLayout::decays(i) ? s.weight_decay : 0.0f;
      for (size_t off = L.offsets[i], end = off + L.sizes[i]; off < end; off += kChunk) {
        const size_t n = std::min(kChunk, end - off);
        ops::adamw_update(model_.params() + off, model_.grads() + off, adam_m_ + off, adam_v_ + off,
                          n, lr, s.beta1, s.beta2, s.eps, wd, grad_scale, t);
        model_.refresh_low_precision(off, n);
      }
    }
  }

  void download_state(float* params, float* m, float* v) override {
    const size_t bytes = model_.num_params() * sizeof(float);
    copy(params, model_.params(), bytes);
    copy(m, adam_m_, bytes);
    copy(v, adam_v_, bytes);
  }
  void upload_state(const float* params, const float* m, const float* v) override {
    const size_t bytes = model_.num_params() * sizeof(float);
    const bool params_changed = params != nullptr && params != model_.params();
    copy(model_.params(), params, bytes);
    copy(adam_m_, m, bytes);
    copy(adam_v_, v, bytes);
    if (params_changed) model_.refresh_low_precision();
  }
  void download_grads(float* grads) override {
    copy(grads, model_.grads(), model_.num_params() * sizeof(float));
  }

  AllocatorStats memory_stats() const override { return alloc_.stats(); }
  ActivationMemory activation_memory(int B, int T) const override {
    return model_.activation_memory(B, T);
  }

 private:
  static void copy(float* dst, const float* src, size_t bytes) {
    if (dst != nullptr && src != nullptr && dst != src) std::memcpy(dst, src, bytes);
  }
  GptModel& model_;
  float* adam_m_;
  float* adam_v_;
  CachingAllocator& alloc_;
};

}  // namespace

std::unique_ptr<ModelBackend> make_cpu_backend(GptModel& model, float* adam_m, float* adam_v,
                                               CachingAllocator& alloc) {
  return std::make_unique<CpuBackend>(model, adam_m, adam_v, alloc);
}

#if !FT_WITH_CUDA
std::unique_ptr<ModelBackend> make_cuda_backend(const GptConfig&, const ModelOptions&,
                                                const CudaBackendOptions&) {
  throw ConfigError("--device cuda: ft was built without CUDA (FT_WITH_CUDA=OFF)");
}

double cuda_peak_gflops(Precision, bool, int, std::string* source) {
  if (source) *source = "ft was built without CUDA";
  return 0;
}
#endif

}  // namespace ft::trainer
