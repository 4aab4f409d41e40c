// trainer_checkpoint.cpp: Trainer::save/load: one atomic file per rank, parallel.json marking a
// multi-rank checkpoint complete.
#include <fmt/format.h>

#include <filesystem>

#include "ft/core/annotate.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/checkpoint_io.h"
#include "ft/trainer/grad_sync.h"
#include "ft/trainer/trainer.h"
#include "ft/trainer/zero3.h"
#include "ft/trainer/zero_optimizer.h"

namespace ft::trainer {

namespace {
constexpr const char* kCheckpointFile = "checkpoint.ft";
constexpr const char* kAdapterFile = "adapters.ft";  // --qlora: the adapters and their state
constexpr const char* kParallelFile = "parallel.json";
constexpr int kCheckpointVersion = 1;

nlohmann::json layout_json(const ParallelConfig& p, int world_size) {
  return {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"zero", p.zero}, {"world_size", world_size}};
}

std::string describe_layout(const nlohmann::json& j) {
  const int n = j.value("world_size", 1);
  return fmt::format("dp {} x tp {} x pp {}, zero {} ({} rank{})", j.value("dp", 1),
                     j.value("tp", 1), j.value("pp", 1), j.value("zero", 0), n, n == 1 ? "" : "s");
}

std::string resume_command(const nlohmann::json& j) {
  return fmt::format("mpirun -np {} ft-train --dp {} --tp {} --pp {} --zero {}",
                     j.value("world_size", 1), j.value("dp", 1), j.value("tp", 1), j.value("pp", 1),
                     j.value("zero", 0));
}

}  // namespace

void Trainer::save(const std::string& dir) {
  FT_RANGE("checkpoint.save", RangeKind::kHost);
  sync_host_state();  // --device cuda: the device state into the host mirror
  namespace fs = std::filesystem;
  const int world = groups_.world->world_size(), wr = groups_.world->rank();
  const fs::path root(dir);
  const fs::path file_dir = world > 1 ? root / fmt::format("rank{}", wr) : root;
  std::error_code ec;
  fs::create_directories(file_dir, ec);
  if (ec) {
    throw IoError(fmt::format("cannot create checkpoint directory '{}': {}", file_dir.string(),
                              ec.message()));
  }
  const auto rs = rng_.state();
  nlohmann::json layout = layout_json(config_.parallel, world);
  layout["rank"] = wr;
  // QLoRA saves the adapters alone (with their AdamW state); the base is --init-from's file.
  const bool lora = model_->qlora();
  nlohmann::json meta = {{"format", lora ? "ft-lora-adapters" : "ft-checkpoint"},
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
                         {"num_params", model_->num_params()},
                         {"parallel", layout}};
  CheckpointWriter w;
  const size_t bytes = model_->num_params() * sizeof(float);
  if (lora) {
    const size_t ab = model_->lora_num_params() * sizeof(float);
    meta["num_adapter_params"] = model_->lora_num_params();
    meta["qlora"] = config_.to_json().at("qlora");
    w.add_section("adapters", model_->lora_params(), ab);
    w.add_section("adam_m", adam_m_.data(), ab);
    w.add_section("adam_v", adam_v_.data(), ab);
  } else if (zero3_) {
    // ZeRO-3: this rank's shards of the parameters and AdamW state (Zero3Layout order).
    const size_t sb = zero3_->shard_size() * sizeof(float);
    meta["shard_size"] = zero3_->shard_size();
    w.add_section("params", zero3_->params(), sb);
    w.add_section("adam_m", zero3_->m(), sb);
    w.add_section("adam_v", zero3_->v(), sb);
  } else if (zero_) {
    // ZeRO: this rank's shard of the optimizer state (ShardLayout order).
    w.add_section("params", model_->params(), bytes);
    meta["shard_size"] = zero_->shard_size();
    w.add_section("adam_m", zero_->m(), zero_->shard_size() * sizeof(float));
    w.add_section("adam_v", zero_->v(), zero_->shard_size() * sizeof(float));
  } else {
    w.add_section("params", model_->params(), bytes);
    w.add_section("adam_m", adam_m_.data(), bytes);
    w.add_section("adam_v", adam_v_.data(), bytes);
  }
  w.set_meta(meta);
  w.commit(file_dir / (lora ? kAdapterFile : kCheckpointFile));
  if (world > 1) {
    // Complete only once every rank's file is in place: parallel.json is written last.
    groups_.world->barrier();
    if (wr == 0) {
      nlohmann::json j = layout_json(config_.parallel, world);
      j["format"] = "ft-parallel-checkpoint";
      j["step"] = step_;
      write_file_atomic(root / kParallelFile, j.dump(2) + "\n");
    }
    groups_.world->barrier();
  } else {
    fs::remove(root / kParallelFile, ec);  // a stale marker of an earlier multi-rank save
  }
}

void Trainer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const int world = groups_.world->world_size(), wr = groups_.world->rank();
  const fs::path root(dir), marker = root / kParallelFile;
  const nlohmann::json mine = layout_json(config_.parallel, world);
  int expected_step = -1;
  const bool lora = model_->qlora();
  fs::path path = root / (lora ? kAdapterFile : kCheckpointFile);
  if (fs::exists(marker)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(marker));
      expected_step = j.at("step").get<int>();
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(fmt::format("'{}' is malformed: {}", marker.string(), e.what()));
    }
    for (const char* k : {"dp", "tp", "pp", "zero", "world_size"}) {
      if (j.value(k, -1) != mine.at(k).get<int>()) {
        throw ConfigError(fmt::format(
            "checkpoint '{}' was written by a {} run, but this run is {}: resume it with the same "
            "layout ({} ...)",
            dir, describe_layout(j), describe_layout(mine), resume_command(j)));
      }
    }
    path = root / fmt::format("rank{}", wr) / kCheckpointFile;
  } else if (world > 1) {
    if (fs::exists(path)) {
      throw ConfigError(fmt::format(
          "checkpoint '{}' was written by one process, but this run is {}: resume it with one "
          "process",
          dir, describe_layout(mine)));
    }
    throw IoError(fmt::format(
        "no complete multi-rank checkpoint at '{}' (no {}: it is written once every rank has "
        "written its file)",
        dir, kParallelFile));
  }
  if (!fs::exists(path)) {
    if (lora && fs::exists(root / kCheckpointFile)) {
      throw ConfigError(fmt::format(
          "'{}' holds a full checkpoint, not QLoRA adapters: fine-tune it with --qlora "
          "--init-from (an llm.c file: ft-train --resume {} --steps N --export-llmc FILE writes one)",
          dir, dir));
    }
    throw IoError(fmt::format("no checkpoint at '{}'", path.string()));
  }
  CheckpointReader r(path);
  const nlohmann::json& meta = r.meta();
  try {
    if (meta.at("format") != (lora ? "ft-lora-adapters" : "ft-checkpoint") ||
        meta.at("version").get<int>() != kCheckpointVersion) {
      throw FormatError(
          fmt::format("'{}' is not a version-{} ft checkpoint", path.string(), kCheckpointVersion));
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
    if (lora && (meta.at("qlora").at("rank") != config_.options.lora.rank ||
                 meta.at("qlora").at("targets") != config_.options.lora.targets_text() ||
                 meta.at("num_adapter_params").get<size_t>() != model_->lora_num_params())) {
      throw ConfigError(fmt::format(
          "adapters '{}' are rank {} on {}, but this run has --lora-rank {} --lora-targets {}",
          path.string(), meta.at("qlora").at("rank").get<int>(),
          meta.at("qlora").at("targets").get<std::string>(), config_.options.lora.rank,
          config_.options.lora.targets_text()));
    }
    if (meta.at("num_params").get<size_t>() != model_->num_params()) {
      throw FormatError(fmt::format("checkpoint '{}' has {} parameters, expected {}", path.string(),
                                    meta.at("num_params").get<size_t>(), model_->num_params()));
    }
    const nlohmann::json theirs = meta.value("parallel", layout_json(ParallelConfig{}, 1));
    if (theirs.value("zero", 0) != config_.parallel.zero) {
      throw ConfigError(fmt::format(
          "checkpoint '{}' was written with --zero {}, but this run has --zero {}: the optimizer "
          "state is laid out differently",
          path.string(), theirs.value("zero", 0), config_.parallel.zero));
    }
    if (expected_step >= 0 && meta.at("next_step").get<int>() != expected_step) {
      throw FormatError(fmt::format(
          "checkpoint '{}' is incomplete: {} is at step {} but rank {}'s file at step {} (a save "
          "was interrupted)",
          dir, kParallelFile, expected_step, wr, meta.at("next_step").get<int>()));
    }
    const size_t bytes = model_->num_params() * sizeof(float);
    if (lora) {
      const size_t ab = model_->lora_num_params() * sizeof(float);
      r.read("adapters", model_->lora_params(), ab);
      r.read("adam_m", adam_m_.data(), ab);
      r.read("adam_v", adam_v_.data(), ab);
    } else if (zero3_) {
      if (meta.value("shard_size", size_t{0}) != zero3_->shard_size()) {
        throw FormatError(fmt::format("checkpoint '{}' holds a ZeRO-3 shard of {} elements, expected {}",
                                      path.string(), meta.value("shard_size", size_t{0}),
                                      zero3_->shard_size()));
      }
      const size_t sb = zero3_->shard_size() * sizeof(float);
      r.read("params", zero3_->params(), sb);
      r.read("adam_m", zero3_->m(), sb);
      r.read("adam_v", zero3_->v(), sb);
    } else if (zero_) {
      r.read("params", model_->params(), bytes);
      if (meta.value("shard_size", size_t{0}) != zero_->shard_size()) {
        throw FormatError(
            fmt::format("checkpoint '{}' holds an optimizer shard of {} elements, "
                        "expected {}",
                        path.string(), meta.value("shard_size", size_t{0}), zero_->shard_size()));
      }
      r.read("adam_m", zero_->m(), zero_->shard_size() * sizeof(float));
      r.read("adam_v", zero_->v(), zero_->shard_size() * sizeof(float));
    } else {
      r.read("params", model_->params(), bytes);
      r.read("adam_m", adam_m_.data(), bytes);
      r.read("adam_v", adam_v_.data(), bytes);
    }
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
    throw FormatError(
        fmt::format("checkpoint '{}' metadata is malformed: {}", path.string(), e.what()));
  }
  if (zero3_) zero3_->gather_non_block();  // collective: every rank loads
  model_->refresh_low_precision();
  backend_->upload_state(model_->params(), adam_m_.data(), adam_v_.data());  // cuda: to the device
}

void Trainer::write_merged(const std::string& dir) const {
  if (!model_->qlora()) throw ConfigError("--merge-lora needs --qlora");
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create '{}': {}", dir, ec.message()));
  // The merged weights W + (alpha / r) B A with every other tensor as trained (frozen).
  const std::vector<float> full = model_->gather_full_params();
  write_llmc_model(fs::path(dir) / "model.bin", config_.model, full.data());
  // An ft checkpoint of the merged model for a plain (full) run: fresh optimizer state at step 0.
  TrainConfig plain = config_;
  plain.options.lora = LoraConfig{};
  plain.init_from.clear();
  const std::vector<float> zeros(full.size(), 0.0f);
  const auto rs = rng_.state();
  nlohmann::json meta = {{"format", "ft-checkpoint"},
                         {"version", kCheckpointVersion},
                         {"next_step", 0},
                         {"adam_t", 0},
                         {"config", plain.to_json()},
                         {"loss_scale", 1.0f},
                         {"loss_scale_clean_steps", 0},
                         {"loss_scale_overflows", 0},
                         {"data_position", 0},
                         {"data_epoch", 0},
                         {"data_chunk", 0},
                         {"data_row", 0},
                         {"rng", {rs[0], rs[1], rs[2], rs[3]}},
                         {"num_params", full.size()},
                         {"parallel", layout_json(ParallelConfig{}, 1)},
                         {"merged_from", {{"base", config_.init_from},
                                          {"qlora", config_.to_json().at("qlora")},
                                          {"step", step_}}}};
  CheckpointWriter w;
  w.add_section("params", full.data(), full.size() * sizeof(float));
  w.add_section("adam_m", zeros.data(), zeros.size() * sizeof(float));
  w.add_section("adam_v", zeros.data(), zeros.size() * sizeof(float));
  w.set_meta(meta);
  w.commit(fs::path(dir) / kCheckpointFile);
}

}  // namespace ft::trainer
