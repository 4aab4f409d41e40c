// data.h: tokenizers, the default corpus, llm.c token shards and the sequential batch loader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ft::trainer::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int vocab_size() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const int32_t* tokens, size_t n) const = 0;
  // Short name for descriptions, e.g. "byte".
  virtual std::string name() const { return "tokenizer"; }
};

// One token per byte; vocabulary 256.
class ByteTokenizer : public Tokenizer {
 public:
  int vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  // Ids outside [0, 256) decode to U+FFFD.
  std::string decode(const int32_t* tokens, size_t n) const override;
  std::string name() const override { return "byte"; }
};

// A read-only sequence of token ids.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual size_t size() const = 0;
  // Copies tokens [pos, pos+n) into out; requires pos + n <= size().
  virtual void read(size_t pos, size_t n, int32_t* out) const = 0;
  virtual int max_token() const = 0;  // largest id present (for vocab checks)
};

std::shared_ptr<TokenSource> make_vector_source(std::vector<int32_t> tokens);
// The parts back to back, in order (e.g. several shards as one stream).
std::shared_ptr<TokenSource> make_concat_source(std::vector<std::shared_ptr<TokenSource>> parts);
// Tokens [begin, begin+n) of `base`; throws ConfigError if out of range.
std::shared_ptr<TokenSource> make_slice_source(std::shared_ptr<TokenSource> base, size_t begin,
                                               size_t n);

// An llm.c token shard: header of 256 int32 {20240520, version, num_tokens},
// then num_tokens ids, uint16 for version 1 and uint32 for version 7.
// Memory-mapped. Throws FormatError on a bad magic/version or a size that
// disagrees with the header, naming the file.
std::shared_ptr<TokenSource> open_llmc_shard(const std::filesystem::path& path);
// As above, and also reads every id: throws FormatError naming the file, the position and the
// id of the first token >= vocab_size.
std::shared_ptr<TokenSource> open_llmc_shard(const std::filesystem::path& path, int vocab_size);
void write_llmc_shard(const std::filesystem::path& path, const std::vector<int32_t>& tokens,
                      int version = 1);  // atomic

// ft's cache directory: $FT_CACHE_DIR, else $XDG_CACHE_HOME/ft, else
// $HOME/.cache/ft (created if missing; throws IoError if none is set).
std::filesystem::path cache_dir();

// The King James Bible from Debian's bible-kjv, verse references stripped, one
// verse per line and a blank line between chapters. Cached as cache_dir()/kjv.txt,
// generated atomically on first use with `bible -f "Gen1:1-Rev22:21"`. Throws
// IoError if `bible` is missing (naming the package to install).
std::filesystem::path kjv_text_path();

struct TrainValSplit {
  std::shared_ptr<TokenSource> train;
  std::shared_ptr<TokenSource> val;
  std::string description;  // e.g. "kjv (byte): 4.2M train / 0.2M val tokens"
};

// Resolves --data: "kjv", a text file (byte-tokenized), one .bin shard (split
// 95/5 by position), or a directory of shards (files containing "val" are
// validation; with none, the last 5% of the concatenation). Text is split into
// chapters/paragraphs at blank lines, every 20th (index % 20 == 19) to
// validation; text with fewer than 20 paragraphs is split 95/5 by position.
// Throws ConfigError for a missing path or empty data.
TrainValSplit load_data(const std::string& spec, const Tokenizer& tokenizer);

// Sequential (B,T) batches over a TokenSource (training uses PrefetchLoader, loader.h; this
// simple loader remains as the reference that one is tested against): each batch reads B*T+1
// tokens, inputs are tokens[0..BT), targets tokens[1..BT]; the cursor
// advances by B*T and wraps to 0 when the next batch would run past the end.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<TokenSource> source, int B, int T);
  // inputs (B,T), targets (B,T)
  void next(int32_t* inputs, int32_t* targets);
  uint64_t position() const { return position_; }
  void set_position(uint64_t pos);  // throws ConfigError if out of range
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t e) { epoch_ = e; }
  size_t batches_per_epoch() const;

 private:
  std::shared_ptr<TokenSource> source_;
  int B_, T_;
  uint64_t position_ = 0;
  uint64_t epoch_ = 0;
  std::vector<int32_t> scratch_;
};

}  // namespace ft::trainer::data
