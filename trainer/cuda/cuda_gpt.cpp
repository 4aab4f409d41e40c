// cuda_gpt.cpp: the GPT-2 model on CUDA behind the ModelBackend seam: llm.c parameter layout,
// fp32 master weights + bf16/fp16 activations and GEMM operands, cuBLASLt GEMMs, flash attention,
// block recompute, grad accumulation and AdamW on the device, memory from the device allocator.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cublaslt_gemm.h"
#include "cuda_check.h"
#include "cuda_ops.h"
#include "device_allocator.h"
#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/trainer/model_backend.h"

namespace ft::trainer {
namespace gpu {
namespace {

template <typename X>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<X, float>) return DType::kF32;
  if constexpr (std::is_same_v<X, bf16>) return DType::kBF16;
  return DType::kF16;
}

template <typename X>
class CudaGpt final : public ModelBackend {
 public:
  CudaGpt(const GptConfig& config, const ModelOptions& options, const CudaBackendOptions& cuda,
          const CudaDeviceInfo& info);
  ~CudaGpt() override;

  DeviceKind device() const override { return DeviceKind::kCuda; }
  std::string describe() const override;
  size_t num_params() const override { return layout_.total; }
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss_per_token, bool first_micro) override;
  void forward_backward_async(const int32_t* inputs, const int32_t* targets, int B, int T,
                              float dloss_per_token, bool first_micro) override;
  std::vector<double> wait_losses() override;
  double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) override;
  double grad_sum_squares() override;
  void adamw_step(const AdamWSettings& s, float lr, float grad_scale, int t) override;
  void download_state(float* params, float* adam_m, float* adam_v) override;
  void upload_state(const float* params, const float* adam_m, const float* adam_v) override;
  void download_grads(float* grads) override;
  AllocatorStats memory_stats() const override { return alloc_->stats(); }
  ActivationMemory activation_memory(int B, int T) const override;
  void* compute_stream() const override { return stream_; }
  void use_device_tokens(const int32_t* inputs, const int32_t* targets) override {
    next_inputs_ = inputs;
    next_targets_ = targets;
  }

 private:
  // Activations one block keeps for its backward pass.
  struct LayerActs {
    DeviceBuffer<X> ln1, qkv, atty, res2, ln2, fch, fch_gelu;    // (B,T,C|3C|C|C|C|4C|4C)
    DeviceBuffer<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // (B,T)
    DeviceBuffer<float> lse;                                     // (B,NH,T)
  };
  struct Workspace {
    std::vector<DeviceBuffer<X>> xs;  // L+1 (train) or 2 (eval) of (B,T,C): the residual stream
    std::vector<LayerActs> acts;      // L (checkpointing none) or 1
    DeviceBuffer<X> lnf;              // (B,T,C)
    DeviceBuffer<float> lnf_mean, lnf_rstd, losses;  // (B,T)
    DeviceBuffer<X> logits;                          // (B,T,Vp), dlogits after the loss
  };

  StreamId sid() const { return reinterpret_cast<StreamId>(stream_); }
  float* param(int i) const { return params_.data() + layout_.offsets[i]; }
  float* grad(int i) const { return grads_.data() + layout_.offsets[i]; }
  // The GEMM operand copy of parameter tensor i, layer l (fp32 mode: the master weights).
  const X* weight(int i, int l) const;
  void allocate_acts(LayerActs& a, int B, int T);
  void upload_tokens(const int32_t* inputs, const int32_t* targets, int n, bool buckets);
  // Enqueues one micro-batch; its loss sum goes to *loss_dst (device) without a host wait.
  void enqueue_forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                float dloss_per_token, bool first_micro, double* loss_dst);
  void layer_forward(int l, const X* x, X* x_out, LayerActs& a, int B, int T);
  void layer_backward(int l, const X* x, X* dres, LayerActs& a, int B, int T, bool first_micro,
                      float* scratch);
  void run_forward(int B, int T, Workspace& w, bool keep);
  double loss_sum(const float* losses, int N);
  void sync() { FT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  GptConfig config_;
  ModelOptions options_;
  ParamLayout layout_;
  CudaDeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceCachingAllocator> alloc_;
  std::unique_ptr<LtGemm> gemm_;
  DeviceBuffer<float> params_, grads_, adam_m_, adam_v_;  // (num_params)
  DeviceBuffer<X> params_lp_;  // (num_params) X copy of the parameters (not in fp32 mode)
  // (5n+1) per micro-batch of n tokens: inputs | targets | order (n) | start (n+1) | token (n)
  DeviceBuffer<int32_t> tokens_;
  // Two page-locked host staging slots for tokens_, reused once their copy has completed
  // (event): copies from pageable memory could stall the host behind queued kernels.
  struct HostSlot {
    int32_t* data = nullptr;
    size_t capacity = 0;  // int32s
    cudaEvent_t copied = nullptr;
    bool pending = false;
  };
  HostSlot slots_[2];
  int next_slot_ = 0;
  static constexpr int kMaxPendingLosses = 64;
  DeviceBuffer<double> loss_slots_;  // (kMaxPendingLosses) loss sums of enqueued micro-batches
  std::vector<int> pending_tokens_;  // N of each enqueued micro-batch
  std::vector<double> collected_;    // mean losses already fetched, not yet returned
  DeviceBuffer<double> reduce_;      // (1 + kReducePartials): result, then partials
  TokenBuckets buckets_;
  const int32_t* next_inputs_ = nullptr;  // use_device_tokens(), for the next forward
  const int32_t* next_targets_ = nullptr;
  const int32_t* cur_inputs_ = nullptr;  // (B,T) this forward's tokens on the device
  const int32_t* cur_targets_ = nullptr;
};

template <typename X>
CudaGpt<X>::CudaGpt(const GptConfig& config, const ModelOptions& options,
                    const CudaBackendOptions& cuda, const CudaDeviceInfo& info)
    : config_(config), options_(options), info_(info) {
  config_.validate();
  layout_ = ParamLayout::make(config_);
  FT_CUDA_CHECK(cudaSetDevice(cuda.device));
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DeviceAllocatorOptions ao;
  ao.memory_limit = cuda.memory_limit;
  ao.caching = cuda.caching;
  alloc_ = std::make_unique<DeviceCachingAllocator>(make_cuda_device_memory(cuda.device), ao);
  gemm_ = std::make_unique<LtGemm>(*alloc_, stream_);
  gemm_->set_math(cuda.tf32 ? GemmMath::kTf32 : GemmMath::kFp32);
  const size_t P = layout_.total;
  params_ = DeviceBuffer<float>(*alloc_, P, sid(), "params");
  grads_ = DeviceBuffer<float>(*alloc_, P, sid(), "grads");
  adam_m_ = DeviceBuffer<float>(*alloc_, P, sid(), "adam.m");
  adam_v_ = DeviceBuffer<float>(*alloc_, P, sid(), "adam.v");
  if constexpr (!std::is_same_v<X, float>) {
    params_lp_ = DeviceBuffer<X>(*alloc_, P, sid(), "params_lp");
  }
  reduce_ = DeviceBuffer<double>(*alloc_, 1 + kReducePartials, sid(), "reduce");
  loss_slots_ = DeviceBuffer<double>(*alloc_, kMaxPendingLosses, sid(), "loss_slots");
  for (HostSlot& h : slots_) {
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&h.copied, cudaEventDisableTiming));
  }
  for (auto* b : {&params_, &grads_, &adam_m_, &adam_v_}) {
    FT_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), stream_));
  }
  if (params_lp_.data()) {
    FT_CUDA_CHECK(cudaMemsetAsync(params_lp_.data(), 0, params_lp_.bytes(), stream_));
  }
  sync();
}

template <typename X>
CudaGpt<X>::~CudaGpt() {
  if (stream_) cudaStreamSynchronize(stream_);
  // Buffers go back to the allocator before it and the stream are destroyed.
  params_.reset();
  grads_.reset();
  adam_m_.reset();
  adam_v_.reset();
  params_lp_.reset();
  tokens_.reset();
  loss_slots_.reset();
  for (HostSlot& h : slots_) {
    if (h.data) cudaFreeHost(h.data);
    if (h.copied) cudaEventDestroy(h.copied);
  }
  reduce_.reset();
  gemm_.reset();
  alloc_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

template <typename X>
std::string CudaGpt<X>::describe() const {
  return fmt::format("cuda:{} {} (sm_{}{}), {} activations, {}{}", info_.index, info_.name,
                     info_.sm_major, info_.sm_minor, dtype_name(dtype_of<X>()),
                     LtGemm::library_info(),
                     std::is_same_v<X, float> && gemm_->math() == GemmMath::kTf32 ? " (TF32)" : "");
}

template <typename X>
const X* CudaGpt<X>::weight(int i, int l) const {
  const size_t per = i == kWte ? layout_.sizes[i] : layout_.sizes[i] / config_.num_layers;
  const size_t off = layout_.offsets[i] + per * static_cast<size_t>(l);
  if constexpr (std::is_same_v<X, float>) {
    return params_.data() + off;
  } else {
    return params_lp_.data() + off;
  }
}

template <typename X>
void CudaGpt<X>::allocate_acts(LayerActs& a, int B, int T) {
  const size_t BT = static_cast<size_t>(B) * T, C = config_.channels;
  a.ln1 = DeviceBuffer<X>(*alloc_, BT * C, sid(), "act.ln1");
  a.ln1_mean = DeviceBuffer<float>(*alloc_, BT, sid(), "act.ln1_mean");
  a.ln1_rstd = DeviceBuffer<float>(*alloc_, BT, sid(), "act.ln1_rstd");
  a.qkv = DeviceBuffer<X>(*alloc_, BT * 3 * C, sid(), "act.qkv");
  a.atty = DeviceBuffer<X>(*alloc_, BT * C, sid(), "act.atty");
  a.lse = DeviceBuffer<float>(*alloc_, BT * config_.num_heads, sid(), "act.lse");
  a.res2 = DeviceBuffer<X>(*alloc_, BT * C, sid(), "act.res2");
  a.ln2 = DeviceBuffer<X>(*alloc_, BT * C, sid(), "act.ln2");
  a.ln2_mean = DeviceBuffer<float>(*alloc_, BT, sid(), "act.ln2_mean");
  a.ln2_rstd = DeviceBuffer<float>(*alloc_, BT, sid(), "act.ln2_rstd");
  a.fch = DeviceBuffer<X>(*alloc_, BT * 4 * C, sid(), "act.fch");
  a.fch_gelu = DeviceBuffer<X>(*alloc_, BT * 4 * C, sid(), "act.fch_gelu");
}

template <typename X>
void CudaGpt<X>::upload_tokens(const int32_t* inputs, const int32_t* targets, int n, bool buckets) {
  FT_RANGE("h2d.tokens", RangeKind::kH2D, n);
  const size_t n_ = static_cast<size_t>(n), total = 5 * n_ + 1;
  if (tokens_.size() < total) tokens_ = DeviceBuffer<int32_t>(*alloc_, total, sid(), "tokens");
  HostSlot& h = slots_[next_slot_];
  next_slot_ ^= 1;
  if (h.pending) FT_CUDA_CHECK(cudaEventSynchronize(h.copied));  // its last copy is done
  h.pending = false;
  if (h.capacity < total) {
    if (h.data) FT_CUDA_CHECK(cudaFreeHost(h.data));
    h.data = nullptr;
    FT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h.data), total * sizeof(int32_t),
                                cudaHostAllocDefault));
    h.capacity = total;
  }
  int32_t* dev = tokens_.data();
  size_t lo = 0, hi = 0;          // the int32 range [lo, hi) of the slot to copy
  if (next_inputs_ != nullptr) {  // already on the device (an H2D uploader's batch)
    cur_inputs_ = next_inputs_;
    cur_targets_ = next_targets_;
    next_inputs_ = next_targets_ = nullptr;
    lo = hi = 2 * n_;
  } else {
    std::memcpy(h.data, inputs, n_ * sizeof(int32_t));
    std::memcpy(h.data + n_, targets, n_ * sizeof(int32_t));
    cur_inputs_ = dev;
    cur_targets_ = dev + n_;
    hi = 2 * n_;
  }
  if (buckets) {
    buckets_.build(inputs, n);
    std::memcpy(h.data + 2 * n_, buckets_.order.data(), n_ * sizeof(int32_t));
    std::memcpy(h.data + 3 * n_, buckets_.start.data(), buckets_.start.size() * sizeof(int32_t));
    std::memcpy(h.data + 4 * n_ + 1, buckets_.token.data(),
                buckets_.token.size() * sizeof(int32_t));
    hi = 5 * n_ + 1;
  }
  if (hi > lo) {
    FT_CUDA_CHECK(cudaMemcpyAsync(dev + lo, h.data + lo, (hi - lo) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    FT_CUDA_CHECK(cudaEventRecord(h.copied, stream_));
    h.pending = true;
  }
}

template <typename X>
void CudaGpt<X>::layer_forward(int l, const X* x, X* x_out, LayerActs& a, int B, int T) {
  FT_RANGE("fwd.block", RangeKind::kCompute, l);
  const int C = config_.channels, NH = config_.num_heads, N = B * T;
  const size_t C_ = C, NC = static_cast<size_t>(N) * C;
  constexpr DType dt = dtype_of<X>();
  layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, param(kLn1w) + l * C_,
                    param(kLn1b) + l * C_, N, C, stream_);
  // The biases also in X (their copy in params_lp_): cuBLASLt's epilogue takes a 16-bit D's bias
  // only in D's type.
  const bool lp = !std::is_same_v<X, float>;
  gemm_->forward(a.qkv.data(), dt, a.ln1.data(), weight(kQkvw, l), dt, param(kQkvb) + l * 3 * C_, N,
                 C, 3 * C, lp ? weight(kQkvb, l) : nullptr);
  attention_forward(a.atty.data(), a.lse.data(), a.qkv.data(), B, T, C, NH, stream_);
  gemm_->forward(a.res2.data(), dt, a.atty.data(), weight(kAttprojw, l), dt,
                 param(kAttprojb) + l * C_, N, C, C, lp ? weight(kAttprojb, l) : nullptr);
  residual_forward(a.res2.data(), a.res2.data(), x, NC, stream_);
  layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                    param(kLn2w) + l * C_, param(kLn2b) + l * C_, N, C, stream_);
  gemm_->forward(a.fch.data(), dt, a.ln2.data(), weight(kFcw, l), dt, param(kFcb) + l * 4 * C_, N,
                 C, 4 * C, lp ? weight(kFcb, l) : nullptr);
  gelu_forward(a.fch_gelu.data(), a.fch.data(), NC * 4, stream_);
  gemm_->forward(x_out, dt, a.fch_gelu.data(), weight(kFcprojw, l), dt, param(kFcprojb) + l * C_, N,
                 4 * C, C, lp ? weight(kFcprojb, l) : nullptr);
  residual_forward(x_out, x_out, a.res2.data(), NC, stream_);
}

template <typename X>
void CudaGpt<X>::layer_backward(int l, const X* x, X* dres, LayerActs& a, int B, int T,
                                bool first_micro, float* scratch) {
  FT_RANGE("bwd.block", RangeKind::kCompute, l);
  const int C = config_.channels, NH = config_.num_heads, N = B * T;
  const size_t C_ = C, NC = static_cast<size_t>(N) * C;
  constexpr DType dt = dtype_of<X>();
  const bool acc = !first_micro;
  DeviceBuffer<X> dbt(*alloc_, NC, sid(), "grad.dbt");        // (B,T,C)
  DeviceBuffer<X> dbig(*alloc_, NC * 4, sid(), "grad.dbig");  // (B,T,4C), also dqkv (B,T,3C)
  DeviceBuffer<float> dd(*alloc_, NC / C * NH, sid(), "grad.attn_d");  // (B,NH,T)
  // MLP: x_out = res2 + fch_gelu @ fcprojw^T + b
  gemm_->backward_input(dbig.data(), dt, dres, weight(kFcprojw, l), dt, N, 4 * C, C);
  gemm_->backward_weight(grad(kFcprojw) + l * C_ * 4 * C, dres, a.fch_gelu.data(), dt, N, 4 * C, C,
                         acc);
  bias_backward(grad(kFcprojb) + l * C_, scratch, dres, N, C, stream_);
  gelu_backward(dbig.data(), a.fch.data(), dbig.data(), NC * 4, stream_);
  gemm_->backward_input(dbt.data(), dt, dbig.data(), weight(kFcw, l), dt, N, C, 4 * C);
  gemm_->backward_weight(grad(kFcw) + l * 4 * C_ * C, dbig.data(), a.ln2.data(), dt, N, C, 4 * C,
                         acc);
  bias_backward(grad(kFcb) + l * 4 * C_, scratch, dbig.data(), N, 4 * C, stream_);
  layernorm_backward(dres, grad(kLn2w) + l * C_, grad(kLn2b) + l * C_, scratch, dbt.data(),
                     a.res2.data(), param(kLn2w) + l * C_, a.ln2_mean.data(), a.ln2_rstd.data(), N,
                     C, stream_);
  // Attention: res2 = x + atty @ attprojw^T + b
  gemm_->backward_input(dbt.data(), dt, dres, weight(kAttprojw, l), dt, N, C, C);
  gemm_->backward_weight(grad(kAttprojw) + l * C_ * C, dres, a.atty.data(), dt, N, C, C, acc);
  bias_backward(grad(kAttprojb) + l * C_, scratch, dres, N, C, stream_);
  X* dqkv = dbig.data();  // (B,T,3C)
  attention_backward(dqkv, dd.data(), dbt.data(), a.qkv.data(), a.atty.data(), a.lse.data(), B, T,
                     C, NH, stream_);
  gemm_->backward_input(dbt.data(), dt, dqkv, weight(kQkvw, l), dt, N, C, 3 * C);
  gemm_->backward_weight(grad(kQkvw) + l * 3 * C_ * C, dqkv, a.ln1.data(), dt, N, C, 3 * C, acc);
  bias_backward(grad(kQkvb) + l * 3 * C_, scratch, dqkv, N, 3 * C, stream_);
  layernorm_backward(dres, grad(kLn1w) + l * C_, grad(kLn1b) + l * C_, scratch, dbt.data(), x,
                     param(kLn1w) + l * C_, a.ln1_mean.data(), a.ln1_rstd.data(), N, C, stream_);
}

template <typename X>
void CudaGpt<X>::run_forward(int B, int T, Workspace& w, bool keep) {
  const int C = config_.channels, L = config_.num_layers, N = B * T;
  if (T > config_.max_seq_len) {
    throw ConfigError(
        fmt::format("sequence length {} exceeds the model's maximum {}", T, config_.max_seq_len));
  }
  const size_t NC = static_cast<size_t>(N) * C;
  const bool per_layer = keep && options_.checkpointing == Checkpointing::kNone;
  const int nx = keep ? L + 1 : 2;
  w.xs.clear();
  for (int i = 0; i < nx; ++i) w.xs.emplace_back(*alloc_, NC, sid(), "act.residual");
  w.acts.clear();
  w.acts.resize(per_layer ? L : 1);
  for (auto& a : w.acts) allocate_acts(a, B, T);
  {
    FT_RANGE("fwd.encoder", RangeKind::kCompute);
    encoder_forward(w.xs[0].data(), cur_inputs_, param(kWte), param(kWpe), B, T, C, stream_);
  }
  for (int l = 0; l < L; ++l) {
    const X* x = w.xs[keep ? l : l % 2].data();
    X* x_out = w.xs[keep ? l + 1 : (l + 1) % 2].data();
    layer_forward(l, x, x_out, w.acts[per_layer ? l : 0], B, T);
  }
  FT_RANGE("fwd.head", RangeKind::kCompute);
  const X* x_last = w.xs[keep ? L : L % 2].data();
  w.lnf = DeviceBuffer<X>(*alloc_, NC, sid(), "act.lnf");
  w.lnf_mean = DeviceBuffer<float>(*alloc_, N, sid(), "act.lnf_mean");
  w.lnf_rstd = DeviceBuffer<float>(*alloc_, N, sid(), "act.lnf_rstd");
  w.losses = DeviceBuffer<float>(*alloc_, N, sid(), "act.losses");
  layernorm_forward(w.lnf.data(), w.lnf_mean.data(), w.lnf_rstd.data(), x_last, param(kLnfw),
                    param(kLnfb), N, C, stream_);
  const int Vp = config_.padded_vocab;
  constexpr DType dt = dtype_of<X>();
  w.logits = DeviceBuffer<X>(*alloc_, static_cast<size_t>(N) * Vp, sid(), "act.logits");
  gemm_->forward(w.logits.data(), dt, w.lnf.data(), weight(kWte, 0), dt, nullptr, N, C, Vp);
}

template <typename X>
double CudaGpt<X>::loss_sum(const float* losses, int N) {
  FT_RANGE("loss.d2h", RangeKind::kD2H);
  sum_to_double(reduce_.data(), reduce_.data() + 1, losses, N, stream_);
  double sum = 0;
  FT_CUDA_CHECK(
      cudaMemcpyAsync(&sum, reduce_.data(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  sync();
  return sum;
}

template <typename X>
void CudaGpt<X>::enqueue_forward_backward(const int32_t* inputs, const int32_t* targets, int B,
                                          int T, float dloss_per_token, bool first_micro,
                                          double* loss_dst) {
  const int C = config_.channels, L = config_.num_layers, N = B * T;
  const int V = config_.vocab_size, Vp = config_.padded_vocab;
  const size_t NC = static_cast<size_t>(N) * C;
  upload_tokens(inputs, targets, N, /*buckets=*/true);
  Workspace w;
  run_forward(B, T, w, /*keep=*/true);
  if (first_micro) {
    // Gradients that are only ever accumulated start from zero; the matmul weight
    // gradients are overwritten by their first GEMM instead (as the CPU model).
    for (int i :
         {kWpe, kLn1w, kLn1b, kQkvb, kAttprojb, kLn2w, kLn2b, kFcb, kFcprojb, kLnfw, kLnfb}) {
      FT_CUDA_CHECK(cudaMemsetAsync(grad(i), 0, layout_.sizes[i] * sizeof(float), stream_));
    }
  }
  constexpr DType dt = dtype_of<X>();
  const size_t scratch_n =
      std::max(layernorm_backward_scratch(N, C), bias_backward_scratch(N, 4 * C));
  DeviceBuffer<float> scratch(*alloc_, scratch_n, sid(), "grad.reduce_scratch");
  DeviceBuffer<X> dres(*alloc_, NC, sid(), "grad.dres");  // (B,T,C) gradient of the residual stream
  {
    FT_RANGE("loss", RangeKind::kCompute);
    crossentropy_forward_backward(w.logits.data(), w.losses.data(), cur_targets_, N, V, Vp,
                                  dloss_per_token, stream_);
  }
  {
    FT_RANGE("bwd.head", RangeKind::kCompute);
    DeviceBuffer<X> dlnf(*alloc_, NC, sid(), "grad.dlnf");  // (B,T,C)
    gemm_->backward_input(dlnf.data(), dt, w.logits.data(), weight(kWte, 0), dt, N, C, Vp);
    gemm_->backward_weight(grad(kWte), w.logits.data(), w.lnf.data(), dt, N, C, Vp, !first_micro);
    w.logits.reset();
    FT_CUDA_CHECK(cudaMemsetAsync(dres.data(), 0, dres.bytes(), stream_));
    layernorm_backward(dres.data(), grad(kLnfw), grad(kLnfb), scratch.data(), dlnf.data(),
                       w.xs[L].data(), param(kLnfw), w.lnf_mean.data(), w.lnf_rstd.data(), N, C,
                       stream_);
  }
  const bool recompute = options_.checkpointing == Checkpointing::kBlock;
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& a = w.acts[recompute ? 0 : l];
    // The last block's activations are still in the shared set from forward.
    if (recompute && l != L - 1) {
      FT_RANGE("recompute.block", RangeKind::kCompute, l);
      DeviceBuffer<X> out(*alloc_, NC, sid(), "act.recompute_out");
      layer_forward(l, w.xs[l].data(), out.data(), a, B, T);
    }
    layer_backward(l, w.xs[l].data(), dres.data(), a, B, T, first_micro, scratch.data());
  }
  {
    FT_RANGE("bwd.encoder", RangeKind::kCompute);
    const int32_t* tok = tokens_.data();
    const size_t n_ = static_cast<size_t>(N);
    encoder_backward(grad(kWte), grad(kWpe), dres.data(), tok + 2 * n_, tok + 3 * n_,
                     tok + 4 * n_ + 1, static_cast<int>(buckets_.token.size()), B, T, C, stream_);
  }
  sum_to_double(loss_dst, reduce_.data() + 1, w.losses.data(), N, stream_);
}

template <typename X>
double CudaGpt<X>::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                    float dloss_per_token, bool first_micro) {
  if (!pending_tokens_.empty() || !collected_.empty()) {
    throw Error("forward_backward: asynchronous micro-batches are pending (call wait_losses)");
  }
  forward_backward_async(inputs, targets, B, T, dloss_per_token, first_micro);
  return wait_losses().back();
}

template <typename X>
void CudaGpt<X>::forward_backward_async(const int32_t* inputs, const int32_t* targets, int B, int T,
                                        float dloss_per_token, bool first_micro) {
  if (pending_tokens_.size() == static_cast<size_t>(kMaxPendingLosses)) {
    auto done = wait_losses();  // slots full: fetch them, keep the results for later
    collected_ = std::move(done);
  }
  enqueue_forward_backward(inputs, targets, B, T, dloss_per_token, first_micro,
                           loss_slots_.data() + pending_tokens_.size());
  pending_tokens_.push_back(B * T);
}

template <typename X>
std::vector<double> CudaGpt<X>::wait_losses() {
  FT_RANGE("loss.d2h", RangeKind::kD2H);
  const size_t n = pending_tokens_.size();
  if (n > 0) {
    double sums[kMaxPendingLosses];
    FT_CUDA_CHECK(cudaMemcpyAsync(sums, loss_slots_.data(), n * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream_));
    sync();
    for (size_t i = 0; i < n; ++i) collected_.push_back(sums[i] / pending_tokens_[i]);
    pending_tokens_.clear();
  }
  return std::exchange(collected_, {});
}

template <typename X>
double CudaGpt<X>::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T) {
  const int N = B * T;
  upload_tokens(inputs, targets, N, /*buckets=*/false);
  Workspace w;
  run_forward(B, T, w, /*keep=*/false);
  crossentropy_forward(w.logits.data(), w.losses.data(), cur_targets_, N, config_.vocab_size,
                       config_.padded_vocab, stream_);
  return loss_sum(w.losses.data(), N) / N;
}

template <typename X>
double CudaGpt<X>::grad_sum_squares() {
  FT_RANGE("grad_norm", RangeKind::kOptimizer);
  sum_squares(reduce_.data(), reduce_.data() + 1, grads_.data(), layout_.total, stream_);
  double sq = 0;
  FT_CUDA_CHECK(
      cudaMemcpyAsync(&sq, reduce_.data(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  sync();
  return sq;
}

template <typename X>
void CudaGpt<X>::adamw_step(const AdamWSettings& s, float lr, float grad_scale, int t) {
  FT_RANGE("adamw", RangeKind::kOptimizer);
  for (int i = 0; i < kNumParamTensors; ++i) {
    const size_t off = layout_.offsets[i];
    const float wd = ParamLayout::decays(i) ? s.weight_decay : 0.0f;
    X* lp = nullptr;
    if constexpr (!std::is_same_v<X, float>) lp = params_lp_.data() + off;
    adamw_update(params_.data() + off, lp, grads_.data() + off, adam_m_.data() + off,
                 adam_v_.data() + off, layout_.sizes[i], lr, s.beta1, s.beta2, s.eps, wd,
                 grad_scale, t, stream_);
  }
  // The step ends when the device is done, so step times count the optimizer.
  FT_RANGE("sync.step_end", RangeKind::kSync);
  sync();
}

template <typename X>
void CudaGpt<X>::download_state(float* params, float* m, float* v) {
  sync();
  const size_t bytes = layout_.total * sizeof(float);
  // On the engine's stream (non-blocking: a plain cudaMemcpy on the legacy stream is not
  // ordered with it), then waited for.
  auto copy = [&](void* dst, const void* src) {
    FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  };
  if (params) copy(params, params_.data());
  if (m) copy(m, adam_m_.data());
  if (v) copy(v, adam_v_.data());
  sync();
}

template <typename X>
void CudaGpt<X>::upload_state(const float* params, const float* m, const float* v) {
  sync();
  const size_t bytes = layout_.total * sizeof(float);
  // Stream-ordered with the cast below. A plain cudaMemcpy from pageable memory runs on the
  // legacy stream, which the engine's non-blocking stream does not wait for, and may return
  // before its DMA lands: the cast then read stale master weights (seen on an H200: a second
  // 16-bit engine's first loss off by 0.02 and its gradients by 40-80%).
  auto copy = [&](void* dst, const void* src) {
    FT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  };
  if (params) copy(params_.data(), params);
  if (m) copy(adam_m_.data(), m);
  if (v) copy(adam_v_.data(), v);
  if constexpr (!std::is_same_v<X, float>) {
    if (params) cast_from_fp32(params_lp_.data(), params_.data(), layout_.total, stream_);
  }
  sync();
}

template <typename X>
void CudaGpt<X>::download_grads(float* grads) {
  sync();
  FT_CUDA_CHECK(cudaMemcpyAsync(grads, grads_.data(), layout_.total * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  sync();
}

template <typename X>
ActivationMemory CudaGpt<X>::activation_memory(int B, int T) const {
  const size_t BT = static_cast<size_t>(B) * T, C = config_.channels, L = config_.num_layers;
  const size_t x = sizeof(X), f = sizeof(float);
  const size_t layer = BT * C * 15 * x + BT * 4 * f + BT * config_.num_heads * f;
  const size_t stream = (L + 1) * BT * C * x;
  const size_t head =
      BT * C * x + 3 * BT * f + BT * config_.padded_vocab * x;  // lnf, stats, logits
  ActivationMemory m;
  m.no_checkpoint_bytes = stream + L * layer + head;
  if (options_.checkpointing == Checkpointing::kBlock) {
    m.saved_bytes = stream + head + layer;  // the shared set of the recomputed block
    m.recompute_bytes = layer;
  } else {
    m.saved_bytes = m.no_checkpoint_bytes;
  }
  return m;
}

}  // namespace
}  // namespace gpu

std::unique_ptr<ModelBackend> make_cuda_backend(const GptConfig& config,
                                                const ModelOptions& options,
                                                const CudaBackendOptions& cuda) {
  std::string reason;
  const auto devices = cuda_devices(&reason);
  if (devices.empty()) throw ConfigError("--device cuda: no CUDA device: " + reason);
  if (cuda.device < 0 || cuda.device >= static_cast<int>(devices.size())) {
    throw ConfigError(fmt::format("--device cuda: device {} does not exist ({} visible)",
                                  cuda.device, devices.size()));
  }
  const CudaDeviceInfo& info = devices[cuda.device];
  switch (options.precision) {
    case Precision::kFp32:
      return std::make_unique<gpu::CudaGpt<float>>(config, options, cuda, info);
    case Precision::kBf16:
      return std::make_unique<gpu::CudaGpt<gpu::bf16>>(config, options, cuda, info);
    case Precision::kFp16:
      return std::make_unique<gpu::CudaGpt<gpu::fp16>>(config, options, cuda, info);
  }
  throw ConfigError("--device cuda: unknown precision");
}

}  // namespace ft::trainer
