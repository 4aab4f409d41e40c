// model_backend.h: the seam between the training loop and the engine that runs the model (CPU
// GptModel or the CUDA model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/error.h"
#include "ft/trainer/device.h"
#include "ft/trainer/gpt_config.h"
#include "ft/trainer/model.h"
#include "ft/trainer/zero_optimizer.h"  // AdamWSettings

namespace ft::trainer {

// What one optimizer step needs from the engine. The trainer keeps a host mirror of the
// fp32 master parameters and AdamW moments (in the CPU GptModel and its own buffers): for
// the CPU backend the mirror IS the state; a device backend copies on download/upload.
class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  virtual DeviceKind device() const = 0;
  // e.g. "cpu (oneDNN ...)" or "cuda:0 NVIDIA H200 (sm_90), cuBLASLt 13.0.0, bf16".
  virtual std::string describe() const = 0;
  virtual size_t num_params() const = 0;

  // One micro-batch: forward, loss, backward; inputs/targets (B,T) on the host. Gradients
  // are scaled by dloss_per_token and, unless first_micro, accumulated. Returns the mean loss.
  virtual double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                  float dloss_per_token, bool first_micro) = 0;
  // forward_backward without waiting for its loss: a device engine only enqueues the work
  // (copying what it needs from the host pointers before it returns), so the caller can fetch
  // and upload the next micro-batch while the device computes. wait_losses() returns the mean
  // losses of the micro-batches enqueued since its last call, in order. By default the work
  // runs at once.
  virtual void forward_backward_async(const int32_t* inputs, const int32_t* targets, int B, int T,
                                      float dloss_per_token, bool first_micro) {
    pending_losses_.push_back(
        forward_backward(inputs, targets, B, T, dloss_per_token, first_micro));
  }
  virtual std::vector<double> wait_losses() { return std::exchange(pending_losses_, {}); }
  // Forward only; mean loss.
  virtual double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) = 0;
  // Sum of squares of the (loss-scaled) gradients, in double; non-finite on overflow.
  virtual double grad_sum_squares() = 0;
  // AdamW over every parameter (grads multiplied by grad_scale first; t is the 1-based step),
  // then the low-precision weight copies the GEMMs read.
  virtual void adamw_step(const AdamWSettings& s, float lr, float grad_scale, int t) = 0;

  // Host mirror <-> engine state; each pointer holds num_params() floats. Null pointers
  // are skipped (e.g. download of the parameters only).
  virtual void download_state(float* params, float* adam_m, float* adam_v) = 0;
  virtual void upload_state(const float* params, const float* adam_m, const float* adam_v) = 0;
  // Gradients to the host (tests, debugging).
  virtual void download_grads(float* grads) = 0;

  // The engine's memory (the CPU caching allocator or the device allocator).
  virtual AllocatorStats memory_stats() const = 0;
  virtual ActivationMemory activation_memory(int B, int T) const = 0;

  // Device engines: the compute stream as a cudaStream_t (null on the CPU), which an H2D
  // uploader (pinned staging, copy stream) makes wait for its copies.
  virtual void* compute_stream() const { return nullptr; }
  // Device engines: device copies (B,T) of the NEXT forward's inputs and targets, ordered
  // before the compute stream's work (e.g. an uploader's batch). That forward then copies
  // nothing and reads its host pointers only on the host (token buckets for the embedding
  // gradient). The CPU engine has no use for them and says so.
  virtual void use_device_tokens(const int32_t* inputs, const int32_t* targets) {
    (void)inputs, (void)targets;
    throw Error("use_device_tokens: the " + std::string(device_name(device())) +
                " engine reads tokens from the host");
  }

 protected:
  std::vector<double> pending_losses_;  // the default forward_backward_async's results
};

// The CPU engine: `model` and the AdamW moments (num_params each) are the state itself.
std::unique_ptr<ModelBackend> make_cpu_backend(GptModel& model, float* adam_m, float* adam_v,
                                               CachingAllocator& alloc);

struct CudaBackendOptions {
  int device = 0;
  bool tf32 = false;        // fp32 mode: TF32 tensor-core GEMMs instead of plain fp32
  size_t memory_limit = 0;  // device allocator budget (0: the device's memory)
  bool caching = true;      // false: the device allocator frees segments as they empty
};

// The CUDA engine (trainer/cuda/cuda_gpt.cpp): same parameter layout, initialised by
// upload_state() from the CPU model so both start identical. Throws ConfigError naming the
// reason when ft was built without CUDA or no device is usable.
std::unique_ptr<ModelBackend> make_cuda_backend(const GptConfig& config,
                                                const ModelOptions& options,
                                                const CudaBackendOptions& cuda);

// ft's stated peak for MFU on CUDA device `device`, in GFLOP/s, and where it comes from
// (e.g. "H100/H200 SXM dense bf16 spec (989.4 TFLOP/s) for 132 SMs"). 0 when unknown.
double cuda_peak_gflops(Precision p, bool tf32, int device, std::string* source);

}  // namespace ft::trainer
