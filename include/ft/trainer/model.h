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
#include "ft/trainer/lora.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/precision.h"

namespace ft::trainer {

enum class Checkpointing { kNone, kBlock };
enum class AttentionImpl { kFlash, kMaterialized };

Checkpointing parse_checkpointing(const std::string& s);  // "none" | "block"
const char* checkpointing_name(Checkpointing c);
AttentionImpl parse_attention(const std::string& s);  // "flash" | "naive"
const char* attention_name(AttentionImpl a);
// What `--attention auto` (the default) picks: materialised attention when its saved (B, NH, T, T)
// probabilities are at most a quarter of a block's other saved activations (~16 B T C floats),
// i.e. T <= 4 * head_size; the tiled kernel otherwise. Materialised is 3-10% faster per kernel
// where it fits (docs/benchmarks.md, "Attention kernels"), since the tiled backward recomputes
// the probabilities.
AttentionImpl choose_attention(int seq_len, int head_size);

struct ModelOptions {
  Precision precision = Precision::kFp32;
  Checkpointing checkpointing = Checkpointing::kNone;
  AttentionImpl attention = AttentionImpl::kFlash;
  LoraConfig lora;  // rank > 0: QLoRA (NF4 block linears, frozen; only adapters train)
};

// Bytes of saved activations for one micro-batch, by what keeps them.
struct ActivationMemory {
  size_t saved_bytes = 0;        // kept from forward to backward
  size_t recompute_bytes = 0;    // per-block working set re-materialised in backward
  size_t no_checkpoint_bytes = 0;  // what checkpointing=none would keep (for the saving)
};

class Communicator;

// ZeRO-3 (ft/trainer/zero3.h): where the blocks' parameters and gradients live while a block is
// in use. The model calls acquire before a block's forward (and its backward), release after.
class BlockParams {
 public:
  virtual ~BlockParams() = default;
  virtual void acquire(int layer, bool backward) = 0;
  virtual void release(int layer) = 0;
  // Block tensor `index`'s slice for `layer` (valid between acquire and release).
  virtual const float* param(int index, int layer) const = 0;
  virtual float* grad(int index, int layer) = 0;  // written (not accumulated) by backward
  // Its low-precision copy (bf16 bits or fp16-rounded floats, as GptModel's shadow), or null
  // in fp32.
  virtual const void* param_lp(int index, int layer) const = 0;
  // Tensor `index` as this TP rank holds it (the whole tensor without TP) for this rank to
  // keep its share of.
  virtual void load_full_tensor(int index, const float* local) = 0;
  // This TP rank's tensors, whole (tp_shard_layout order); collective over the DP group.
  virtual std::vector<float> gather_full_params() = 0;
};

// Which part of the model this rank holds, for tensor and pipeline parallelism.
// The default is the whole model on one rank.
struct ModelSharding {
  Communicator* tp = nullptr;  // tensor-parallel group (null or size 1: none); not owned
  int first_layer = 0;         // pipeline stage: blocks [first_layer, first_layer + num_layers)
  int num_layers = -1;         // -1: all blocks
  bool has_embedding = true;   // first stage: wte/wpe lookup
  bool has_head = true;        // last stage: final LayerNorm, LM head and loss
  // ZeRO-3: the block tensors are not held (layout() gives them size 0): a BlockParams
  // (set_block_params) provides them. Whole model (no pipeline stage).
  bool zero3 = false;
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
  // Over the flat gradient range [begin, end) (default: all of it); a range may span tensors.
  SquareSums grad_square_sums(size_t begin = 0, size_t end = SIZE_MAX) const;

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
  // `layer` is the local block index (0..local_layers()-1), as in layout().
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }

  // ZeRO-3 (ModelSharding::zero3): the provider of the block tensors; not owned.
  void set_block_params(BlockParams* b) { blocks_ = b; }

  // ---- QLoRA (model_lora.cpp): options().lora.enabled() ----------------------------
  // The four block linears of every layer are held in NF4 (frozen, never whole in fp32); the
  // other tensors (embeddings, LayerNorms, biases) are frozen fp32 in params(), whose layout()
  // gives the linears size 0, and grads() is empty. Only the adapters train:
  // lora_params()/lora_grads() hold, per layer and per targeted linear in ParamIndex order,
  // A (r, IC) then B (OC, r). Whole model, one rank, fp32 only (ConfigError otherwise).
  bool qlora() const { return lora_ != nullptr; }
  size_t lora_num_params() const;
  float* lora_params();
  float* lora_grads();
  const float* lora_grads() const;
  // Keys the adapters' dropout masks: the same key draws the same masks, so a recomputed block
  // sees its forward's masks. The trainer sets one key per micro-batch.
  void set_lora_dropout_key(uint64_t key);
  // Bytes the NF4 weights hold (codes, absmax bytes, second-level scales).
  size_t nf4_bytes() const;

  // ---- Pipeline stages (model_stage.cpp) ----------------------------------
  // A stage holds blocks [first_layer(), first_layer() + local_layers()) of the
  // config's num_layers; layout() has the 16 tensors with only the local blocks
  // and size 0 for the tensors it lacks (wte: neither embedding nor head; wpe:
  // no embedding; lnf: no head). forward_backward and forward_loss need the whole model.
  int first_layer() const { return sharding_.first_layer; }
  int local_layers() const { return sharding_.num_layers; }
  bool whole_model() const {
    return sharding_.has_embedding && sharding_.has_head && local_layers() == config_.num_layers;
  }
  // Element offset of this stage's part within the whole model's tensor `index`.
  size_t stage_slice_offset(int index) const;
  // Sizes `slots` micro-batch workspaces for (B, T); kept across steps.
  void stage_prepare(int slots, int B, int T);
  // (B, T, C) buffer to receive slot's input activation into (stages without the embedding).
  float* stage_input(int slot);
  // Forward of one micro-batch in `slot`: from `tokens` (B, T) on the stage with the
  // embedding, else from stage_input(slot). The last stage keeps a copy of `targets`
  // for the loss, which it computes in stage_backward. Both may be null where unused.
  void stage_forward(int slot, const int32_t* tokens, const int32_t* targets);
  // (B, T, C) output of the slot's forward: the next stage's input (not on the last stage).
  const float* stage_output(int slot) const;
  // (B, T, C) gradient buffer: before stage_backward it must hold the gradient of the
  // stage's output (not on the last stage); after it, the gradient of the stage's input.
  float* stage_grad();
  // Backward of the slot's micro-batch (frees the slot). Gradients scale and accumulate
  // as in forward_backward. Calls the grad-ready hook after each block and -1 at the
  // end. Returns the mean loss over B*T on the last stage, 0 elsewhere.
  double stage_backward(int slot, float dloss_per_token, bool first_micro);
  // Last stage, evaluation: the slot's mean loss without backward (frees the slot).
  double stage_loss(int slot);
  // Frees the slot without backward (evaluation on stages before the last).
  void stage_release(int slot);

 private:
  struct LayerActs;
  struct Workspace;
  struct StageSlot;
  struct StageState;
  void layer_forward(int l, const float* x, float* x_out, LayerActs& a, int B, int T);
  void layer_backward(int l, const float* x, float* dres, LayerActs& a, int B, int T,
                      bool first_micro);
  const void* lp_weight(int index, int layer);
  // Block tensor `index`'s slice for layer l, and its gradient (null when frozen under QLoRA):
  // in the flat buffers, or under ZeRO-3 in the gathered block.
  const float* bparam(int index, int l);
  float* bgrad(int index, int l);
  // Block linear `index` of layer l: out (N,OC) = inp (N,IC) W^T + bias, through the GEMM or,
  // under QLoRA, the NF4 weight and its adapter. Backward writes dinp (if non-null) and, for a
  // trained weight, dweight/dbias (null under QLoRA: frozen; the adapter's gradients instead).
  void linear_forward(int index, int l, float* out, const float* inp, const float* bias, int N,
                      int IC, int OC);
  void linear_backward(int index, int l, float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, int N, int IC, int OC, bool acc);
  struct LoraState;
  void setup_lora();
  void lora_load(int index, const float* full);
  void lora_init(uint64_t seed);
  std::vector<float> lora_merged_params() const;
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
  std::unique_ptr<StageState> stage_;  // pipeline-stage workspaces (model_stage.cpp)
  std::unique_ptr<LoraState> lora_;    // QLoRA: NF4 weights and adapters (model_lora.cpp)
  BlockParams* blocks_ = nullptr;      // ZeRO-3: the gathered blocks
  StageSlot& stage_slot(int slot, const char* what);
  int tp_ = 1, tp_rank_ = 0;  // tensor-parallel degree and this rank's place
  ParamLayout full_layout_;   // the unsharded layout (== layout_ when tp_ == 1)
};

// The sharding with num_layers resolved (-1: the blocks from first_layer on), after
// checking the layer range against the model (ConfigError naming both otherwise).
ModelSharding resolve_stage(const GptConfig& config, ModelSharding sharding);
// The flat layout of a pipeline stage: the whole model's 16 tensors with only the
// stage's blocks, and size 0 for the tensors the stage lacks.
ParamLayout make_stage_layout(const GptConfig& config, const ModelSharding& resolved);

}  // namespace ft::trainer
