// trainer.cpp: one optimizer step = K micro-batches, clip, AdamW; plus validation and checkpoints.
#include "ft/trainer/trainer.h"

#include <omp.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "ft/core/annotate.h"
#include "ft/core/env_info.h"
#include "ft/core/error.h"
#include "ft/trainer/checkpoint_io.h"
#include "ft/trainer/h2d.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/tokenizer_gpt2.h"

namespace ft::trainer {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
constexpr const char* kCheckpointFile = "checkpoint.ft";
constexpr int kCheckpointVersion = 1;
}  // namespace

namespace {
// Whether oneDNN's bf16 GEMMs run on AMX here (read from /proc/cpuinfo once).
bool cpu_has_amx_bf16() {
  static const bool amx = collect_env_info().amx_bf16;
  return amx;
}
}  // namespace

double default_peak_gflops(Precision p, int threads) {
  // Per-core peaks measured with bench/fma_peak on this machine kind (see
  // docs/benchmarks.md): AVX-512 FMA for fp32 (and for fp16, which runs fp32
  // GEMMs on fp16-rounded operands); for bf16 the AMX tile peak where the CPU
  // has AMX (oneDNN dispatches bf16 GEMMs to it), else VDPBF16PS.
  constexpr double kFp32PerCore = 178.0;
  constexpr double kAmxBf16PerCore = 2300.0;
  constexpr double kDpBf16PerCore = 87.0;
  if (p != Precision::kBf16) return kFp32PerCore * threads;
  return (cpu_has_amx_bf16() ? kAmxBf16PerCore : kDpBf16PerCore) * threads;
}

nlohmann::json StepMetrics::to_json() const {
  return {{"step", step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", grad_norm},
          {"step_ms", step_ms},
          {"data_ms", data_ms},
          {"data_wait_ms", data_wait_ms},
          {"data_preprocess_ms", data_preprocess_ms},
          {"tokens_per_s", tokens_per_s},
          {"mfu", mfu},
          {"skipped", skipped},
          {"loss_scale", loss_scale},
          {"mem_allocated", mem_allocated},
          {"mem_reserved", mem_reserved},
          {"mem_peak", mem_peak}};
}

nlohmann::json TrainSummary::to_json() const {
  nlohmann::json j = {{"steps", steps_run},
                      {"mean_tokens_per_s", mean_tokens_per_s},
                      {"mean_step_ms", mean_step_ms},
                      {"mean_mfu", mean_mfu},
                      {"final_loss", final_loss},
                      {"mean_data_wait_ms", mean_data_wait_ms},
                      {"mean_data_preprocess_ms", mean_data_preprocess_ms},
                      {"data_wait_share", data_wait_share()},
                      {"skipped_steps", skipped_steps},
                      {"mem_peak", memory.peak_allocated},
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
  if (config_.parallel.tp > 1 || config_.parallel.pp > 1 || config_.parallel.zero > 0) {
    throw ConfigError("tensor parallel, pipeline parallel and ZeRO are not implemented yet");
  }
  const bool cuda = config_.device == DeviceKind::kCuda;
  if (cuda) {
    std::string why;
    if (cuda_devices(&why).empty()) throw ConfigError("--device cuda: no CUDA device: " + why);
    if (groups_.world->world_size() > 1) {
      throw ConfigError("--device cuda runs one process for now (the NCCL data-parallel path is "
                        "not wired into the trainer)");
    }
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
    peak_gflops_ = default_peak_gflops(config_.options.precision, threads);
    const bool amx = cpu_has_amx_bf16();
    peak_source_ = fmt::format("{} peak x {} threads, measured by bench/fma_peak",
                               config_.options.precision == Precision::kBf16
                                   ? (amx ? "AMX bf16 tile" : "AVX512-BF16 dot-product")
                                   : "AVX-512 fp32 FMA",
                               threads);
  }
  AllocatorOptions ao;
  // On --device cuda, --memory-limit and --allocator-caching are the device allocator's.
  ao.memory_limit = cuda ? 0 : config_.memory_limit;
  ao.caching = cuda || config_.allocator_caching;
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

  model_ = std::make_unique<GptModel>(config_.model, *alloc_, config_.options);
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
  adam_m_ = Buffer<float>(*alloc_, n, "adam.m");
  adam_v_ = Buffer<float>(*alloc_, n, "adam.v");
  std::memset(adam_m_.data(), 0, n * sizeof(float));
  std::memset(adam_v_.data(), 0, n * sizeof(float));
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
    // wpe rows beyond our max_seq_len are dropped; the layout is otherwise identical.
    ParamLayout src = ParamLayout::make(a);
    const ParamLayout& dst = model_->layout();
    for (int i = 0; i < kNumParamTensors; ++i) {
      std::memcpy(model_->params() + dst.offsets[i], m.params.data() + src.offsets[i],
                  dst.sizes[i] * sizeof(float));
    }
    model_->refresh_low_precision();
  }
  if (groups_.world->world_size() > 1) {
    groups_.world->broadcast(model_->params(), n, 0);
    model_->refresh_low_precision();
  }
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
  double loss_sum = 0, data_ms = 0, wait_ms = 0, pre_ms = 0;
  for (int k = 0; k < K; ++k) {
    {
      FT_RANGE("data.next", RangeKind::kData, k);
      const auto td = Clock::now();
      if (!train_loader_->next(batch_)) throw Error("the training data loader stopped");
      data_ms += ms_since(td);
      wait_ms += batch_.timing.wait_ns / 1e6;
      pre_ms += batch_.timing.preprocess_ns / 1e6;
    }
    if (uploader_) {
      const DeviceBatch d =
          uploader_->upload_from(batch_.inputs(), batch_.targets(), batch_.timing.index);
      backend_->use_device_tokens(d.inputs, d.targets);
    }
    // Device engines only enqueue here: the next micro-batch is fetched and uploaded while
    // this one computes.
    backend_->forward_backward_async(batch_.inputs(), batch_.targets(), B, T, dloss, k == 0);
  }
  for (const double l : backend_->wait_losses()) loss_sum += l;
  double loss = loss_sum / K;
  const size_t n = model_->num_params();
  if (dp.world_size() > 1) {
    dp.all_reduce_sum(model_->grads(), n);
    dp.all_reduce_sum(&loss, 1);
    loss /= dp.world_size();
  }
  StepMetrics m;
  m.step = step_;
  m.loss = loss;
  m.lr = learning_rate(step_, config_.steps, config_.warmup, config_.lr, config_.min_lr);
  m.loss_scale = loss_scale;
  {
    FT_RANGE("optimizer", RangeKind::kOptimizer);
    // One pass: a non-finite sum of squares means an fp16 overflow (or a real blow-up).
    const double sq = backend_->grad_sum_squares();
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
      apply_update(m.lr, clip_factor / loss_scale);
    }
  }
  m.data_ms = data_ms;
  m.data_wait_ms = wait_ms;
  m.data_preprocess_ms = pre_ms;
  m.step_ms = ms_since(t0);
  const double tokens = static_cast<double>(B) * T * K * dp.world_size();
  m.tokens_per_s = tokens / (m.step_ms / 1000.0);
  m.mfu = peak_gflops_ > 0 ? flops_per_token(config_.model, T) * m.tokens_per_s /
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

void Trainer::apply_update(float lr, float grad_scale) {
  ++adam_t_;
  AdamWSettings s;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.weight_decay = config_.weight_decay;
  backend_->adamw_step(s, lr, grad_scale, adam_t_);
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
  data::PrefetchLoader loader(split_.val, o);
  data::Batch b;
  double sum = 0;
  int nb = 0;
  while (nb < config_.val_batches && loader.next(b)) {
    sum += backend_->forward_loss(b.inputs(), b.targets(), B, T);
    ++nb;
  }
  return nb > 0 ? sum / nb : -1;
}

void Trainer::save(const std::string& dir) {
  FT_RANGE("checkpoint.save", RangeKind::kHost);
  sync_host_state();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create checkpoint directory '{}': {}", dir, ec.message()));
  const auto rs = rng_.state();
  nlohmann::json meta = {
      {"format", "ft-checkpoint"},
      {"version", kCheckpointVersion},
      {"next_step", step_},
      {"adam_t", adam_t_},
      {"config", config_.to_json()},
      {"loss_scale", scaler_.scale},
      {"loss_scale_clean_steps", scaler_.clean_steps},
      {"loss_scale_overflows", scaler_.overflows},
      {"data_position", train_loader_->state().batches},
      {"data_epoch", train_loader_->epoch()},
      {"data_chunk", train_loader_->state().chunk},
      {"data_row", train_loader_->state().row},
      {"rng", {rs[0], rs[1], rs[2], rs[3]}},
      {"num_params", model_->num_params()}};
  CheckpointWriter w;
  w.set_meta(meta);
  const size_t bytes = model_->num_params() * sizeof(float);
  w.add_section("params", model_->params(), bytes);
  w.add_section("adam_m", adam_m_.data(), bytes);
  w.add_section("adam_v", adam_v_.data(), bytes);
  w.commit(std::filesystem::path(dir) / kCheckpointFile);
}

void Trainer::load(const std::string& dir) {
  const auto path = std::filesystem::path(dir) / kCheckpointFile;
  if (!std::filesystem::exists(path)) {
    throw IoError(fmt::format("no checkpoint at '{}'", path.string()));
  }
  CheckpointReader r(path);
  const nlohmann::json& meta = r.meta();
  try {
    if (meta.at("format") != "ft-checkpoint" || meta.at("version").get<int>() != kCheckpointVersion) {
      throw FormatError(fmt::format("'{}' is not a version-{} ft checkpoint", path.string(),
                                    kCheckpointVersion));
    }
    const nlohmann::json& c = meta.at("config");
    const GptConfig& g = config_.model;
    if (c.at("layers") != g.num_layers || c.at("heads") != g.num_heads ||
        c.at("channels") != g.channels || c.at("vocab") != g.vocab_size ||
        c.at("padded_vocab") != g.padded_vocab || c.at("max_seq_len") != g.max_seq_len) {
      throw ConfigError(fmt::format(
          "checkpoint '{}' holds a model L{} NH{} C{} V{} Tmax{}, but the run is configured as {}",
          path.string(), c.at("layers").get<int>(), c.at("heads").get<int>(),
          c.at("channels").get<int>(), c.at("vocab").get<int>(), c.at("max_seq_len").get<int>(),
          g.describe()));
    }
    if (meta.at("num_params").get<size_t>() != model_->num_params()) {
      throw FormatError(fmt::format("checkpoint '{}' has {} parameters, expected {}", path.string(),
                                    meta.at("num_params").get<size_t>(), model_->num_params()));
    }
    const size_t bytes = model_->num_params() * sizeof(float);
    r.read("params", model_->params(), bytes);
    r.read("adam_m", adam_m_.data(), bytes);
    r.read("adam_v", adam_v_.data(), bytes);
    step_ = meta.at("next_step").get<int>();
    adam_t_ = meta.at("adam_t").get<int>();
    scaler_.scale = meta.at("loss_scale").get<float>();
    scaler_.clean_steps = meta.at("loss_scale_clean_steps").get<int>();
    scaler_.overflows = meta.at("loss_scale_overflows").get<uint64_t>();
    if (!meta.contains("data_chunk")) {
      throw FormatError(fmt::format(
          "checkpoint '{}' predates the chunked data loader (no data_chunk): its data position "
          "cannot be restored",
          path.string()));
    }
    restart_loader(data::LoaderState{meta.at("data_chunk").get<uint64_t>(),
                                     meta.at("data_row").get<uint64_t>(),
                                     meta.at("data_position").get<uint64_t>()});
    const auto& rs = meta.at("rng");
    rng_.set_state({rs.at(0).get<uint64_t>(), rs.at(1).get<uint64_t>(), rs.at(2).get<uint64_t>(),
                    rs.at(3).get<uint64_t>()});
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("checkpoint '{}' metadata is malformed: {}", path.string(), e.what()));
  }
  model_->refresh_low_precision();
  backend_->upload_state(model_->params(), adam_m_.data(), adam_v_.data());
}

}  // namespace ft::trainer
