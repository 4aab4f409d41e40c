// train_config.h: every ft-train setting, its command-line/config-file parsing and JSON form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/trainer/device.h"
#include "ft/trainer/gpt_config.h"
#include "ft/trainer/model.h"
#include "ft/trainer/parallel.h"
#include "ft/trainer/precision.h"

namespace ft::trainer {

struct TrainConfig {
  GptConfig model;
  int micro_batch = 8;     // B
  int seq_len = 128;       // T
  int grad_accum = 1;      // K; global batch = B * K sequences
  int steps = 50;
  float lr = 1e-3f;
  float min_lr = 1e-4f;
  int warmup = 10;
  float weight_decay = 0.1f;
  float clip = 1.0f;       // <= 0 disables clipping
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  ModelOptions options;
  bool attention_auto = false;  // --attention auto: options.attention came from choose_attention
  int threads = 0;         // 0 = all cores
  size_t memory_limit = 0; // 0 = unlimited
  bool allocator_caching = true;
  bool allocator_huge_pages = true;  // madvise(MADV_HUGEPAGE) on host segments >= 2 MiB
  std::string data = "kjv";
  std::string val_data;  // optional held-out data used whole for validation
  // Tokenizer for document data (text / JSONL): "byte", or "gpt2" with tokenizer_vocab
  // (encoder.json, or a tokenizer.json when tokenizer_merges is empty) and tokenizer_merges.
  std::string tokenizer = "byte";
  std::string tokenizer_vocab, tokenizer_merges;
  uint64_t seed = 1337;
  int loader_workers = 1;   // 0: the training thread preprocesses in-line
  int prefetch = 4;         // ready batches queued ahead of the training thread
  int preprocess_cost = 0;  // passes of text normalisation + hashing per document (real work)
  bool shuffle = true;      // per-epoch chunk order and rows within chunks, from --seed
  // --device cuda: how batches reach the GPU ("pinned": async copy stream; "pageable": synchronous
  // copies, for PCIe experiments) and MiB of side input copied with every batch (ft/trainer/h2d.h).
  std::string h2d = "pinned";
  int h2d_payload_mb = 0;
  std::string metrics;     // JSONL path
  std::string save_dir;
  int save_every = 0;      // 0: save at the end only (when save_dir is set)
  std::string resume_dir;
  std::string init_from;   // llm.c model file to load weights from
  std::string export_llmc; // write an llm.c model file at the end
  // --qlora (options.lora.rank > 0): fine-tune --init-from's model with NF4 block linears and
  // adapters; --save then writes the adapters alone, --merge-lora DIR the merged model.
  std::string merge_lora;
  int val_every = 0;       // 0: validate at the end only
  int val_batches = 8;
  int warmup_steps_excluded = 2;  // steps excluded from the mean throughput
  double peak_gflops = 0;  // 0: measured on this machine at start-up (ft/core/cpu_peak.h)
  float loss_scale = 65536.0f;
  int loss_scale_window = 1000;
  int head_chunk_mb = 0;   // logits per LM-head chunk (MiB); 0 = auto (fp32/fp16 1024, bf16 48)
  int stop_after = 0;      // stop (and save) after this many steps of this invocation; 0: run to --steps
  bool quiet = false;      // no per-step table
  std::string profile_steps;  // "A-B": profile only steps A..B (empty: all, when profiling)
  std::string trace;          // profile the run; write a Chrome/Perfetto trace.json here
  ParallelConfig parallel;    // --dp/--tp/--pp/--zero/--bucket-mb/--no-overlap (mpirun -np dp*tp*pp)
  DeviceKind device = DeviceKind::kCpu;  // --device cpu|cuda: the engine that runs the model
  bool tf32 = false;                     // cuda, fp32: TF32 tensor-core GEMMs

  void validate() const;  // throws ConfigError
  nlohmann::json to_json() const;
  // Writes the settings as an ft-train config file (key = value lines).
  std::string to_config_file() const;
};

// One of ft-train's options, as parse_train_args's option description declares it.
struct OptionInfo {
  std::string name;                  // the long flag without "--", e.g. "micro-batch"
  std::string type;                  // int, float, bool (also a switch such as --quiet), string
  std::string default_value;         // "" if none; floats in shortest round-trip form ("0.001")
  std::vector<std::string> allowed;  // the values it takes, empty if free (precision: fp32 ...)
  std::string help;
};
// Every option ft-train takes (the command line's and the training settings, which a --config
// file takes too), built once from the option description parse_train_args parses with.
const std::vector<OptionInfo>& option_table();
// The entry of `name` (without "--") in option_table(); null when ft-train has no such option.
const OptionInfo* find_option(const std::string& name);

// Parses ft-train's command line (and any --config FILE it names).
// Returns nullopt when --help was printed. Throws ConfigError on bad input; its message is
// "FILE:LINE: what" for an error in a --config file and carries no program-name prefix.
std::optional<TrainConfig> parse_train_args(int argc, const char* const* argv,
                                            const std::string& program = "ft-train");

}  // namespace ft::trainer
