// train_config.cpp: ft-train's options through Boost.Program_options, flags and config file alike.
#include "ft/trainer/train_config.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/error.h"
#include "ft/trainer/h2d.h"

namespace ft::trainer {

namespace po = boost::program_options;

namespace {

// A float as the double with the float's shortest round-trip decimal form (1e-3f -> 0.001, not
// 0.0010000000474974513), so JSON and config text show what the user typed.
double shortest(float f) { return std::strtod(fmt::format("{}", f).c_str(), nullptr); }

}  // namespace

void TrainConfig::validate() const {
  model.validate();
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw ConfigError(msg);
  };
  need(micro_batch > 0, "--micro-batch must be > 0");
  need(seq_len > 0 && seq_len <= model.max_seq_len,
       fmt::format("--seq-len {} must be in [1, {}]", seq_len, model.max_seq_len));
  need(grad_accum > 0, "--grad-accum must be > 0");
  need(steps > 0, "--steps must be > 0");
  need(lr > 0 && std::isfinite(lr), "--lr must be a positive number");
  need(min_lr >= 0 && min_lr <= lr, "--min-lr must be in [0, lr]");
  need(warmup >= 0, "--warmup must be >= 0");
  need(weight_decay >= 0, "--weight-decay must be >= 0");
  need(threads >= 0, "--threads must be >= 0");
  need(val_batches >= 0, "--val-batches must be >= 0");
  need(loss_scale > 0, "--loss-scale must be > 0");
  need(stop_after >= 0, "--stop-after must be >= 0");
  need(head_chunk_mb >= 0, "--head-chunk-mb must be >= 0");
  need(loss_scale_window > 0, "--loss-scale-window must be > 0");
  if (!profile_steps.empty()) {
    const size_t dash = profile_steps.find('-');
    const std::string a = profile_steps.substr(0, dash);
    const std::string b = dash == std::string::npos ? a : profile_steps.substr(dash + 1);
    auto digits = [](const std::string& x) {
      return !x.empty() && x.size() < 10 && x.find_first_not_of("0123456789") == std::string::npos;
    };
    need(digits(a) && digits(b) && std::stol(a) <= std::stol(b),
         "--profile-steps '" + profile_steps + "': expected A-B (0-based steps, A <= B) or A");
  }
  need(loader_workers >= 0 && loader_workers <= 64, "--loader-workers must be in [0, 64]");
  need(prefetch >= 1 && prefetch <= 1024, "--prefetch must be in [1, 1024]");
  need(preprocess_cost >= 0, "--preprocess-cost must be >= 0");
  parse_h2d_mode(h2d);  // throws ConfigError naming the value
  need(h2d_payload_mb >= 0 && h2d_payload_mb <= 65536, "--h2d-payload-mb must be in [0, 65536]");
  parallel.validate();
  if (options.lora.enabled()) {
    need(!init_from.empty(),
         "--qlora fine-tunes a trained model: give it --init-from MODEL.bin (llm.c format; "
         "ft-train --export-llmc writes one)");
    need(device == DeviceKind::kCpu, "--qlora runs on --device cpu only");
    need(parallel.dp * parallel.tp * parallel.pp == 1 && parallel.zero == 0,
         "--qlora runs on one process (no --dp/--tp/--pp/--zero)");
    need(options.precision != Precision::kFp16,
         "--qlora dequantizes its NF4 weights into fp32 or bf16 GEMM operands: --precision must "
         "be fp32 or bf16");
    need(options.lora.rank <= model.channels,
         fmt::format("--lora-rank {} must be in [1, {}] (the channels)", options.lora.rank,
                     model.channels));
    need(options.lora.alpha > 0 && std::isfinite(options.lora.alpha), "--lora-alpha must be > 0");
    need(options.lora.dropout >= 0 && options.lora.dropout < 1, "--lora-dropout must be in [0, 1)");
    need(options.lora.attn || options.lora.mlp, "--lora-targets names no linear");
  }
  need(merge_lora.empty() || options.lora.enabled(), "--merge-lora needs --qlora");
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = {
      {"layers", model.num_layers}, {"heads", model.num_heads}, {"channels", model.channels},
      {"vocab", model.vocab_size}, {"padded_vocab", model.padded_vocab},
      {"max_seq_len", model.max_seq_len}, {"micro_batch", micro_batch}, {"seq_len", seq_len},
      {"grad_accum", grad_accum}, {"steps", steps}, {"lr", shortest(lr)},
      {"min_lr", shortest(min_lr)}, {"warmup", warmup},
      {"weight_decay", shortest(weight_decay)}, {"clip", shortest(clip)},
      {"precision", precision_name(options.precision)},
      {"checkpoint", checkpointing_name(options.checkpointing)},
      {"attention", attention_name(options.attention)}, {"threads", threads},
      {"memory_limit", memory_limit}, {"allocator_caching", allocator_caching},
      {"allocator_huge_pages", allocator_huge_pages}, {"data", data}, {"val_data", val_data}, {"tokenizer", tokenizer},
      {"tokenizer_vocab", tokenizer_vocab}, {"tokenizer_merges", tokenizer_merges},
      {"loader_workers", loader_workers}, {"prefetch", prefetch},
      {"preprocess_cost", preprocess_cost}, {"shuffle", shuffle},
      {"h2d", h2d}, {"h2d_payload_mb", h2d_payload_mb},
      {"seed", seed}, {"loss_scale", shortest(loss_scale)},
      {"loss_scale_window", loss_scale_window},
      {"dp", parallel.dp}, {"tp", parallel.tp}, {"pp", parallel.pp}, {"zero", parallel.zero},
      {"bucket_mb", parallel.bucket_mb}, {"overlap", parallel.overlap},
      {"device", device_name(device)}, {"tf32", tf32}};
  if (options.lora.enabled()) {
    j["qlora"] = {{"rank", options.lora.rank}, {"alpha", shortest(options.lora.alpha)},
                  {"dropout", shortest(options.lora.dropout)},
                  {"targets", options.lora.targets_text()}, {"base", init_from}};
  }
  return j;
}

std::string TrainConfig::to_config_file() const {
  std::ostringstream o;
  o << "# ft-train configuration\n";
  o << "layers = " << model.num_layers << "\nheads = " << model.num_heads
    << "\nchannels = " << model.channels << "\nvocab = " << model.vocab_size
    << "\nmax-seq-len = " << model.max_seq_len << "\nseq-len = " << seq_len
    << "\nmicro-batch = " << micro_batch << "\ngrad-accum = " << grad_accum
    << "\nsteps = " << steps << "\nlr = " << fmt::format("{}", lr)
    << "\nmin-lr = " << fmt::format("{}", min_lr) << "\nwarmup = " << warmup
    << "\nweight-decay = " << fmt::format("{}", weight_decay)
    << "\nclip = " << fmt::format("{}", clip)
    << "\nprecision = " << precision_name(options.precision)
    << "\ncheckpoint = " << checkpointing_name(options.checkpointing)
    << "\nattention = " << attention_name(options.attention) << "\nthreads = " << threads
    << "\nmemory-limit = " << memory_limit
    << "\nallocator-caching = " << (allocator_caching ? "true" : "false")
    << "\nallocator-huge-pages = " << (allocator_huge_pages ? "true" : "false")
    << "\ndata = " << data
    << "\nloader-workers = " << loader_workers << "\nprefetch = " << prefetch
    << "\npreprocess-cost = " << preprocess_cost << "\nshuffle = " << (shuffle ? "true" : "false")
    << "\nh2d = " << h2d << "\nh2d-payload-mb = " << h2d_payload_mb
    << "\nseed = " << seed << "\ndp = " << parallel.dp << "\ntp = " << parallel.tp
    << "\npp = " << parallel.pp << "\nzero = " << parallel.zero
    << "\nbucket-mb = " << parallel.bucket_mb
    << "\noverlap = " << (parallel.overlap ? "true" : "false")
    << "\ndevice = " << device_name(device) << "\ntf32 = " << (tf32 ? "true" : "false") << "\n";
  if (options.lora.enabled()) {
    o << "qlora = true\nlora-rank = " << options.lora.rank
      << "\nlora-alpha = " << fmt::format("{}", options.lora.alpha)
      << "\nlora-dropout = " << fmt::format("{}", options.lora.dropout)
      << "\nlora-targets = " << options.lora.targets_text() << "\n";
    if (!init_from.empty()) o << "init-from = " << init_from << "\n";
  }
  return o.str();
}

namespace {

// What the options read into locals before parse_train_args converts them (enums, byte sizes,
// the switches that negate a setting).
struct RawFlags {
  std::string precision = "fp32", checkpoint = "none", attention = "auto", memory_limit = "0";
  std::string device = "cpu";
  std::string config_file;
  int max_seq_len = 0, padded_vocab = 0;
  bool caching = true;
  bool huge_pages = true;
  bool no_shuffle = false;
  bool no_overlap = false;
  int micro_batches = 0;
  bool qlora = false;
  int lora_rank = 8;
  float lora_alpha = 16, lora_dropout = 0;
  std::string lora_targets = "attn,mlp";
};

// The options that take one of a fixed set of values: the canonical names their parsers
// (parse_precision and the like) accept and print; option_table() lists them.
const std::map<std::string, std::vector<std::string>>& choices() {
  static const std::map<std::string, std::vector<std::string>> kChoices = {
      {"precision", {"fp32", "bf16", "fp16"}},
      {"checkpoint", {"none", "block"}},
      {"attention", {"auto", "flash", "naive"}},
      {"device", {"cpu", "cuda"}},
      {"h2d", {"pinned", "pageable"}},
      {"tokenizer", {"byte", "gpt2"}},
      {"zero", {"0", "1", "2", "3"}}};
  return kChoices;
}

// The options only the command line takes.
po::options_description command_options(RawFlags& raw, const std::string& program) {
  po::options_description cli(fmt::format("{} options", program));
  // clang-format off
  cli.add_options()
    ("help,h", "show this help")
    ("config", po::value(&raw.config_file), "read options from FILE (key = value lines; flags win)");
  // clang-format on
  return cli;
}

// Every setting, on the command line and in a --config file alike.
po::options_description training_options(TrainConfig& c, RawFlags& raw) {
  po::options_description opts("training");
  // clang-format off
  opts.add_options()
    ("layers", po::value(&c.model.num_layers)->default_value(4), "transformer blocks L")
    ("heads", po::value(&c.model.num_heads)->default_value(4), "attention heads NH")
    ("channels", po::value(&c.model.channels)->default_value(128), "model width C")
    ("vocab", po::value(&c.model.vocab_size)->default_value(256), "vocabulary V (>= 256 for byte data)")
    ("padded-vocab", po::value(&raw.padded_vocab)->default_value(0), "rows of wte (0: V rounded up to 64)")
    ("max-seq-len", po::value(&raw.max_seq_len)->default_value(0), "rows of wpe (0: = --seq-len)")
    ("seq-len", po::value(&c.seq_len)->default_value(128), "sequence length T")
    ("micro-batch", po::value(&c.micro_batch)->default_value(8), "micro-batch B")
    ("grad-accum", po::value(&c.grad_accum)->default_value(1), "micro-batches per step K")
    ("steps", po::value(&c.steps)->default_value(50), "optimizer steps")
    ("lr", po::value(&c.lr)->default_value(1e-3f, "1e-3"), "peak learning rate")
    ("min-lr", po::value(&c.min_lr)->default_value(1e-4f, "1e-4"), "cosine floor")
    ("warmup", po::value(&c.warmup)->default_value(10), "linear warmup steps")
    ("weight-decay", po::value(&c.weight_decay)->default_value(0.1f, "0.1"), "AdamW decoupled decay (matrices only)")
    ("clip", po::value(&c.clip)->default_value(1.0f, "1.0"), "global grad-norm clip (<= 0: off)")
    ("beta1", po::value(&c.beta1)->default_value(0.9f, "0.9"), "AdamW beta1")
    ("beta2", po::value(&c.beta2)->default_value(0.95f, "0.95"), "AdamW beta2")
    ("device", po::value(&raw.device)->default_value("cpu"), "engine: cpu | cuda (first CUDA device)")
    ("tf32", po::value(&c.tf32)->default_value(false), "cuda, fp32: TF32 tensor-core GEMMs")
    ("precision", po::value(&raw.precision)->default_value("fp32"), "fp32 | bf16 | fp16")
    ("checkpoint", po::value(&raw.checkpoint)->default_value("none"), "activation checkpointing: none | block")
    ("attention", po::value(&raw.attention)->default_value("auto"),
     "auto (naive when T <= 4 x head size, else flash) | flash (tiled, O(T) memory) | naive")
    ("threads", po::value(&c.threads)->default_value(0), "worker threads (0: all cores)")
    ("memory-limit", po::value(&raw.memory_limit)->default_value("0"), "allocator budget, e.g. 2G (0: none)")
    ("allocator-caching", po::value(&raw.caching)->default_value(true), "false: return memory to the OS on every free")
    ("allocator-huge-pages", po::value(&raw.huge_pages)->default_value(true),
     "false: host segments stay on 4 KiB pages (no transparent huge pages)")
    ("data", po::value(&c.data)->default_value("kjv"), "kjv | text file | llm.c shard | shard directory")
    ("val-data", po::value(&c.val_data), "held-out data for validation, used whole (replaces the split of --data)")
    ("tokenizer", po::value(&c.tokenizer)->default_value("byte"), "tokenizer for text/JSONL data: byte | gpt2")
    ("tokenizer-vocab", po::value(&c.tokenizer_vocab), "gpt2: encoder.json (with --tokenizer-merges) or tokenizer.json")
    ("tokenizer-merges", po::value(&c.tokenizer_merges), "gpt2: vocab.bpe merges file")
    ("seed", po::value(&c.seed)->default_value(1337), "random seed")
    ("loader-workers", po::value(&c.loader_workers)->default_value(1), "data loader worker threads (0: in-line on the training thread)")
    ("prefetch", po::value(&c.prefetch)->default_value(4), "ready batches the loader queues ahead")
    ("preprocess-cost", po::value(&c.preprocess_cost)->default_value(0), "passes of text normalisation + hashing per document (extra real loader work)")
    ("shuffle", po::value(&c.shuffle)->default_value(true), "shuffle chunk order per epoch and rows within chunks (false: sequential)")
    ("no-shuffle", po::bool_switch(&raw.no_shuffle), "same as --shuffle false")
    ("h2d", po::value(&c.h2d)->default_value("pinned"), "--device cuda: pinned (async copy stream) | pageable (synchronous copies)")
    ("h2d-payload-mb", po::value(&c.h2d_payload_mb)->default_value(0), "--device cuda: MiB of side input copied to the GPU with every batch (PCIe experiments)")
    ("metrics", po::value(&c.metrics), "write per-step metrics as JSONL to FILE")
    ("save", po::value(&c.save_dir), "checkpoint directory")
    ("save-every", po::value(&c.save_every)->default_value(0), "checkpoint every N steps (0: at the end)")
    ("resume", po::value(&c.resume_dir), "resume from the checkpoint in DIR")
    ("init-from", po::value(&c.init_from), "initialise weights from an llm.c model file")
    ("export-llmc", po::value(&c.export_llmc), "write the final weights as an llm.c model file")
    ("qlora", po::bool_switch(&raw.qlora), "fine-tune --init-from's model: NF4 block linears (frozen) plus LoRA adapters, which alone train")
    ("lora-rank", po::value(&raw.lora_rank)->default_value(8), "--qlora: adapter rank r")
    ("lora-alpha", po::value(&raw.lora_alpha)->default_value(16.0f, "16"), "--qlora: adapter scale numerator (scale = alpha / r)")
    ("lora-targets", po::value(&raw.lora_targets)->default_value("attn,mlp"), "--qlora: linears that get adapters: attn | mlp | attn,mlp")
    ("lora-dropout", po::value(&raw.lora_dropout)->default_value(0.0f, "0"), "--qlora: dropout on the adapters' input")
    ("merge-lora", po::value(&c.merge_lora), "--qlora: at the end, write the merged model to DIR (checkpoint.ft and llm.c model.bin)")
    ("val-every", po::value(&c.val_every)->default_value(0), "validate every N steps (0: at the end)")
    ("val-batches", po::value(&c.val_batches)->default_value(8), "micro-batches per validation")
    ("warmup-excluded", po::value(&c.warmup_steps_excluded)->default_value(2), "steps excluded from mean tokens/s")
    ("peak-gflops", po::value(&c.peak_gflops)->default_value(0), "peak for MFU in GFLOP/s (0: measured on this machine at start-up)")
    ("loss-scale", po::value(&c.loss_scale)->default_value(65536.0f, "65536"), "fp16 initial loss scale")
    ("loss-scale-window", po::value(&c.loss_scale_window)->default_value(1000), "fp16: clean steps before the scale doubles")
    ("head-chunk-mb", po::value(&c.head_chunk_mb)->default_value(0), "MiB of logits per LM-head chunk (0: auto, fp32 1024 / bf16 48)")
    ("stop-after", po::value(&c.stop_after)->default_value(0), "stop (and --save) after N steps of this run; resume later")
    ("quiet,q", po::bool_switch(&c.quiet), "no per-step table")
    ("profile-steps", po::value(&c.profile_steps), "profile only steps A-B (0-based; with --trace)")
    ("trace", po::value(&c.trace), "profile the run and write a Chrome/Perfetto trace JSON to FILE")
    ("dp", po::value(&c.parallel.dp)->default_value(1), "data-parallel degree (mpirun -np = dp*tp*pp)")
    ("tp", po::value(&c.parallel.tp)->default_value(1), "tensor-parallel degree")
    ("pp", po::value(&c.parallel.pp)->default_value(1), "pipeline stages (1F1B over the step's micro-batches)")
    ("zero", po::value(&c.parallel.zero)->default_value(0), "ZeRO stage: 0 | 1 (shard optimizer states) | 2 (and gradients) | 3 (and parameters, gathered per block)")
    ("bucket-mb", po::value(&c.parallel.bucket_mb)->default_value(25.0, "25"), "DP gradient bucket size in MiB")
    ("overlap", po::value(&c.parallel.overlap)->default_value(true), "all-reduce gradient buckets during backward")
    ("no-overlap", po::bool_switch(&raw.no_overlap), "same as --overlap false")
    ("micro-batches", po::value(&raw.micro_batches)->default_value(0), "micro-batches per step (same as --grad-accum; the pipeline's m)")
    ("comm-timeout", po::value(&c.parallel.comm_timeout_s)->default_value(120.0, "120"), "seconds a collective may take before the job fails")
    ("straggle-rank", po::value(&c.parallel.straggle_rank)->default_value(-1), "fault injection: world rank that does extra compute each step")
    ("straggle-work", po::value(&c.parallel.straggle_work)->default_value(0), "fault injection: extra GEMM passes per step on --straggle-rank");
  // clang-format on
  return opts;
}

// The type of `T` in option_table() terms, and its default as text.
template <typename T>
bool describe_typed(const po::value_semantic* s, const char* type, OptionInfo* info) {
  if (!dynamic_cast<const po::typed_value<T>*>(s)) return false;
  info->type = type;
  boost::any v;
  if (!s->apply_default(v)) return true;
  const T d = boost::any_cast<T>(v);
  if constexpr (std::is_same_v<T, std::string>) {
    info->default_value = d;
  } else if constexpr (std::is_same_v<T, bool>) {
    info->default_value = d ? "true" : "false";
  } else {
    info->default_value = fmt::format("{}", d);  // floats in shortest round-trip form
  }
  return true;
}

OptionInfo describe_option(const po::option_description& o) {
  OptionInfo info;
  info.name = o.long_name();
  info.help = o.description();
  const po::value_semantic* s = o.semantic().get();
  const bool typed =
      describe_typed<int>(s, "int", &info) || describe_typed<uint64_t>(s, "int", &info) ||
      describe_typed<float>(s, "float", &info) || describe_typed<double>(s, "float", &info) ||
      describe_typed<bool>(s, "bool", &info) || describe_typed<std::string>(s, "string", &info);
  if (!typed) {
    if (s->max_tokens() != 0) {
      throw std::logic_error("option_table: --" + info.name + " has a type it does not know");
    }
    info.type = "bool";  // a switch without a value (--help)
  }
  if (const auto it = choices().find(info.name); it != choices().end()) info.allowed = it->second;
  return info;
}

// Stores one --config FILE into `vm`, line by line so that an error names its line. Keys the
// command line set are kept (flags win); a key set twice in the file is an error.
void store_config_file(const std::string& path, const po::options_description& opts,
                       po::variables_map* vm) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot open config file '{}'", path));
  std::map<std::string, int> first_line;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto at = [&](const std::string& what) {
      return ConfigError(fmt::format("{}:{}: {}", path, n, what));
    };
    const size_t start = line.find_first_not_of(" \t\r");
    if (start != std::string::npos && line[start] == '[') {
      throw at("[section] headers are not supported (one 'key = value' per line)");
    }
    std::istringstream one(line);
    try {
      const po::parsed_options parsed = po::parse_config_file(one, opts);
      for (const auto& o : parsed.options) {
        const auto [it, fresh] = first_line.emplace(o.string_key, n);
        if (!fresh) {
          throw at(fmt::format("'{}' is set again (first on line {})", o.string_key, it->second));
        }
      }
      po::store(parsed, *vm);
    } catch (const po::error& e) {
      throw at(e.what());
    }
  }
}

// The settings the locals hold, converted, checked and resolved (--attention auto).
TrainConfig finish_config(TrainConfig c, const RawFlags& raw, const po::variables_map& vm) {
  c.device = parse_device(raw.device);
  c.options.precision = parse_precision(raw.precision);
  c.options.checkpointing = parse_checkpointing(raw.checkpoint);
  c.attention_auto = raw.attention == "auto";
  if (!c.attention_auto) c.options.attention = parse_attention(raw.attention);
  c.memory_limit = parse_bytes(raw.memory_limit);
  c.allocator_caching = raw.caching;
  c.allocator_huge_pages = raw.huge_pages;
  if (raw.no_shuffle) c.shuffle = false;
  if (raw.no_overlap) c.parallel.overlap = false;
  if (raw.micro_batches > 0) {
    if (!vm["grad-accum"].defaulted() && c.grad_accum != raw.micro_batches) {
      throw ConfigError(fmt::format("--micro-batches {} contradicts --grad-accum {}",
                                    raw.micro_batches, c.grad_accum));
    }
    c.grad_accum = raw.micro_batches;
  }
  if (raw.qlora) {
    c.options.lora.rank = raw.lora_rank;
    if (raw.lora_rank < 1) throw ConfigError("--lora-rank must be >= 1");
    c.options.lora.alpha = raw.lora_alpha;
    c.options.lora.dropout = raw.lora_dropout;
    parse_lora_targets(raw.lora_targets, c.options.lora);
  } else {
    for (const char* k : {"lora-rank", "lora-alpha", "lora-targets", "lora-dropout"}) {
      if (vm.count(k) && !vm[k].defaulted()) {
        throw ConfigError(fmt::format("--{} needs --qlora", k));
      }
    }
  }
  c.model.max_seq_len = raw.max_seq_len > 0 ? raw.max_seq_len : c.seq_len;
  c.model.padded_vocab =
      raw.padded_vocab > 0 ? raw.padded_vocab : GptConfig::pad_vocab(c.model.vocab_size);
  c.validate();
  if (c.attention_auto) {  // validate() has checked that the heads divide the channels
    c.options.attention = choose_attention(c.seq_len, c.model.channels / c.model.num_heads);
  }
  return c;
}

}  // namespace

const std::vector<OptionInfo>& option_table() {
  static const std::vector<OptionInfo> kTable = [] {
    TrainConfig c;
    RawFlags raw;
    po::options_description all = command_options(raw, "ft-train");
    all.add(training_options(c, raw));
    std::vector<OptionInfo> out;
    for (const auto& o : all.options()) out.push_back(describe_option(*o));
    return out;
  }();
  return kTable;
}

const OptionInfo* find_option(const std::string& name) {
  for (const OptionInfo& o : option_table()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::optional<TrainConfig> parse_train_args(int argc, const char* const* argv,
                                            const std::string& program) {
  TrainConfig c;
  RawFlags raw;
  po::options_description cli = command_options(raw, program);
  const po::options_description opts = training_options(c, raw);
  cli.add(opts);
  po::variables_map vm;
  // The caller prefixes the program's name (ft::run_command_line): the messages do not.
  try {
    po::store(po::parse_command_line(argc, argv, cli), vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  if (vm.count("help")) {
    std::cout << "usage: " << program << " [options]\n" << cli << "\n";
    return std::nullopt;
  }
  if (vm.count("config")) store_config_file(vm["config"].as<std::string>(), opts, &vm);
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  return finish_config(c, raw, vm);
}

}  // namespace ft::trainer
