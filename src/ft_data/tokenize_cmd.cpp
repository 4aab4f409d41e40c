// tokenize_cmd.cpp: 'ft-data tokenize': documents -> llm.c token shards, split train/val by
// document.
#include <fmt/format.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "commands.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/data.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/tokenizer_gpt2.h"

namespace ft::data_cli {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
namespace data = ft::trainer::data;

constexpr size_t kChunkBytes = 1 << 20;  // documents per work item: about 1 MiB of text
constexpr const char* kByteSeparator = "\n\n";

struct Options {
  std::vector<std::string> inputs;
  std::string out, tokenizer = "byte", vocab, merges, tokenizer_json, text_field = "text";
  int64_t shard_tokens = 100'000'000;
  double val_fraction = 0.05;
  uint64_t seed = 0;
  int threads = 0;
  bool force = false;
};

// The split rule, stable across runs, machines and thread counts: FNV-1a over the document's
// bytes, mixed with the seed by SplitMix64's finaliser; the top 53 bits as a fraction in [0, 1).
double split_value(std::string_view doc, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : doc) {
    h ^= c;
    h *= 1099511628211ull;
  }
  uint64_t z = h ^ (seed + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

struct Chunk {
  std::string text;          // documents back to back
  std::vector<size_t> ends;  // end offset of each document in `text`
};

struct ChunkResult {
  std::vector<int32_t> tokens[2];  // [0] train, [1] val
  uint64_t docs[2] = {0, 0};
  uint64_t bytes[2] = {0, 0};
};

class Tokenize {
 public:
  Tokenize(const data::Tokenizer& tok, double val_fraction, uint64_t seed)
      : tok_(tok), val_fraction_(val_fraction), seed_(seed) {
    if (const auto* g = dynamic_cast<const data::Gpt2Tokenizer*>(&tok)) {
      gpt2_ = g;
      if (g->end_of_text() < 0) {
        throw ConfigError("the GPT-2 vocabulary has no <|endoftext|> token to separate documents");
      }
    }
  }
  // Each document: GPT-2 gets <|endoftext|> before it (llm.c's convention); the byte tokenizer,
  // whose 256 ids leave none spare, gets "\n\n" after it (a blank line, as in ft's text path).
  ChunkResult operator()(const Chunk& c) const {
    ChunkResult r;
    size_t begin = 0;
    for (size_t end : c.ends) {
      const std::string_view doc(c.text.data() + begin, end - begin);
      begin = end;
      const int split = split_value(doc, seed_) < val_fraction_ ? 1 : 0;
      auto& out = r.tokens[split];
      if (gpt2_ != nullptr) {
        out.push_back(gpt2_->end_of_text());
        gpt2_->encode_append(doc, out);
      } else {
        const auto ids = tok_.encode(doc);
        out.insert(out.end(), ids.begin(), ids.end());
        const auto sep = tok_.encode(kByteSeparator);
        out.insert(out.end(), sep.begin(), sep.end());
      }
      ++r.docs[split];
      r.bytes[split] += doc.size();
    }
    return r;
  }

 private:
  const data::Tokenizer& tok_;
  const data::Gpt2Tokenizer* gpt2_ = nullptr;
  double val_fraction_;
  uint64_t seed_;
};

// Fixed worker threads (each keeps its tokenizer piece cache warm) fed through a queue.
class WorkerPool {
 public:
  WorkerPool(int n, const Tokenize& fn) : fn_(fn) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  std::future<ChunkResult> submit(Chunk c) {
    std::promise<ChunkResult> p;
    auto f = p.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.emplace(std::move(c), std::move(p));
    }
    cv_.notify_one();
    return f;
  }

 private:
  void run() {
    while (true) {
      std::pair<Chunk, std::promise<ChunkResult>> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (stop_) return;
        job = std::move(jobs_.front());
        jobs_.pop();
      }
      try {
        job.second.set_value(fn_(job.first));
      } catch (...) {
        job.second.set_exception(std::current_exception());
      }
    }
  }

  const Tokenize& fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::queue<std::pair<Chunk, std::promise<ChunkResult>>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Cuts one split's token stream into shards of exactly shard_tokens (the last may be shorter).
class ShardSink {
 public:
  ShardSink(fs::path dir, std::string prefix, size_t shard_tokens, int version)
      : dir_(std::move(dir)),
        prefix_(std::move(prefix)),
        shard_tokens_(shard_tokens),
        version_(version) {}
  void add(const std::vector<int32_t>& tokens) {
    buf_.insert(buf_.end(), tokens.begin(), tokens.end());
    total_ += tokens.size();
    size_t done = 0;  // full shards are cut from the front, then the rest moves down once
    while (buf_.size() - done >= shard_tokens_) {
      const auto from = buf_.begin() + static_cast<ptrdiff_t>(done);
      write(std::vector<int32_t>(from, from + static_cast<ptrdiff_t>(shard_tokens_)));
      done += shard_tokens_;
    }
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(done));
  }
  void finish() {
    if (!buf_.empty()) write(buf_);
    buf_.clear();
  }
  const std::vector<std::string>& shards() const { return shards_; }
  uint64_t tokens() const { return total_; }

 private:
  void write(const std::vector<int32_t>& tokens) {
    const std::string name = fmt::format("{}_{:06d}.bin", prefix_, shards_.size());
    data::write_llmc_shard(dir_ / name, tokens, version_);
    shards_.push_back(name);
  }

  fs::path dir_;
  std::string prefix_;
  size_t shard_tokens_;
  int version_;
  std::vector<int32_t> buf_;
  std::vector<std::string> shards_;
  uint64_t total_ = 0;
};

std::optional<Options> parse(const std::vector<std::string>& args) {
  Options o;
  po::options_description opts("ft-data tokenize options");
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("out", po::value(&o.out), "output directory for train_NNNNNN.bin, val_NNNNNN.bin, meta.json")
    ("tokenizer", po::value(&o.tokenizer)->default_value("byte"), "byte | gpt2")
    ("vocab", po::value(&o.vocab), "gpt2: encoder.json (plain or .gz)")
    ("merges", po::value(&o.merges), "gpt2: vocab.bpe (plain or .gz)")
    ("tokenizer-json", po::value(&o.tokenizer_json), "gpt2: a HuggingFace tokenizer.json instead")
    ("shard-tokens", po::value(&o.shard_tokens)->default_value(100'000'000), "tokens per shard")
    ("val-fraction", po::value(&o.val_fraction)->default_value(0.05, "0.05"),
     "share of documents for validation (by a seeded hash of each document)")
    ("seed", po::value(&o.seed)->default_value(0), "seed of the train/val split")
    ("threads", po::value(&o.threads)->default_value(0), "tokenizer threads (0: all cores)")
    ("text-field", po::value(&o.text_field)->default_value("text"), "JSONL: the field with the text")
    ("force", po::bool_switch(&o.force), "replace shards and meta.json already in --out");
  // clang-format on
  po::options_description hidden;
  hidden.add_options()("input", po::value(&o.inputs)->composing());
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("input", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: ft-data tokenize IN... --out DIR --tokenizer byte|gpt2 "
                   "[--vocab FILE --merges FILE | --tokenizer-json FILE]\n"
                << opts << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  if (o.inputs.empty()) throw ConfigError("no input files or directories (IN...)");
  if (o.out.empty()) throw ConfigError("--out DIR is required");
  if (o.shard_tokens < 1 || o.shard_tokens > INT32_MAX) {
    throw ConfigError(
        fmt::format("--shard-tokens must be in [1, {}], got {}", INT32_MAX, o.shard_tokens));
  }
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    throw ConfigError(fmt::format("--val-fraction must be in [0, 1), got {}", o.val_fraction));
  }
  if (o.threads < 0) throw ConfigError(fmt::format("--threads must be >= 0, got {}", o.threads));
  if (!o.tokenizer_json.empty() && (!o.vocab.empty() || !o.merges.empty())) {
    throw ConfigError("give either --tokenizer-json or --vocab and --merges, not both");
  }
  if (o.tokenizer == "gpt2" && o.tokenizer_json.empty() && (o.vocab.empty() || o.merges.empty())) {
    throw ConfigError(
        "--tokenizer gpt2 needs --vocab encoder.json and --merges vocab.bpe, or "
        "--tokenizer-json tokenizer.json");
  }
  return o;
}

// Creates `dir`; refuses to mix with an earlier run's shards unless --force removes them.
void prepare_out_dir(const fs::path& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw ConfigError(fmt::format("--out '{}' exists and is not a directory", dir.string()));
  }
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create '{}': {}", dir.string(), ec.message()));
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool shard = e.path().extension() == ".bin" &&
                       (name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0);
    if (shard || name == "meta.json") old.push_back(e.path());
  }
  if (old.empty()) return;
  if (!force) {
    throw ConfigError(
        fmt::format("--out '{}' already holds {} (and {} more); use --force to "
                    "replace them",
                    dir.string(), old[0].filename().string(), old.size() - 1));
  }
  for (const auto& p : old) fs::remove(p);
}

}  // namespace

int tokenize_main(const std::vector<std::string>& args) {
  const auto parsed = parse(args);
  if (!parsed) return 0;
  const Options& o = *parsed;
  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = o.tokenizer_json.empty()
                       ? data::make_tokenizer(o.tokenizer, o.vocab, o.merges)
                       : data::make_tokenizer(o.tokenizer, o.tokenizer_json, "");
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<fs::path> inputs(o.inputs.begin(), o.inputs.end());
  const auto files = data::list_document_files(inputs);  // ConfigError for a missing path
  const fs::path out(o.out);
  prepare_out_dir(out, o.force);

  const int version = tok->vocab_size() <= 65536 ? 1 : 7;
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const Tokenize fn(*tok, o.val_fraction, o.seed);
  ShardSink sinks[2] = {{out, "train", static_cast<size_t>(o.shard_tokens), version},
                        {out, "val", static_cast<size_t>(o.shard_tokens), version}};
  uint64_t docs[2] = {0, 0}, bytes[2] = {0, 0};
  auto consume = [&](const ChunkResult& r) {
    for (int s = 0; s < 2; ++s) {
      sinks[s].add(r.tokens[s]);
      docs[s] += r.docs[s];
      bytes[s] += r.bytes[s];
    }
  };
  {
    // Results are consumed in submission order, so the shards do not depend on --threads.
    std::unique_ptr<WorkerPool> pool;
    if (threads > 1) pool = std::make_unique<WorkerPool>(threads, fn);
    std::deque<std::future<ChunkResult>> pending;
    Chunk chunk;
    auto flush = [&] {
      if (chunk.ends.empty()) return;
      if (!pool) {
        consume(fn(chunk));
      } else {
        pending.push_back(pool->submit(std::move(chunk)));
        while (pending.size() > static_cast<size_t>(2 * threads)) {
          consume(pending.front().get());
          pending.pop_front();
        }
      }
      chunk = Chunk();
    };
    data::DocumentReadOptions read_opts;
    read_opts.text_field = o.text_field;
    data::for_each_document(
        inputs,
        [&](std::string_view text, const data::DocumentOrigin&) {
          chunk.text.append(text);
          chunk.ends.push_back(chunk.text.size());
          if (chunk.text.size() >= kChunkBytes) flush();
          return true;
        },
        read_opts);
    flush();
    while (!pending.empty()) {
      consume(pending.front().get());
      pending.pop_front();
    }
  }
  for (auto& s : sinks) s.finish();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - load_s;
  if (docs[0] + docs[1] == 0) {
    throw ConfigError(fmt::format("no documents in {} input file(s)", files.size()));
  }

  nlohmann::json meta;
  meta["format"] = "llm.c token shards (magic 20240520)";
  meta["shard_version"] = version;
  meta["shard_tokens"] = o.shard_tokens;
  meta["tokenizer"] = {{"name", tok->name()}, {"vocab_size", tok->vocab_size()}};
  if (const auto* g = dynamic_cast<const data::Gpt2Tokenizer*>(tok.get())) {
    meta["tokenizer"]["document_separator"] = "<|endoftext|> before each document";
    meta["tokenizer"]["end_of_text"] = g->end_of_text();
  } else {
    meta["tokenizer"]["document_separator"] = "\"\\n\\n\" after each document";
  }
  if (!o.tokenizer_json.empty()) meta["tokenizer"]["tokenizer_json"] = o.tokenizer_json;
  if (!o.vocab.empty()) meta["tokenizer"]["vocab"] = o.vocab;
  if (!o.merges.empty()) meta["tokenizer"]["merges"] = o.merges;
  meta["inputs"] = o.inputs;
  meta["input_files"] = files.size();
  meta["split"] = {{"rule",
                    "by document: val iff splitmix64(fnv1a64(document bytes) ^ (seed + "
                    "0x9e3779b97f4a7c15)) >> 11, times 2^-53, is below val_fraction"},
                   {"val_fraction", o.val_fraction},
                   {"seed", o.seed}};
  const char* names[2] = {"train", "val"};
  for (int s = 0; s < 2; ++s) {
    meta[names[s]] = {{"documents", docs[s]},
                      {"bytes", bytes[s]},
                      {"tokens", sinks[s].tokens()},
                      {"shards", sinks[s].shards()}};
  }
  write_file_atomic(out / "meta.json", meta.dump(1) + "\n");

  const double mb = static_cast<double>(bytes[0] + bytes[1]) / 1e6;
  fmt::print(
      "tokenized {} documents ({:.2f} MB) from {} file(s) with {} (vocab {}, loaded in "
      "{:.2f} s), {} thread(s), {:.2f} s, {:.2f} MB/s (reading, tokenizing, writing)\n",
      docs[0] + docs[1], mb, files.size(), tok->name(), tok->vocab_size(), load_s, threads, secs,
      mb / secs);
  for (int s = 0; s < 2; ++s) {
    fmt::print("  {:<5} {:>9} documents {:>12} tokens in {} shard(s)\n", names[s], docs[s],
               sinks[s].tokens(), sinks[s].shards().size());
  }
  if (docs[1] == 0 && o.val_fraction > 0) {
    fmt::print("  note: no document fell in the validation split (--val-fraction {})\n",
               o.val_fraction);
  }
  fmt::print("wrote {} (llm.c version {}) and meta.json\n", out.string(), version);
  return 0;
}

}  // namespace ft::data_cli
