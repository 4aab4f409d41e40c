// loader_datasets.cpp: chunked token and document datasets, --data resolution and the preprocessing
// passes.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <system_error>

#include "ft/core/error.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/loader.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

std::string human_count(size_t n) {
  if (n < 1000) return fmt::format("{}", n);
  if (n < 1000000) return fmt::format("{:.1f}K", n / 1e3);
  if (n < 1000000000) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.2f}B", n / 1e9);
}

class TokenDataset : public ChunkedDataset {
 public:
  TokenDataset(std::shared_ptr<TokenSource> source, int seq_len, int chunk_rows, int vocab_limit)
      : source_(std::move(source)),
        T_(seq_len),
        chunk_rows_(chunk_rows),
        vocab_limit_(vocab_limit) {
    if (!source_) throw ConfigError("make_token_dataset: no token source");
    if (T_ <= 0 || chunk_rows_ <= 0) {
      throw ConfigError(fmt::format("make_token_dataset: seq_len {} and chunk_rows {} must be > 0",
                                    T_, chunk_rows_));
    }
    rows_ = source_->size() > 0 ? (source_->size() - 1) / static_cast<size_t>(T_) : 0;
  }
  size_t num_chunks() const override { return (rows_ + chunk_rows_ - 1) / chunk_rows_; }
  uint64_t read_chunk(size_t c, int preprocess_cost, std::vector<int32_t>& out) const override {
    const size_t r0 = c * chunk_rows_, r1 = std::min(rows_, r0 + chunk_rows_);
    if (r0 >= r1) throw Error(fmt::format("token chunk {} out of range", c));
    const size_t begin = r0 * T_, n = (r1 - r0) * T_ + 1;
    const size_t at = out.size();
    out.resize(at + n);
    source_->read(begin, n, out.data() + at);
    if (vocab_limit_ > 0) {
      for (size_t i = 0; i < n; ++i) {
        const int32_t t = out[at + i];
        if (t < 0 || t >= vocab_limit_) {
          throw FormatError(
              fmt::format("{}: token id {} at token {} is outside the vocabulary [0, {})",
                          source_name_, t, begin + i, vocab_limit_));
        }
      }
    }
    if (preprocess_cost <= 0) return 0;
    std::string scratch;
    const std::string_view bytes(reinterpret_cast<const char*>(out.data() + at),
                                 n * sizeof(int32_t));
    return preprocess_text(bytes, preprocess_cost, scratch);
  }
  size_t approx_tokens() const override { return source_->size(); }
  int max_token_bound() const override { return source_->max_token(); }
  std::string describe() const override {
    return fmt::format("{} tokens, {} chunks of {} rows", human_count(source_->size()),
                       num_chunks(), chunk_rows_);
  }
  void set_name(std::string name) { source_name_ = std::move(name); }

 private:
  std::shared_ptr<TokenSource> source_;
  int T_, chunk_rows_, vocab_limit_;
  size_t rows_ = 0;
  std::string source_name_ = "token data";
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

class DocumentDataset : public ChunkedDataset {
 public:
  DocumentDataset(std::shared_ptr<const DocumentStore> store, std::shared_ptr<const Tokenizer> tok,
                  const DocumentDatasetOptions& o)
      : store_(std::move(store)), tok_(std::move(tok)), o_(o) {
    if (!store_ || !tok_) throw ConfigError("make_document_dataset: no documents or no tokenizer");
    if (o_.seq_len <= 0) throw ConfigError("make_document_dataset: seq_len must be > 0");
    bytes_per_token_ = tok_->vocab_size() > 256 ? 4 : 1;
    const size_t target = o_.chunk_bytes > 0
                              ? o_.chunk_bytes
                              : static_cast<size_t>(64) * o_.seq_len * bytes_per_token_;
    size_t acc = 0;
    for (size_t i = 0; i < store_->docs.size(); ++i) {
      if (acc == 0) starts_.push_back(i);
      acc += store_->docs[i].size + o_.separator.size();
      total_bytes_ += store_->docs[i].size + o_.separator.size();
      if (acc >= target) acc = 0;
    }
    starts_.push_back(store_->docs.size());
  }
  size_t num_chunks() const override { return starts_.size() - 1; }
  uint64_t read_chunk(size_t c, int preprocess_cost, std::vector<int32_t>& out) const override {
    if (c + 1 >= starts_.size()) throw Error(fmt::format("document chunk {} out of range", c));
    uint64_t checksum = 0;
    std::string text, scratch;
    for (size_t i = starts_[c]; i < starts_[c + 1]; ++i) {
      const DocumentStore::Doc& d = store_->docs[i];
      const std::string_view raw(store_->text.data() + d.offset, d.size);
      if (d.jsonl) {
        const DocumentOrigin origin{store_->files[d.file], d.line};
        text = decode_jsonl_document(raw, origin, store_->text_field);
        if (trim(text).empty()) continue;
      } else {
        text.assign(raw);
      }
      text += o_.separator;
      if (preprocess_cost > 0) {
        checksum = checksum * kFnvPrime ^ preprocess_text(text, preprocess_cost, scratch);
      }
      if (o_.eot_token >= 0) out.push_back(o_.eot_token);
      const std::vector<int32_t> ids = tok_->encode(text);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    return checksum;
  }
  size_t approx_tokens() const override { return total_bytes_ / bytes_per_token_; }
  int max_token_bound() const override { return std::max(tok_->vocab_size() - 1, o_.eot_token); }
  std::string describe() const override {
    return fmt::format("{} documents, {} chunks", store_->docs.size(), num_chunks());
  }
  size_t num_documents() const { return store_->docs.size(); }

 private:
  std::shared_ptr<const DocumentStore> store_;
  std::shared_ptr<const Tokenizer> tok_;
  DocumentDatasetOptions o_;
  std::vector<size_t> starts_;  // first document of each chunk, then the end
  size_t total_bytes_ = 0;
  int bytes_per_token_ = 1;
};

bool has_shards(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".bin") return true;
  }
  return false;
}

bool is_token_data(const std::string& spec) {
  if (spec == "kjv") return false;
  std::error_code ec;
  const fs::file_status st = fs::status(spec, ec);
  if (fs::is_directory(st)) return has_shards(spec);
  return fs::is_regular_file(st) && fs::path(spec).extension() == ".bin";
}

struct SplitStores {
  std::shared_ptr<DocumentStore> train, val;
  size_t documents = 0;
};

// Reads the documents of `spec` and splits them by index.
SplitStores read_documents(const std::string& spec, int val_every) {
  std::vector<fs::path> paths{spec == "kjv" ? kjv_text_path() : fs::path(spec)};
  std::error_code ec;
  if (spec != "kjv" && !fs::exists(paths[0], ec)) {
    throw ConfigError(fmt::format(
        "--data '{}': no such file or directory (expected 'kjv', a text, fortune or JSONL file, "
        "a directory of them, an llm.c .bin shard or a directory of shards)",
        spec));
  }
  DocumentReadOptions ro;
  ro.raw_jsonl = true;
  auto all = std::make_shared<DocumentStore>();
  for_each_document(
      paths,
      [&](std::string_view text, const DocumentOrigin& origin) {
        const bool jsonl = is_jsonl_path(origin.file);
        all->add(text, origin.file, origin.line, jsonl);
        return true;
      },
      ro);
  if (all->docs.empty()) throw ConfigError(fmt::format("--data '{}': no documents", spec));
  SplitStores s;
  s.documents = all->docs.size();
  s.train = std::make_shared<DocumentStore>();
  s.val = std::make_shared<DocumentStore>();
  auto copy = [&](DocumentStore& dst, const DocumentStore::Doc& d, size_t off, size_t n) {
    dst.add(std::string_view(all->text.data() + d.offset + off, n), all->files[d.file], d.line,
            d.jsonl);
  };
  const size_t n = all->docs.size();
  if (val_every <= 0) {
    s.train = all;
  } else if (n >= static_cast<size_t>(val_every)) {
    for (size_t i = 0; i < n; ++i) {
      copy(i % val_every == static_cast<size_t>(val_every - 1) ? *s.val : *s.train, all->docs[i], 0,
           all->docs[i].size);
    }
  } else if (n >= 2) {  // too few documents: the last one is the validation set
    for (size_t i = 0; i + 1 < n; ++i) copy(*s.train, all->docs[i], 0, all->docs[i].size);
    copy(*s.val, all->docs[n - 1], 0, all->docs[n - 1].size);
  } else {  // one document: the last 5% of its bytes (JSONL cannot be cut and stays whole)
    const DocumentStore::Doc& d = all->docs[0];
    const size_t cut = d.jsonl ? d.size : d.size - d.size / 20;
    copy(*s.train, d, 0, cut);
    if (cut < d.size) copy(*s.val, d, cut, d.size - cut);
  }
  return s;
}

}  // namespace

void DocumentStore::add(std::string_view t, const std::string& file, uint64_t line, bool jsonl) {
  if (files.empty() || files.back() != file) files.push_back(file);
  Doc d;
  d.offset = text.size();
  d.size = t.size();
  d.file = static_cast<uint32_t>(files.size() - 1);
  d.line = line;
  d.jsonl = jsonl;
  text.append(t);
  docs.push_back(d);
}

uint64_t preprocess_text(std::string_view text, int passes, std::string& scratch) {
  uint64_t h = kFnvOffset;
  scratch.resize(text.size());
  for (int p = 0; p < passes; ++p) {
    // Normalise: fold ASCII case (lower on even passes, upper on odd) and collapse whitespace
    // runs to one space; then hash the result, chained through the previous pass's hash.
    const bool upper = (p & 1) != 0;
    size_t n = 0;
    bool in_space = false;
    for (const char ch : text) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        if (!in_space) scratch[n++] = ' ';
        in_space = true;
        continue;
      }
      in_space = false;
      unsigned char o = c;
      if (upper && c >= 'a' && c <= 'z') o = static_cast<unsigned char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') o = static_cast<unsigned char>(c + 32);
      scratch[n++] = static_cast<char>(o);
    }
    uint64_t x = h ^ static_cast<uint64_t>(p);
    for (size_t i = 0; i < n; ++i) x = (x ^ static_cast<unsigned char>(scratch[i])) * kFnvPrime;
    h = x;
  }
  return h;
}

std::shared_ptr<const ChunkedDataset> make_token_dataset(std::shared_ptr<TokenSource> source,
                                                         int seq_len, int chunk_rows,
                                                         int vocab_limit) {
  return std::make_shared<TokenDataset>(std::move(source), seq_len, chunk_rows, vocab_limit);
}

std::shared_ptr<const ChunkedDataset> make_document_dataset(
    std::shared_ptr<const DocumentStore> store, std::shared_ptr<const Tokenizer> tokenizer,
    const DocumentDatasetOptions& options) {
  return std::make_shared<DocumentDataset>(std::move(store), std::move(tokenizer), options);
}

namespace {
DocumentDatasetOptions document_options(const Tokenizer& tok, const DataOptions& o) {
  DocumentDatasetOptions d;
  d.seq_len = o.seq_len;
  // The byte tokenizer has no end-of-text id: documents end with a blank line, as in the source
  // text. A tokenizer with GPT-2's vocabulary gets <|endoftext|> (50256) before each document.
  if (tok.vocab_size() == 50257) {
    d.separator = "";
    d.eot_token = 50256;
  }
  return d;
}

std::shared_ptr<const ChunkedDataset> token_dataset(std::shared_ptr<TokenSource> src,
                                                    const std::string& name, const DataOptions& o) {
  auto d = std::make_shared<TokenDataset>(std::move(src), o.seq_len, 64, o.vocab_limit);
  d->set_name(name);
  return d;
}
}  // namespace

DataSplit open_data(const std::string& spec, std::shared_ptr<const Tokenizer> tokenizer,
                    const DataOptions& options) {
  if (!tokenizer) throw ConfigError("open_data: no tokenizer");
  DataSplit s;
  if (is_token_data(spec)) {
    TrainValSplit t = load_data(spec, *tokenizer);
    s.train = token_dataset(t.train, spec, options);
    s.val = token_dataset(t.val, spec, options);
    s.description = t.description;
    return s;
  }
  SplitStores docs = read_documents(spec, options.val_every);
  const DocumentDatasetOptions dopt = document_options(*tokenizer, options);
  s.train = make_document_dataset(docs.train, tokenizer, dopt);
  s.val = make_document_dataset(docs.val, tokenizer, dopt);
  const std::string how =
      docs.documents >= static_cast<size_t>(options.val_every)
          ? fmt::format("every {}th document to val", options.val_every)
          : std::string("too few documents: the last one (or the last 5%) to val");
  s.description =
      fmt::format("{} ({}): {} documents, {}{} train / {} val tokens ({}), {} train chunks", spec,
                  tokenizer->name(), docs.documents, tokenizer->vocab_size() > 256 ? "~" : "",
                  human_count(s.train->approx_tokens()), human_count(s.val->approx_tokens()), how,
                  s.train->num_chunks());
  return s;
}

std::shared_ptr<const ChunkedDataset> open_data_whole(const std::string& spec,
                                                      std::shared_ptr<const Tokenizer> tokenizer,
                                                      const DataOptions& options,
                                                      std::string* description) {
  if (!tokenizer) throw ConfigError("open_data_whole: no tokenizer");
  std::shared_ptr<const ChunkedDataset> d;
  if (is_token_data(spec)) {
    TrainValSplit t = load_data(spec, *tokenizer);
    d = token_dataset(make_concat_source({t.train, t.val}), spec, options);
  } else {
    SplitStores docs = read_documents(spec, 0);
    d = make_document_dataset(docs.train, tokenizer, document_options(*tokenizer, options));
  }
  if (description) *description = fmt::format("all of '{}' ({})", spec, d->describe());
  return d;
}

}  // namespace ft::trainer::data
