// trainer.cpp: one optimizer step = K micro-batches, clip, AdamW; plus validation and checkpoints.
#include "ft/trainer/trainer.h"

#include <omp.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "fault_injection.h"
#include "ft/core/annotate.h"
#include "ft/core/env_info.h"
#include "ft/core/error.h"
#include "ft/trainer/checkpoint_io.h"
#include "ft/core/cpu_peak.h"
#include "ft/trainer/grad_sync.h"
#include "ft/trainer/h2d.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/pipeline.h"
#include "ft/trainer/tensor_parallel.h"
#include "ft/trainer/tokenizer_gpt2.h"
#include "ft/trainer/zero3.h"
#include "ft/trainer/zero_optimizer.h"

namespace ft::trainer {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

nlohmann::json TrainSummary::to_json() const {
  nlohmann::json j = {{"steps", steps_run},
                      {"mean_tokens_per_s", mean_tokens_per_s},
                      {"mean_step_ms", mean_step_ms},
                      {"mean_mfu", mean_mfu},
                      {"final_loss", final_loss},
                      {"mean_data_wait_ms", mean_data_wait_ms},
                      {"mean_data_preprocess_ms", mean_data_preprocess_ms},
                      {"data_wait_share", data_wait_share()},
                      {"mean_comm_ms", mean_comm_ms},
                      {"comm_exposed_share", comm_exposed_share()},
                      {"skipped_steps", skipped_steps},
                      {"mem_peak", memory.peak_allocated},
                      {"mem_at_start", mem_at_start},
                      {"mem_reserved_peak", memory.peak_reserved},
                      {"fragmentation", memory.fragmentation()},
                      {"reserved_unused_at_peak", reserved_unused_at_peak()},
                      {"slow_path_allocs", memory.slow_path_allocs},
                      {"alloc_retries", memory.cache_flush_retries},
                      {"ooms", memory.ooms},
                      {"activation_bytes", activations.saved_bytes},
                      {"activation_bytes_without_checkpointing", activations.no_checkpoint_bytes}};
  j["allocator"] = {{"allocated", memory.allocated},
                    {"reserved", memory.reserved},
                    {"peak_allocated", memory.peak_allocated},
                    {"peak_reserved", memory.peak_reserved},
                    {"segments", memory.segments},
                    {"largest_free_block", memory.largest_free_block},
                    {"num_allocs", memory.num_allocs},
                    {"slow_path_allocs", memory.slow_path_allocs},
                    {"cache_flush_retries", memory.cache_flush_retries},
                    {"ooms", memory.ooms},
                    {"segment_maps", memory.segment_maps},
                    {"segment_unmaps", memory.segment_unmaps},
                    {"fragmentation", memory.fragmentation()}};
  j["val_loss"] = val_loss >= 0 ? nlohmann::json(val_loss) : nlohmann::json(nullptr);
  return j;
}

Trainer::Trainer(TrainConfig config, std::unique_ptr<Communicator> comm,
                 std::shared_ptr<const data::Tokenizer> tokenizer)
    : config_(std::move(config)),
      groups_(ParallelGroups::make(comm ? std::move(comm) : make_local_communicator(),
                                   config_.parallel)),
      tokenizer_(tokenizer ? std::move(tokenizer)
                           : data::make_tokenizer(config_.tokenizer, config_.tokenizer_vocab,
                                                  config_.tokenizer_merges)) {
  config_.validate();
  // Pipeline stage: blocks of this stage, embedding on the first, head on the last.
  const int pp = config_.parallel.pp;
  if (pp > 1 && !config_.export_llmc.empty()) {
    throw ConfigError(
        "--export-llmc is not supported with --pp > 1 (each stage holds part of the model)");
  }
  check_tp_degree(config_.model, config_.parallel.tp);
  if (config_.parallel.zero > 0 && pp > 1) {
    throw ConfigError(fmt::format(
        "--zero {} with --pp {}: ZeRO is implemented for data and tensor parallelism, not yet "
        "over a pipeline (the tied wte gradient is summed between the first and last stage "
        "after the data-parallel reduction, whose shard boundaries differ between stages)",
        config_.parallel.zero, pp));
  }
  const bool cuda = config_.device == DeviceKind::kCuda;
  if (cuda) {
    // Checked before the device, so the refusal is the same with or without a GPU.
    if (groups_.world->world_size() > 1 || config_.parallel.zero > 0) {
      throw ConfigError(fmt::format(
          "--device cuda runs one process without ZeRO for now (got {} ranks, --zero {}; the "
          "NCCL data-parallel path is not wired into the trainer)",
          groups_.world->world_size(), config_.parallel.zero));
    }
    std::string why;
    if (cuda_devices(&why).empty()) throw ConfigError("--device cuda: no CUDA device: " + why);
  }
  const int threads = config_.threads > 0 ? config_.threads : omp_get_num_procs();
  omp_set_num_threads(threads);
  config_.threads = threads;
  if (config_.peak_gflops > 0) {
    peak_gflops_ = config_.peak_gflops;
    peak_source_ = "--peak-gflops";
  } else if (cuda) {
    peak_gflops_ = cuda_peak_gflops(config_.options.precision, config_.tf32, 0, &peak_source_);
  } else {
    // fp16 runs fp32 GEMMs (fp16-rounded operands), so only bf16 has its own unit.
    CpuPeak peak = measure_cpu_peak(config_.options.precision == Precision::kBf16, threads,
                                    collect_env_info(), default_peak_cache());
    peak_gflops_ = peak.gflops;
    peak_source_ = std::move(peak.source);
  }
  AllocatorOptions ao;
  // On --device cuda, --memory-limit and --allocator-caching are the device allocator's.
  ao.memory_limit = cuda ? 0 : config_.memory_limit;
  ao.caching = cuda || config_.allocator_caching;
  ao.huge_pages = config_.allocator_huge_pages;
  alloc_ = std::make_unique<CachingAllocator>(ao);

  data::DataOptions dopt;
  dopt.seq_len = config_.seq_len;
  dopt.vocab_limit = config_.model.vocab_size;
  split_ = data::open_data(config_.data, tokenizer_, dopt);
  if (!config_.val_data.empty()) {
    std::string how;
    split_.val = data::open_data_whole(config_.val_data, tokenizer_, dopt, &how);
    split_.description += "; validation: " + how;
  }
  const int max_token = std::max(split_.train->max_token_bound(), split_.val->max_token_bound());
  if (max_token >= config_.model.vocab_size) {
    throw ConfigError(fmt::format("data '{}' has token id {} but --vocab is {}", config_.data,
                                  max_token, config_.model.vocab_size));
  }
  const size_t need = static_cast<size_t>(config_.micro_batch) * config_.seq_len + 1;
  if (split_.train->approx_tokens() < need) {
    throw ConfigError(fmt::format("data '{}' has {} tokens but one batch of B={} x T={} needs {}",
                                  config_.data, split_.train->approx_tokens(), config_.micro_batch,
                                  config_.seq_len, need));
  }

  ModelSharding sharding =
      pp > 1 ? pipeline_sharding(config_.model.num_layers, pp, groups_.pp_stage) : ModelSharding{};
  sharding.tp = groups_.tp.get();  // size > 1: this rank holds 1/tp of the heads and MLP
  sharding.zero3 = config_.parallel.zero == 3;
  model_ = std::make_unique<GptModel>(config_.model, *alloc_, config_.options, sharding);
  // ZeRO-3 before the weights: every tensor loaded is kept as this rank's share.
  if (sharding.zero3) {
    zero3_ = std::make_unique<Zero3>(*model_, *groups_.dp, *alloc_, groups_.tp.get());
  }
  // Auto: bf16 logits in L3-sized chunks (48 MiB: less memory, no measured loss of
  // speed); fp32 logits whole up to 1 GiB, which measured 10-20% faster on config (B)
  // than 48 MiB chunks (docs/benchmarks.md).
  const int chunk_mb = config_.head_chunk_mb > 0
                           ? config_.head_chunk_mb
                           : (config_.options.precision == Precision::kBf16 ? 48 : 1024);
  model_->set_head_chunk_bytes(static_cast<size_t>(chunk_mb) << 20);
  model_->init_weights(config_.seed);
  rng_.reseed(config_.seed ^ 0x5eedull);
  const size_t n = model_->num_params();
  const ParallelConfig& par = config_.parallel;
  if ((groups_.dp->world_size() > 1 || par.zero > 0) && !zero3_) {
    GradSyncOptions so;
    so.overlap = par.overlap;
    so.reduce_scatter = par.zero == 2;
    so.bucket_bytes = static_cast<size_t>(par.bucket_mb * (1 << 20));
    sync_ = std::make_unique<GradSync>(*model_, *groups_.dp, *alloc_, so);
  }
  if (zero3_) {
    // ZeRO-3 holds its own shards of the parameters, gradients and AdamW moments.
  } else if (par.zero > 0) {
    zero_ = std::make_unique<ZeroOptimizer>(*model_, *groups_.dp, *alloc_, sync_->layout(),
                                            sync_->staging(), groups_.tp.get());
  } else {
    // QLoRA: AdamW state for the adapters only (the rest of the model is frozen).
    const size_t trained = model_->qlora() ? model_->lora_num_params() : n;
    adam_m_ = Buffer<float>(*alloc_, trained, "adam.m");
    adam_v_ = Buffer<float>(*alloc_, trained, "adam.v");
    std::memset(adam_m_.data(), 0, trained * sizeof(float));
    std::memset(adam_v_.data(), 0, trained * sizeof(float));
  }
  scaler_.scale = config_.options.precision == Precision::kFp16 ? config_.loss_scale : 1.0f;
  scaler_.growth_interval = config_.loss_scale_window;

  if (!config_.init_from.empty()) {
    LlmcModel m = read_llmc_model(config_.init_from);
    const GptConfig& a = m.config;
    const GptConfig& b = config_.model;
    if (a.num_layers != b.num_layers || a.num_heads != b.num_heads || a.channels != b.channels ||
        a.vocab_size != b.vocab_size || a.padded_vocab != b.padded_vocab ||
        a.max_seq_len < b.max_seq_len) {
      throw ConfigError(fmt::format("--init-from '{}' holds {} but the run is configured as {}",
                                    config_.init_from, a.describe(), b.describe()));
    }
    // wpe rows beyond our max_seq_len are dropped; the layout is otherwise identical
    // (a pipeline stage takes its slice; a tensor-parallel rank its shard of that).
    ParamLayout src = ParamLayout::make(a);
    for (int i = 0; i < kNumParamTensors; ++i) {
      model_->load_full_tensor(i, m.params.data() + src.offsets[i] + model_->stage_slice_offset(i));
    }
    model_->refresh_low_precision();
  }
  // Replicas of the same shard start identical (ranks of a DP group hold the same
  // stage and TP shard; other ranks hold different parts, so this is not over the world).
  if (groups_.dp->world_size() > 1) {
    groups_.dp->broadcast(model_->params(), n, 0);
    model_->refresh_low_precision();
  }
  if (pp > 1) pipeline_ = std::make_unique<Pipeline>(*model_, *groups_.pp, *alloc_);
  if (cuda) {
    CudaBackendOptions co;
    co.tf32 = config_.tf32;
    co.memory_limit = config_.memory_limit;
    co.caching = config_.allocator_caching;
    backend_ = make_cuda_backend(config_.model, config_.options, co);
    // The same initial weights as the CPU engine: the host model's.
    backend_->upload_state(model_->params(), adam_m_.data(), adam_v_.data());
    // Batches reach the device through the uploader (--h2d pinned: copy stream overlapping
    // the previous micro-batch's compute; pageable: synchronous copies).
    uploader_ = make_batch_uploader(h2d_options(config_, 0), backend_->compute_stream());
  } else {
    // The CPU engine behind the seam (the step below drives the CPU model, its gradient
    // sync, pipeline and ZeRO directly; the seam serves memory, description and evaluation).
    backend_ = make_cpu_backend(*model_, adam_m_.data(), adam_v_.data(), *alloc_);
  }
  if (!config_.resume_dir.empty()) {
    load(config_.resume_dir);
  } else {
    restart_loader(data::LoaderState{});
  }
}

Trainer::~Trainer() = default;

data::LoaderOptions Trainer::loader_options() const {
  data::LoaderOptions o;
  o.batch_size = config_.micro_batch;
  o.seq_len = config_.seq_len;
  o.workers = config_.loader_workers;
  o.prefetch = config_.prefetch;
  o.preprocess_cost = config_.preprocess_cost;
  o.shuffle = config_.shuffle;
  o.seed = config_.seed;
  // DP rank r of d takes micro-batches [r*K, r*K + K) of every d*K of the sequence: the global
  // batch of a step is what one process with --grad-accum d*K reads.
  const int d = groups_.dp->world_size(), K = config_.grad_accum;
  o.shard_period = d * K;
  o.shard_first = groups_.dp_rank * K;
  o.shard_count = K;
  return o;
}

void Trainer::restart_loader(const data::LoaderState& start) {
  batch_ = data::Batch();
  train_loader_.reset();  // joins the old workers first
  data::LoaderOptions o = loader_options();
  o.start = start;
  train_loader_ = std::make_unique<data::PrefetchLoader>(split_.train, o);
}

uint64_t Trainer::data_position() const { return train_loader_->state().batches; }
data::LoaderState Trainer::loader_state() const { return train_loader_->state(); }
std::vector<data::BatchTiming> Trainer::take_loader_timings() {
  return train_loader_->take_timings();
}

StepMetrics Trainer::step() {
  if (observer_) observer_->on_step_begin(step_);
  FT_RANGE("step", RangeKind::kStep, step_);
  const auto t0 = Clock::now();
  const int B = config_.micro_batch, T = config_.seq_len, K = config_.grad_accum;
  const float loss_scale = scaler_.scale;
  Communicator& dp = *groups_.dp;
  const float dloss = loss_scale / (static_cast<float>(B) * T * K * dp.world_size());
  // Fault injection (--straggle-rank/--straggle-work): extra real compute on one rank.
  run_straggle_work(config_.parallel, groups_.world->rank(), *model_, B, T);
  double loss_sum = 0, data_ms = 0, wait_ms = 0, pre_ms = 0, comm_ms = 0;
  auto next_batch = [&](int k) {
    FT_RANGE("data.next", RangeKind::kData, k);
    const auto td = Clock::now();
    if (!train_loader_->next(batch_)) throw Error("the training data loader stopped");
    data_ms += ms_since(td);
    wait_ms += batch_.timing.wait_ns / 1e6;
    pre_ms += batch_.timing.preprocess_ns / 1e6;
  };
  if (pipeline_) {
    // 1F1B over the K micro-batches; every stage reads them all (the same data position).
    loss_sum = pipeline_->run(K, B, T, dloss, [&](int k) {
      next_batch(k);
      return MicroBatch{batch_.inputs(), batch_.targets()};
    });
    pipeline_->sync_tied_grads();
    // Data parallel over pipeline replicas: the buckets go after the schedule (arming
    // earlier would send the first micro-batch's partial gradients).
    if (sync_) sync_->arm();
  } else if (backend_->device() == DeviceKind::kCuda) {
    for (int k = 0; k < K; ++k) {
      next_batch(k);
      if (uploader_) {
        const DeviceBatch d =
            uploader_->upload_from(batch_.inputs(), batch_.targets(), batch_.timing.index);
        backend_->use_device_tokens(d.inputs, d.targets);
      }
      // Only enqueued: the next micro-batch is fetched and uploaded while this one computes.
      backend_->forward_backward_async(batch_.inputs(), batch_.targets(), B, T, dloss, k == 0);
    }
    for (const double l : backend_->wait_losses()) loss_sum += l;
  } else {
    for (int k = 0; k < K; ++k) {
      next_batch(k);
      if (sync_ && k == K - 1) sync_->arm();  // only the last micro-batch communicates
      // QLoRA: one dropout-mask key per micro-batch of the run (a resumed run redraws the same).
      model_->set_lora_dropout_key(static_cast<uint64_t>(step_) * K + k);
      if (zero3_ && k == 0) zero3_->zero_grads();
      if (zero3_ && k == K - 1) zero3_->arm();  // the non-block gradients are reduced once
      loss_sum += model_->forward_backward(batch_.inputs(), batch_.targets(), B, T, dloss, k == 0);
    }
  }
  double loss = loss_sum / K;
  if (sync_) comm_ms += sync_->finish();
  if (zero3_) comm_ms += zero3_->take_comm_ms();  // gathers and reduce-scatters, all blocking
  if (dp.world_size() > 1) {
    const auto tc = Clock::now();
    dp.all_reduce_sum(&loss, 1);
    loss /= dp.world_size();
    comm_ms += ms_since(tc);
  }
  StepMetrics m;
  m.step = step_;
  m.loss = loss;
  m.lr = learning_rate(step_, config_.steps, config_.warmup, config_.lr, config_.min_lr);
  m.loss_scale = loss_scale;
  {
    FT_RANGE("optimizer", RangeKind::kOptimizer);
    // One pass: a non-finite sum of squares means an fp16 overflow (or a real blow-up).
    // Under ZeRO each rank holds the reduced gradients of its shard only: the global norm is
    // the shards' sums of squares summed over the DP group.
    const auto tc = Clock::now();
    const double sq = zero_ ? zero_->grad_sum_squares() : grad_sum_squares();
    if (zero_) comm_ms += ms_since(tc);
    const double norm = std::sqrt(sq) / loss_scale;
    m.grad_norm = norm;
    bool skip = false;
    if (config_.options.precision == Precision::kFp16) {
      skip = scaler_.update(!std::isfinite(norm));
    }
    m.skipped = skip;
    if (!skip) {
      float clip_factor = 1.0f;
      if (config_.clip > 0 && std::isfinite(norm) && norm > config_.clip) {
        clip_factor = static_cast<float>(config_.clip / (norm + 1e-6));
      }
      comm_ms += apply_update(m.lr, clip_factor / loss_scale);
    }
  }
  m.data_ms = data_ms;
  m.data_wait_ms = wait_ms;
  m.data_preprocess_ms = pre_ms;
  if (pipeline_) {
    m.pp_busy_ms = pipeline_->stats().busy_ms;
    m.pp_wait_ms = pipeline_->stats().wait_ms;
  }
  m.comm_ms = comm_ms;
  m.step_ms = ms_since(t0);
  const double tokens = static_cast<double>(B) * T * K * dp.world_size();
  m.tokens_per_s = tokens / (m.step_ms / 1000.0);
  m.mfu = peak_gflops_ > 0 ? flops_per_token(config_.model, T, !model_->qlora()) * m.tokens_per_s /
                                  (peak_gflops_ * 1e9) / groups_.world->world_size()
                            : 0.0;
  const AllocatorStats s = backend_->memory_stats();
  m.mem_allocated = s.allocated;
  m.mem_reserved = s.reserved;
  m.mem_peak = s.peak_allocated;
  ++step_;
  if (observer_) observer_->on_step_end(m);
  return m;
}

double Trainer::grad_sum_squares() {
  if (backend_->device() == DeviceKind::kCuda) return backend_->grad_sum_squares();
  if (model_->qlora()) return ops::sum_squares(model_->lora_grads(), model_->lora_num_params());
  if (zero3_) return zero3_->grad_sum_squares();
  if (model_->tp_size() == 1 && !pipeline_) {
    return ops::sum_squares(model_->grads(), model_->num_params());
  }
  // Tensor parallel: the global norm sums the shards of the split tensors over the TP
  // group and counts the replicated tensors (identical on every TP rank) once.
  const GptModel::SquareSums s = model_->grad_square_sums();
  double sharded = s.sharded;
  if (model_->tp_size() > 1) groups_.tp->all_reduce_sum(&sharded, 1);
  double sq = sharded + s.replicated;
  if (pipeline_) {
    // Pipeline: the stages' sums add up; the tied wte, held by the first and the last
    // stage, counts once (on the first).
    const int stages = groups_.pp->world_size();
    if (stages > 1 && groups_.pp_stage == stages - 1) {
      sq -= ops::sum_squares(model_->grad(kWte), model_->layout().sizes[kWte]);
    }
    groups_.pp->all_reduce_sum(&sq, 1);
  }
  return sq;
}

double Trainer::apply_update(float lr, float grad_scale) {
  ++adam_t_;
  if (zero3_) {
    const AdamWSettings s{config_.beta1, config_.beta2, config_.eps, config_.weight_decay};
    zero3_->update(lr, s, grad_scale, adam_t_);
    return zero3_->take_comm_ms();
  }
  if (zero_) {
    const AdamWSettings s{config_.beta1, config_.beta2, config_.eps, config_.weight_decay};
    return zero_->update(lr, s, grad_scale, adam_t_);
  }
  if (backend_->device() == DeviceKind::kCuda) {
    const AdamWSettings s{config_.beta1, config_.beta2, config_.eps, config_.weight_decay};
    backend_->adamw_step(s, lr, grad_scale, adam_t_);
    return 0;
  }
  // Chunks of 1 MiB of parameters: the low-precision copy of each chunk is made
  // right after its update, while it is still in cache.
  constexpr size_t kChunk = 256 * 1024;
  if (model_->qlora()) {  // the adapters alone, all of them matrices (decayed)
    for (size_t off = 0, end = model_->lora_num_params(); off < end; off += kChunk) {
      const size_t n = std::min(kChunk, end - off);
      ops::adamw_update(model_->lora_params() + off, model_->lora_grads() + off,
                        adam_m_.data() + off, adam_v_.data() + off, n, lr, config_.beta1,
                        config_.beta2, config_.eps, config_.weight_decay, grad_scale, adam_t_);
    }
    return 0;
  }
  const ParamLayout& L = model_->layout();
  for (int i = 0; i < kNumParamTensors; ++i) {
    const float wd = ParamLayout::decays(i) ? config_.weight_decay : 0.0f;
    for (size_t off = L.offsets[i], end = off + L.sizes[i]; off < end; off += kChunk) {
      const size_t n = std::min(kChunk, end - off);
      ops::adamw_update(model_->params() + off, model_->grads() + off, adam_m_.data() + off,
                        adam_v_.data() + off, n, lr, config_.beta1, config_.beta2, config_.eps,
                        wd, grad_scale, adam_t_);
      model_->refresh_low_precision(off, n);
    }
  }
  return 0;
}

void Trainer::sync_host_state() {
  backend_->download_state(model_->params(), adam_m_.data(), adam_v_.data());
}

double Trainer::evaluate() {
  FT_RANGE("validate", RangeKind::kCompute);
  const int B = config_.micro_batch, T = config_.seq_len;
  if (config_.val_batches == 0 || split_.val->num_chunks() == 0) return -1;
  data::LoaderOptions o = loader_options();
  o.shuffle = false;  // the same batches every time: the start of the validation data
  o.finite = true;
  o.prefetch = std::min(o.prefetch, config_.val_batches);
  o.timing_capacity = 0;
  // DP ranks share the val_batches batches (batch i on rank i % d) and sum the losses.
  Communicator& dp = *groups_.dp;
  const int d = dp.world_size();
  o.shard_period = d;
  o.shard_first = groups_.dp_rank;
  o.shard_count = 1;
  data::PrefetchLoader loader(split_.val, o);
  data::Batch b;
  if (pipeline_) {
    // Every pipeline replica evaluates the same batches: the result is the same on all ranks.
    // This replica's share of the val_batches batches: batch i on replica i % d.
    const int mine = (config_.val_batches - groups_.dp_rank + d - 1) / d;
    int nb = 0;
    const double v = pipeline_->evaluate(B, T, [&](MicroBatch* mb) {
      if (nb >= mine || !loader.next(b)) return false;
      ++nb;
      *mb = MicroBatch{b.inputs(), b.targets()};
      return true;
    });
    if (d == 1) return v;
    double acc[2] = {nb > 0 ? v * nb : 0.0, static_cast<double>(nb)};  // loss sum, batches
    dp.all_reduce_sum(acc, 2);
    return acc[1] > 0 ? acc[0] / acc[1] : -1;
  }
  double acc[2] = {0, 0};  // loss sum, batches
  if (zero3_ && d > 1) {
    // Every forward gathers collectively: the ranks agree each round whether any has a batch,
    // and a rank without one runs an uncounted forward (of zero tokens) alongside.
    const std::vector<int32_t> zeros(static_cast<size_t>(B) * T, 0);
    for (int i = groups_.dp_rank;; i += d) {
      const bool have = i < config_.val_batches && loader.next(b);
      double any = have ? 1 : 0;
      dp.all_reduce_max(&any, 1);
      if (any == 0) break;
      const double l = have ? backend_->forward_loss(b.inputs(), b.targets(), B, T)
                            : backend_->forward_loss(zeros.data(), zeros.data(), B, T);
      if (have) {
        acc[0] += l;
        acc[1] += 1;
      }
    }
  } else {
    for (int i = groups_.dp_rank; i < config_.val_batches && loader.next(b); i += d) {
      acc[0] += backend_->forward_loss(b.inputs(), b.targets(), B, T);
      acc[1] += 1;
    }
  }
  if (d > 1) dp.all_reduce_sum(acc, 2);
  return acc[1] > 0 ? acc[0] / acc[1] : -1;
}

}  // namespace ft::trainer
