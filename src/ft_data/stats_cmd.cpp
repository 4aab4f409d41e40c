// stats_cmd.cpp: 'ft-data stats': document and llm.c shard statistics, as a table and as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <unicode/uchar.h>
#include <unicode/uscript.h>
#include <unicode/utf8.h>

#include "commands.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/trainer/data.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/quality.h"
#include "ft/trainer/tokenizer_gpt2.h"

namespace ft::data_cli {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
namespace data = ft::trainer::data;

struct Options {
  std::vector<std::string> inputs;
  std::string tokenizer, vocab, merges, tokenizer_json, json, text_field = "text";
  int vocab_size = 0;
  double near_threshold = 0.8;
  bool dup_rates = true;
};

std::optional<Options> parse(const std::vector<std::string>& args) {
  Options o;
  po::options_description opts("ft-data stats options");
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("tokenizer", po::value(&o.tokenizer), "also count tokens of documents: byte | gpt2")
    ("vocab", po::value(&o.vocab), "gpt2: encoder.json (plain or .gz)")
    ("merges", po::value(&o.merges), "gpt2: vocab.bpe (plain or .gz)")
    ("tokenizer-json", po::value(&o.tokenizer_json), "gpt2: a HuggingFace tokenizer.json instead")
    ("vocab-size", po::value(&o.vocab_size)->default_value(0),
     "shards: check every id is below V (0: no check)")
    ("text-field", po::value(&o.text_field)->default_value("text"), "JSONL: the field with the text")
    ("near-dup-threshold", po::value(&o.near_threshold)->default_value(0.8, "0.8"), "the Jaccard of word 5-grams a near duplicate reaches (estimated from MinHash signatures)")
    ("no-dup-rates", "skip the exact and near duplicate rates (the signatures are most of the time)")
    ("json", po::value(&o.json), "also write the statistics as JSON to FILE");
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
      std::cout << "usage: ft-data stats IN... [--tokenizer byte|gpt2 ...] [--json FILE]\n"
                << "  IN: document files/directories, llm.c shards (*.bin) or directories of "
                   "shards\n"
                << opts << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  if (o.inputs.empty()) throw ConfigError("no input files or directories (IN...)");
  o.dup_rates = vm.count("no-dup-rates") == 0;
  if (!(o.near_threshold > 0 && o.near_threshold <= 1)) {
    throw ConfigError(fmt::format("--near-dup-threshold {} must be in (0, 1]", o.near_threshold));
  }
  if (o.vocab_size < 0) throw ConfigError("--vocab-size must be >= 0");
  if (o.tokenizer.empty() && (!o.vocab.empty() || !o.merges.empty() || !o.tokenizer_json.empty())) {
    throw ConfigError("--vocab, --merges and --tokenizer-json need --tokenizer gpt2");
  }
  return o;
}

// Bytes of `s` that do not belong to a well-formed UTF-8 sequence (Unicode table 3-7).
uint64_t invalid_utf8_bytes(std::string_view s) {
  uint64_t bad = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned b0 = p[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xbf;
    if (b0 < 0x80) {
      ++i;
      continue;
    } else if (b0 >= 0xc2 && b0 <= 0xdf) {
      len = 2;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      len = 3;
      lo = b0 == 0xe0 ? 0xa0 : 0x80;
      hi = b0 == 0xed ? 0x9f : 0xbf;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      len = 4;
      lo = b0 == 0xf0 ? 0x90 : 0x80;
      hi = b0 == 0xf4 ? 0x8f : 0xbf;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned b = p[i + k];
      ok = b >= (k == 1 ? lo : 0x80u) && b <= (k == 1 ? hi : 0xbfu);
    }
    if (ok) {
      i += len;
    } else {
      ++bad;
      ++i;
    }
  }
  return bad;
}

bool is_control(unsigned char c) {
  return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f;
}

// Exact and near duplicate rates, the quick look before cleaning: XXH3-128 of each text, and a
// document counted as a near duplicate when an earlier distinct one's MinHash estimate (8-bit
// signatures in the LSH index ft-data clean uses) reaches the threshold. An estimate: the
// exact decision is ft-data clean's second pass. Signatures are computed in parallel batches.
class DupRates {
 public:
  explicit DupRates(double threshold)
      : opts_(make_opts(threshold)), hasher_(opts_), index_(opts_) {}
  void add(std::string_view text) {
    batch_.emplace_back(text);
    if (batch_.size() == 1024) flush();
  }
  void flush() {
    const int64_t n = static_cast<int64_t>(batch_.size());
    const int np = opts_.num_perm;
    std::vector<data::Hash128> hashes(batch_.size());
    std::vector<uint32_t> sigs(batch_.size() * static_cast<size_t>(np));
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      hashes[i] = data::content_hash(batch_[i]);
      hasher_.signature(batch_[i], sigs.data() + i * np);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!exact_set_.insert_hash(hashes[i])) {
        ++exact;
        exact_bytes += batch_[i].size();
      } else if (index_.insert_or_match(sigs.data() + i * np) >= 0) {
        ++near;
        near_bytes += batch_[i].size();
      }
    }
    batch_.clear();
  }
  const data::LshParams& params() const { return index_.params(); }
  uint64_t exact = 0, exact_bytes = 0, near = 0, near_bytes = 0;

 private:
  static data::MinHashOptions make_opts(double threshold) {
    data::MinHashOptions m;
    m.threshold = threshold;
    return m;
  }
  data::MinHashOptions opts_;
  data::MinHasher hasher_;
  data::ExactDeduper exact_set_;
  data::NearDupIndex index_;
  std::vector<std::string> batch_;
};

// Writing systems, the part of "which language" a quick look can answer without a model: each
// document's letters counted by Unicode script (ICU); its dominant script, and whether a
// second script holds at least 10% of its letters (bilingual text, transliteration, or
// homoglyph spam). Latin-script languages are not told apart.
class ScriptStats {
 public:
  void add(std::string_view text) {
    counts_.clear();
    int32_t i = 0;
    const auto* p = reinterpret_cast<const uint8_t*>(text.data());
    const int32_t n = static_cast<int32_t>(std::min<size_t>(text.size(), INT32_MAX));
    uint64_t letters = 0;
    while (i < n) {
      UChar32 c = 0;
      U8_NEXT(p, i, n, c);
      if (c < 0 || !u_isalpha(c)) continue;
      UErrorCode err = U_ZERO_ERROR;
      const UScriptCode sc = uscript_getScript(c, &err);
      if (U_FAILURE(err)) continue;
      ++counts_[static_cast<int>(sc)];
      ++letters;
    }
    if (letters == 0) {
      ++no_letters;
      return;
    }
    int top = -1;
    uint64_t top_n = 0, second_n = 0;
    for (const auto& [sc, k] : counts_) {
      if (k > top_n) {
        second_n = top_n;
        top_n = k;
        top = sc;
      } else if (k > second_n) {
        second_n = k;
      }
    }
    ++dominant[uscript_getName(static_cast<UScriptCode>(top))];
    if (second_n * 10 >= letters) ++mixed;
  }
  std::map<std::string, uint64_t> dominant;  // script name -> documents
  uint64_t mixed = 0, no_letters = 0;

 private:
  std::map<int, uint64_t> counts_;
};

struct DocStats {
  uint64_t files = 0, documents = 0, bytes = 0, lines = 0, invalid = 0, control = 0, tokens = 0;
  std::vector<uint64_t> lengths;
};

uint64_t percentile(const std::vector<uint64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

struct ShardStats {
  std::string file;
  int version = 0;
  uint64_t tokens = 0, bytes = 0;
  int max_id = -1;
  std::string error;
};

ShardStats shard_stats(const fs::path& p, int vocab_size) {
  ShardStats s;
  s.file = p.string();
  std::error_code ec;
  s.bytes = fs::file_size(p, ec);
  try {
    const auto src =
        vocab_size > 0 ? data::open_llmc_shard(p, vocab_size) : data::open_llmc_shard(p);
    std::ifstream in(p, std::ios::binary);
    int32_t header[2] = {0, 0};
    in.read(reinterpret_cast<char*>(header), sizeof(header));
    s.version = header[1];
    s.tokens = src->size();
    s.max_id = src->max_token();
  } catch (const ft::Error& e) {
    s.error = e.what();
  }
  return s;
}

// Splits IN... into shards (*.bin files, and directories whose top level holds *.bin files)
// and document inputs (everything else).
void classify(const std::vector<std::string>& inputs, std::vector<fs::path>& shards,
              std::vector<fs::path>& docs) {
  for (const auto& in : inputs) {
    const fs::path p(in);
    std::error_code ec;
    if (!fs::exists(p, ec)) throw ConfigError(fmt::format("input '{}' not found", in));
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> bins;
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file() && e.path().extension() == ".bin") bins.push_back(e.path());
      }
      std::sort(bins.begin(), bins.end());
      if (bins.empty()) {
        docs.push_back(p);
      } else {
        shards.insert(shards.end(), bins.begin(), bins.end());
      }
    } else if (p.extension() == ".bin") {
      shards.push_back(p);
    } else {
      docs.push_back(p);
    }
  }
}

}  // namespace

int stats_main(const std::vector<std::string>& args) {
  const auto parsed = parse(args);
  if (!parsed) return 0;
  const Options& o = *parsed;
  std::shared_ptr<const data::Tokenizer> tok;
  if (!o.tokenizer.empty()) {
    tok = o.tokenizer_json.empty() ? data::make_tokenizer(o.tokenizer, o.vocab, o.merges)
                                   : data::make_tokenizer(o.tokenizer, o.tokenizer_json, "");
  }
  std::vector<fs::path> shard_paths, doc_paths;
  classify(o.inputs, shard_paths, doc_paths);

  nlohmann::json out;
  if (!doc_paths.empty()) {
    DocStats d;
    d.files = data::list_document_files(doc_paths).size();
    data::DocumentReadOptions ro;
    ro.text_field = o.text_field;
    const auto* gpt2 = dynamic_cast<const data::Gpt2Tokenizer*>(tok.get());
    std::vector<int32_t> ids;
    std::optional<DupRates> dups;
    if (o.dup_rates) dups.emplace(o.near_threshold);
    ScriptStats scripts;
    data::for_each_document(
        doc_paths,
        [&](std::string_view text, const data::DocumentOrigin&) {
          ++d.documents;
          d.bytes += text.size();
          d.lengths.push_back(text.size());
          d.lines += static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
          if (!text.empty() && text.back() != '\n') ++d.lines;
          d.invalid += invalid_utf8_bytes(text);
          for (unsigned char c : text) d.control += is_control(c) ? 1 : 0;
          if (dups) dups->add(text);
          scripts.add(text);
          if (gpt2 != nullptr) {
            ids.clear();
            gpt2->encode_append(text, ids);
            d.tokens += ids.size();
          } else if (tok) {
            d.tokens += tok->encode(text).size();
          }
          return true;
        },
        ro);
    if (dups) dups->flush();
    std::sort(d.lengths.begin(), d.lengths.end());
    const double mean = d.documents ? static_cast<double>(d.bytes) / d.documents : 0.0;
    const double bytes = static_cast<double>(std::max<uint64_t>(d.bytes, 1));
    auto& j = out["documents"];
    j = {{"files", d.files},
         {"documents", d.documents},
         {"bytes", d.bytes},
         {"lines", d.lines},
         {"document_bytes",
          {{"mean", mean},
           {"min", d.lengths.empty() ? 0 : d.lengths.front()},
           {"p50", percentile(d.lengths, 0.5)},
           {"p90", percentile(d.lengths, 0.9)},
           {"p99", percentile(d.lengths, 0.99)},
           {"max", d.lengths.empty() ? 0 : d.lengths.back()}}},
         {"invalid_utf8_bytes", d.invalid},
         {"invalid_utf8_share", static_cast<double>(d.invalid) / bytes},
         {"control_bytes", d.control},
         {"control_share", static_cast<double>(d.control) / bytes}};
    fmt::print("documents   {} file(s)\n", d.files);
    fmt::print("  {:<22} {:>14}\n", "documents", d.documents);
    fmt::print("  {:<22} {:>14}\n", "bytes", d.bytes);
    fmt::print("  {:<22} {:>14}\n", "lines", d.lines);
    fmt::print("  {:<22} {:>14.1f}\n", "bytes/document mean", mean);
    fmt::print("  {:<22} {:>14}\n", "  min / p50",
               fmt::format("{} / {}", j["document_bytes"]["min"].get<uint64_t>(),
                           percentile(d.lengths, 0.5)));
    fmt::print("  {:<22} {:>14}\n", "  p90 / p99",
               fmt::format("{} / {}", percentile(d.lengths, 0.9), percentile(d.lengths, 0.99)));
    fmt::print("  {:<22} {:>14}\n", "  max", j["document_bytes"]["max"].get<uint64_t>());
    fmt::print("  {:<22} {:>14}  ({:.4f}%)\n", "non-UTF-8 bytes", d.invalid,
               100.0 * static_cast<double>(d.invalid) / bytes);
    fmt::print("  {:<22} {:>14}  ({:.4f}%)\n", "control bytes", d.control,
               100.0 * static_cast<double>(d.control) / bytes);
    {
      std::vector<std::pair<uint64_t, std::string>> by(scripts.dominant.size());
      size_t k = 0;
      for (const auto& [name, n] : scripts.dominant) by[k++] = {n, name};
      std::sort(by.rbegin(), by.rend());
      nlohmann::json dom = nlohmann::json::object();
      std::string top;
      for (const auto& [n, name] : by) {
        dom[name] = n;
        if (top.size() < 60) top += fmt::format("{}{} {}", top.empty() ? "" : ", ", name, n);
      }
      j["scripts"] = {{"dominant", dom},
                      {"mixed_documents", scripts.mixed},
                      {"no_letter_documents", scripts.no_letters},
                      {"note", "Unicode scripts of the letters (ICU); a second script with >= "
                               "10% of a document's letters makes it mixed"}};
      fmt::print("  {:<22} {:>14}  ({})\n", "scripts (documents)", by.size(), top);
      fmt::print("  {:<22} {:>14}\n", "  mixed scripts", scripts.mixed);
      fmt::print("  {:<22} {:>14}\n", "  no letters", scripts.no_letters);
    }
    if (dups) {
      const double docs = static_cast<double>(std::max<uint64_t>(d.documents, 1));
      j["duplicates"] = {
          {"exact_documents", dups->exact},
          {"exact_share", static_cast<double>(dups->exact) / docs},
          {"exact_bytes", dups->exact_bytes},
          {"near_documents_estimated", dups->near},
          {"near_share_estimated", static_cast<double>(dups->near) / docs},
          {"near_bytes_estimated", dups->near_bytes},
          {"near_threshold", o.near_threshold},
          {"method",
           fmt::format("XXH3-128 of the text; near: MinHash estimate of word 5-gram Jaccard "
                       "(128 permutations, LSH {} x {}) against earlier distinct documents; "
                       "ft-data clean decides exactly",
                       dups->params().bands, dups->params().rows)}};
      fmt::print("  {:<22} {:>14}  ({:.2f}% of documents)\n", "exact duplicates", dups->exact,
                 100.0 * static_cast<double>(dups->exact) / docs);
      fmt::print("  {:<22} {:>14}  ({:.2f}%, estimated at J >= {})\n", "near duplicates",
                 dups->near, 100.0 * static_cast<double>(dups->near) / docs, o.near_threshold);
    }
    if (tok) {
      const double bpt =
          d.tokens ? static_cast<double>(d.bytes) / static_cast<double>(d.tokens) : 0.0;
      j["tokens"] = {
          {"tokenizer", tok->name()},
          {"vocab_size", tok->vocab_size()},
          {"tokens", d.tokens},
          {"bytes_per_token", bpt},
          {"mean_per_document", d.documents ? static_cast<double>(d.tokens) / d.documents : 0.0},
          {"note", "document text only; ft-data tokenize adds one separator each"}};
      fmt::print("  {:<22} {:>14}  ({} tokenizer, {:.3f} bytes/token)\n", "tokens", d.tokens,
                 tok->name(), bpt);
    }
  }

  int status = 0;
  if (!shard_paths.empty()) {
    auto& arr = out["shards"];
    arr = nlohmann::json::array();
    uint64_t total_tokens = 0, total_bytes = 0;
    int max_id = -1, bad = 0;
    fmt::print("{:<40} {:>7} {:>12} {:>12} {:>8}\n", "shard", "version", "tokens", "bytes",
               "max id");
    for (const auto& p : shard_paths) {
      const ShardStats s = shard_stats(p, o.vocab_size);
      nlohmann::json e = {{"file", s.file}, {"bytes", s.bytes}};
      if (s.error.empty()) {
        e["version"] = s.version;
        e["tokens"] = s.tokens;
        e["max_id"] = s.max_id;
        total_tokens += s.tokens;
        total_bytes += s.bytes;
        max_id = std::max(max_id, s.max_id);
        fmt::print("{:<40} {:>7} {:>12} {:>12} {:>8}\n", p.filename().string(), s.version, s.tokens,
                   s.bytes, s.max_id);
      } else {
        e["error"] = s.error;
        ++bad;
        fmt::print("{:<40} error: {}\n", p.filename().string(), s.error);
      }
      arr.push_back(e);
    }
    out["shard_totals"] = {{"shards", shard_paths.size()},
                           {"bad", bad},
                           {"tokens", total_tokens},
                           {"bytes", total_bytes},
                           {"max_id", max_id}};
    fmt::print("{:<40} {:>7} {:>12} {:>12} {:>8}\n",
               fmt::format("total ({} shards, {} bad)", shard_paths.size(), bad), "", total_tokens,
               total_bytes, max_id);
    if (bad > 0) status = 1;
  }
  if (!o.json.empty()) write_file_atomic(o.json, out.dump(1) + "\n");
  return status;
}

}  // namespace ft::data_cli
