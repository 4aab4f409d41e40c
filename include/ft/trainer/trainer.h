// trainer.h: the training loop: micro-batches, gradient accumulation, clipping, AdamW, loss scaling, checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/allocator.h"
#include "ft/core/rng.h"
#include "ft/core/step_observer.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/data.h"
#include "ft/trainer/loader.h"
#include "ft/trainer/model.h"
#include "ft/trainer/model_backend.h"
#include "ft/trainer/parallel.h"
#include "ft/trainer/schedule.h"
#include "ft/trainer/train_config.h"

namespace ft::trainer {

class BatchUploader;  // ft/trainer/h2d.h
class Pipeline;

using ft::StepMetrics;  // ft/core/step_observer.h
using ft::StepObserver;

struct TrainSummary {
  int steps_run = 0;
  double mean_tokens_per_s = 0;  // over steps after the excluded warm-up
  double mean_step_ms = 0;
  double mean_mfu = 0;
  double final_loss = 0;
  double mean_data_wait_ms = 0;        // loader wait per step (same steps as the means above)
  double mean_data_preprocess_ms = 0;  // loader preprocessing per step
  double data_wait_share() const { return mean_step_ms > 0 ? mean_data_wait_ms / mean_step_ms : 0; }
  double mean_comm_ms = 0;  // StepMetrics::comm_ms per step (same steps as the means above)
  double comm_exposed_share() const { return mean_step_ms > 0 ? mean_comm_ms / mean_step_ms : 0; }
  double val_loss = -1;          // < 0 when not measured
  uint64_t skipped_steps = 0;
  AllocatorStats memory;
  // Bytes the engine's allocator held once the trainer was built, before step 0: the model
  // states (parameters, gradients, optimizer state; NF4 and adapters under --qlora) plus the
  // loader's staged batches.
  size_t mem_at_start = 0;
  ActivationMemory activations;
  // 1 - peak allocated / peak reserved: memory the allocator held but never used.
  double reserved_unused_at_peak() const {
    return memory.peak_reserved ? 1.0 - static_cast<double>(memory.peak_allocated) / memory.peak_reserved : 0.0;
  }
  nlohmann::json to_json() const;
};

class GradSync;
class ZeroOptimizer;
class Zero3;

class Trainer {
 public:
  // Loads the data and builds the model (initialised, or restored from
  // config.resume_dir / config.init_from). Throws ft::Error on bad input.
  // `comm` is the world communicator (null: one process); it is split into the
  // DP/TP/PP groups of config.parallel.
  // `tokenizer` encodes document data (null: the byte tokenizer).
  explicit Trainer(TrainConfig config, std::unique_ptr<Communicator> comm = nullptr,
                   std::shared_ptr<const data::Tokenizer> tokenizer = nullptr);
  ~Trainer();

  // Runs one optimizer step (grad_accum micro-batches).
  StepMetrics step();
  // Mean validation loss over config.val_batches micro-batches from the start of the split.
  double evaluate();
  // Writes DIR/checkpoint.ft atomically. With several ranks (collective: every rank calls it):
  // DIR/rank{r}/checkpoint.ft per rank, then, once all are written, DIR/parallel.json (the
  // layout and step) from rank 0, which marks the checkpoint complete.
  void save(const std::string& dir);
  // Restores model, optimizer (this rank's shard under ZeRO), loss scaler, data position and
  // RNG from DIR; a multi-rank checkpoint must match this run's layout (ConfigError otherwise).
  void load(const std::string& dir);
  // --qlora: writes the merged model (NF4 base dequantized + (alpha / r) B A) to DIR as an llm.c
  // model.bin and an ft checkpoint.ft a plain run can --resume (fresh AdamW state, step 0).
  void write_merged(const std::string& dir) const;

  int next_step() const { return step_; }
  bool done() const { return step_ >= config_.steps; }
  const TrainConfig& config() const { return config_; }
  // The host model: the engine itself on --device cpu, the host mirror of the parameters
  // (current after sync_host_state()) on --device cuda.
  GptModel& model() { return *model_; }
  // The engine that runs the model (CPU or CUDA).
  ModelBackend& backend() { return *backend_; }
  // Copies the engine's parameters and AdamW moments into the host mirror (no-op on CPU).
  void sync_host_state();
  // The host caching allocator (model, loader buffers on the CPU engine).
  CachingAllocator& allocator() { return *alloc_; }
  // The engine's memory: the host allocator on CPU, the device allocator on CUDA.
  AllocatorStats memory_stats() const { return backend_->memory_stats(); }
  const data::DataSplit& data_split() const { return split_; }
  double peak_gflops() const { return peak_gflops_; }
  std::string peak_source() const { return peak_source_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  const ParallelGroups& groups() const { return groups_; }
  // The pipeline of this stage (--pp > 1), else null.
  Pipeline* pipeline() { return pipeline_.get(); }
  const GradSync* grad_sync() const { return sync_.get(); }  // null on one process without ZeRO
  // Installs (or, with nullptr, removes) the step observer; not owned.
  void set_observer(StepObserver* observer) { observer_ = observer; }
  uint64_t data_position() const;  // batch sequence position after this rank's last batch
  data::LoaderState loader_state() const;
  // Per-batch loader timings since the last call (for the profiler).
  std::vector<data::BatchTiming> take_loader_timings();

 private:
  // Returns the milliseconds spent in communication (ZeRO's parameter all-gather).
  double apply_update(float lr, float grad_scale);
  // Squared L2 norm of the whole model's gradient (collective over TP when tp > 1, and
  // over the pipeline stages when pp > 1).
  double grad_sum_squares();
  void restart_loader(const data::LoaderState& start);
  data::LoaderOptions loader_options() const;

  TrainConfig config_;
  ParallelGroups groups_;
  std::unique_ptr<CachingAllocator> alloc_;
  std::shared_ptr<const data::Tokenizer> tokenizer_;
  data::DataSplit split_;
  std::unique_ptr<data::PrefetchLoader> train_loader_;
  data::Batch batch_;  // the micro-batch in use (its staging buffer)
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<Pipeline> pipeline_;  // --pp > 1
  Buffer<float> adam_m_, adam_v_;  // (num_params); unused under ZeRO
  std::unique_ptr<GradSync> sync_;        // data parallelism (dp > 1) or ZeRO
  std::unique_ptr<ZeroOptimizer> zero_;   // ZeRO-1/2: AdamW state of this rank's shard
  std::unique_ptr<Zero3> zero3_;          // ZeRO-3: parameter, gradient and AdamW shards
  std::unique_ptr<ModelBackend> backend_;  // --device cuda: the device model; cpu: model_
  std::unique_ptr<BatchUploader> uploader_;  // --device cuda: batches to the device (--h2d)
  LossScaler scaler_;
  Rng rng_;
  int step_ = 0;
  int adam_t_ = 0;
  double peak_gflops_ = 0;
  std::string peak_source_;
  StepObserver* observer_ = nullptr;
};

}  // namespace ft::trainer
