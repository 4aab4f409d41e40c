// model.h: the GPT-2 model on the CPU backend: parameters, activations, forward and backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/trainer/gpt_config.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/precision.h"

namespace ft::trainer {

enum class Checkpointing { kNone, kBlock };
enum class AttentionImpl { kFlash, kMaterialized };

Checkpointing parse_checkpointing(const std::string& s);  // "none" | "block"
const char* checkpointing_name(Checkpointing c);
AttentionImpl parse_attention(const std::string& s);  // "flash" | "naive"
const char* attention_name(AttentionImpl a);

struct ModelOptions {
  Precision precision = Precision::kFp32;
  Checkpointing checkpointing = Checkpointing::kNone;
  AttentionImpl attention = AttentionImpl::kFlash;
};

// Bytes of saved activations for one micro-batch, by what keeps them.
struct ActivationMemory {
  size_t saved_bytes = 0;        // kept from forward to backward
  size_t recompute_bytes = 0;    // per-block working set re-materialised in backward
  size_t no_checkpoint_bytes = 0;  // what checkpointing=none would keep (for the saving)
};

class Communicator;

// Which part of the model this rank holds, for tensor and pipeline parallelism.
// The default is the whole model on one rank.
struct ModelSharding {
  Communicator* tp = nullptr;  // tensor-parallel group (null or size 1: none); not owned
  int first_layer = 0;         // pipeline stage: blocks [first_layer, first_layer + num_layers)
  int num_layers = -1;         // -1: all blocks
  bool has_embedding = true;   // first stage: wte/wpe lookup
  bool has_head = true;        // last stage: final LayerNorm, LM head and loss
};

// Called on the training thread when backward has finished writing the gradients
// of block `layer` for this micro-batch; layer -1 means the non-block tensors
// (embeddings, final LayerNorm), which finish last. Lets data parallelism start
// all-reducing a bucket while backward continues.
using GradReadyHook = std::function<void(int layer)>;

class GptModel {
 public:
  GptModel(const GptConfig& config, CachingAllocator& alloc, const ModelOptions& options,
           const ModelSharding& sharding = {});
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  // GPT-2 initialisation: N(0, 0.02) matrices and embeddings, residual
  // projections scaled by 1/sqrt(2L), LayerNorm weight 1, biases 0.
  void init_weights(uint64_t seed);

  const GptConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  void set_options(const ModelOptions& o);
  const ParamLayout& layout() const { return layout_; }
  size_t num_params() const { return layout_.total; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  float* param(int index) { return params_.data() + layout_.offsets[index]; }
  float* grad(int index) { return grads_.data() + layout_.offsets[index]; }
  const float* grad(int index) const { return grads_.data() + layout_.offsets[index]; }

  // Tensor parallelism (ModelSharding::tp of size t > 1, see tensor_parallel.h):
  // layout() is this rank's shard; full_layout() the whole model's.
  int tp_size() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  const ParamLayout& full_layout() const { return full_layout_; }
  // Sets tensor `index` from the whole tensor (full_layout().sizes[index] elements),
  // keeping this rank's shard. Call refresh_low_precision() afterwards.
  void load_full_tensor(int index, const float* full);
  // The whole model's parameters in the llm.c layout; collective over the TP group.
  std::vector<float> gather_full_params();
  // Sums of squared gradients over the TP-sharded tensors and the replicated ones
  // (the global squared norm is the TP all-reduce of `sharded` plus `replicated`).
  struct SquareSums {
    double sharded = 0, replicated = 0;
  };
  SquareSums grad_square_sums() const;

  // Re-derives the low-precision weight copies after params changed.
  void refresh_low_precision();
  // Same for elements [offset, offset + n) of the flat parameters only (lets the
  // optimizer convert each chunk while it is still in cache).
  void refresh_low_precision(size_t offset, size_t n);

  // One micro-batch: forward, loss, backward. inputs/targets (B,T).
  // Gradients are scaled by `dloss` (= loss_scale / (B*T*accum) for a mean
  // loss) and, unless `first_micro`, accumulated into grads(). Returns the
  // mean loss over the B*T positions (unscaled).
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss_per_token, bool first_micro);

  // Forward only; returns the mean loss. Leaves grads untouched.
  double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T);

  ActivationMemory activation_memory(int B, int T) const;
  // Bytes of logits per LM-head chunk (default 48 MiB: stays in this machine's
  // 300 MiB L3 through GEMM, loss and backward). Smaller values are for tests.
  void set_head_chunk_bytes(size_t bytes) { head_chunk_bytes_ = bytes; }
  Gemm& gemm() { return gemm_; }
  const ModelSharding& sharding() const { return sharding_; }
  // Installs (or, with an empty function, removes) the gradient-ready hook.
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }

 private:
  struct LayerActs;
  struct Workspace;
  void layer_forward(int l, const float* x, float* x_out, LayerActs& a, int B, int T);
  void layer_backward(int l, const float* x, float* dres, LayerActs& a, int B, int T,
                      bool first_micro);
  const void* lp_weight(int index, int layer);
  void setup_tensor_parallel();
  // Row-parallel output: sum the TP ranks' partials in place, then add the bias (may be null).
  void tp_reduce_output(float* out, const float* bias, int N, int C);
  // Column-parallel input gradient: sum the TP ranks' partials in place.
  void tp_reduce_input_grad(float* dinp, int N, int C);
  // Embeddings, blocks and the final LayerNorm; the LM head runs in head_chunk().
  void run_forward(const int32_t* inputs, int B, int T, Workspace& w, bool keep);
  int head_chunk_rows(int N) const;
  void allocate_head(Workspace& w, int rows);
  // LM head + loss (+ backward when dlnf is non-null) for rows [r0, r0 + rows).
  double head_chunk(Workspace& w, const int32_t* targets, int r0, int rows, float dloss_per_token,
                    float* dlnf, bool overwrite_dwte);

  GptConfig config_;
  CachingAllocator& alloc_;
  ModelOptions options_;
  ParamLayout layout_;
  Buffer<float> params_;  // (num_params)
  Buffer<float> grads_;   // (num_params)
  Buffer<char> params_lp_;  // bf16 bits or fp16-rounded floats of the matmul weights
  Gemm gemm_;
  size_t head_chunk_bytes_ = size_t{48} << 20;
  ModelSharding sharding_;
  GradReadyHook grad_ready_;
  int tp_ = 1, tp_rank_ = 0;  // tensor-parallel degree and this rank's place
  ParamLayout full_layout_;   // the unsharded layout (== layout_ when tp_ == 1)
};

}  // namespace ft::trainer
