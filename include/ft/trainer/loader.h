// loader.h: the prefetching multi-worker input pipeline (chunked datasets, staging buffers,
// timing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ft/trainer/data.h"

namespace ft::trainer::data {

// ---- datasets -----------------------------------------------------------------------------
//
// A dataset is cut into a fixed list of chunks at construction (independent of the worker
// count, the batch size and the seed). A chunk is the unit of parallel work: a worker turns
// chunk c into one token stream (read, decode, preprocess, tokenize), which is packed into
// rows of T+1 tokens with stride T (row i = stream[i*T, i*T+T+1)); a tail shorter than T+1 is
// dropped. The content of chunk c depends only on c, so the batches are the same whatever the
// number of workers.
class ChunkedDataset {
 public:
  virtual ~ChunkedDataset() = default;
  virtual size_t num_chunks() const = 0;
  // Appends chunk `c`'s token stream to `out`. `preprocess_cost` > 0 runs that many passes of
  // text normalisation + hashing over the chunk's text (real work that does not change the
  // tokens); their checksum is returned (0 without passes). Throws ft::Error on bad data.
  virtual uint64_t read_chunk(size_t c, int preprocess_cost, std::vector<int32_t>& out) const = 0;
  // Tokens of the whole dataset: exact for token data, an estimate for documents.
  virtual size_t approx_tokens() const = 0;
  // An upper bound on the token ids it produces (for the vocabulary check).
  virtual int max_token_bound() const = 0;
  virtual std::string describe() const = 0;
};

// Token data (an llm.c shard, a concatenation of shards, tokens in memory): chunk c holds rows
// [c*chunk_rows, (c+1)*chunk_rows) of the sequential windows, so nothing is dropped between
// chunks. Ids >= vocab_limit (when > 0) are a FormatError raised by the worker that reads them.
std::shared_ptr<const ChunkedDataset> make_token_dataset(std::shared_ptr<TokenSource> source,
                                                         int seq_len, int chunk_rows = 64,
                                                         int vocab_limit = 0);

// Documents held in memory: plain text, or raw JSONL lines decoded (parsed) by the workers.
struct DocumentStore {
  struct Doc {
    size_t offset = 0, size = 0;  // into `text`
    uint32_t file = 0;            // index into `files`
    uint64_t line = 0;            // 1-based first line in that file
    bool jsonl = false;           // text is a raw JSON line; the worker extracts `text_field`
  };
  std::string text;
  std::vector<Doc> docs;
  std::vector<std::string> files;
  std::string text_field = "text";
  void add(std::string_view text, const std::string& file, uint64_t line, bool jsonl);
};

struct DocumentDatasetOptions {
  int seq_len = 128;
  std::string separator = "\n\n";  // text appended to every document before tokenizing
  int eot_token = -1;              // >= 0: this id precedes every document (GPT-2: 50256)
  size_t chunk_bytes = 0;  // documents per chunk: at least this many bytes (0: 64*T*4 or 64*T)
};

std::shared_ptr<const ChunkedDataset> make_document_dataset(
    std::shared_ptr<const DocumentStore> store, std::shared_ptr<const Tokenizer> tokenizer,
    const DocumentDatasetOptions& options);

// Training and validation datasets for --data / --val-data.
struct DataSplit {
  std::shared_ptr<const ChunkedDataset> train, val;
  std::string description;
};

struct DataOptions {
  int seq_len = 128;
  int vocab_limit = 0;  // token data: ids must be below this (0: unchecked)
  int val_every = 20;  // documents: document i goes to validation when i % val_every == val_every-1
};

// Resolves a data spec:
//  - "kjv": the cached King James Bible; documents are chapters;
//  - an llm.c shard (*.bin) or a directory holding *.bin shards: token data, split as
//    load_data() does (files with "val" in the name, else the last 5% by position);
//  - any other file or directory: documents through for_each_document (text, fortune, JSONL,
//    gzip); split by document index, every `val_every`-th to validation (reproducible, seed-free).
// Throws ConfigError for a missing path or no data, FormatError / IoError from the readers.
DataSplit open_data(const std::string& spec, std::shared_ptr<const Tokenizer> tokenizer,
                    const DataOptions& options);
// The whole of `spec` as one dataset (train and validation parts concatenated): --val-data.
std::shared_ptr<const ChunkedDataset> open_data_whole(const std::string& spec,
                                                      std::shared_ptr<const Tokenizer> tokenizer,
                                                      const DataOptions& options,
                                                      std::string* description = nullptr);

// Runs `passes` passes of the loader's preprocessing (ASCII case folding, whitespace collapsing
// and an FNV-1a hash of the result) over `text`; returns the combined hash.
uint64_t preprocess_text(std::string_view text, int passes, std::string& scratch);

// ---- staging buffers ----------------------------------------------------------------------

// Where batches are written. The loader allocates a fixed pool of buffers once and reuses them;
// a CUDA backend provides page-locked memory and starts the host-to-device copy of a filled
// buffer in `on_filled` (called on the thread that filled it, before it is queued).
class StagingBackend {
 public:
  virtual ~StagingBackend() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  virtual void on_filled(void* /*p*/, size_t /*bytes*/, int64_t /*batch_index*/) {}
  virtual std::string name() const = 0;
};
// Plain host memory, 64-byte aligned, pre-faulted.
std::shared_ptr<StagingBackend> make_host_staging();

// ---- the loader ---------------------------------------------------------------------------

struct BatchTiming {
  int64_t index = -1;         // batch number since the loader's start position
  int worker = -1;            // worker that preprocessed its first row (-1: training thread)
  int64_t preprocess_ns = 0;  // chunk preprocessing apportioned by rows, plus the batch copy
  int64_t wait_ns = 0;        // training thread blocked in next() (in-line: the whole call)
  int64_t tokens = 0;         // B*T
};

// Position of the next batch: chunk `chunk` of the global chunk sequence (epoch = chunk /
// num_chunks; the order inside an epoch is that epoch's permutation) and row `row` within it.
struct LoaderState {
  uint64_t chunk = 0;
  uint64_t row = 0;
  uint64_t batches = 0;  // batches of the sequence before this position (with a shard: all
                         // of them, delivered or skipped; it places the shard on resume)
};

struct LoaderOptions {
  int batch_size = 8;  // B
  int seq_len = 128;   // T
  int workers = 1;     // 0: everything in-line on the caller's thread
  int prefetch = 4;    // ready batches queued ahead
  int preprocess_cost = 0;
  bool shuffle = true;  // chunk order per epoch and rows within a chunk, from `seed`
  uint64_t seed = 1337;
  bool finite = false;  // one epoch, then next() returns false; else epochs repeat
  LoaderState start;
  // Data-parallel share of the batch sequence: batch g (its number in the whole sequence,
  // LoaderState::batches) is delivered only when g % shard_period is in
  // [shard_first, shard_first + shard_count); the others advance the position without being
  // copied (their chunks are still read). Default: every batch.
  int shard_period = 1, shard_first = 0, shard_count = 1;
  std::shared_ptr<StagingBackend> staging;  // null: make_host_staging()
  size_t timing_capacity = 1 << 16;         // timings kept for take_timings()
};

class StagingPool;

// A batch: inputs and targets (B,T) in a staging buffer that returns to the pool when the
// Batch is destroyed or overwritten.
class Batch {
 public:
  Batch() = default;
  ~Batch();
  Batch(Batch&& o) noexcept;
  Batch& operator=(Batch&& o) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  const int32_t* inputs() const { return data_; }
  const int32_t* targets() const { return data_ + bt_; }
  bool empty() const { return data_ == nullptr; }
  BatchTiming timing;
  LoaderState next;       // position after this batch
  uint64_t checksum = 0;  // preprocessing checksum of the chunks it drew rows from

 private:
  friend class PrefetchLoader;
  void release() noexcept;
  std::shared_ptr<StagingPool> pool_;
  int32_t* data_ = nullptr;
  size_t bt_ = 0;
};

class PrefetchLoader {
 public:
  // Starts the workers. Throws ConfigError on bad options or an empty dataset.
  PrefetchLoader(std::shared_ptr<const ChunkedDataset> dataset, LoaderOptions options);
  // Stops and joins the workers; never blocks on a full queue or unfinished data.
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  // The next batch into `out` (its previous buffer is released first). Returns false at the
  // end of a finite loader. A worker's error is rethrown here (as the ft::Error it was), at the
  // batch where the bad chunk would have been used, so it is the same for every worker count.
  bool next(Batch& out);
  // Position of the batch the next call returns.
  LoaderState state() const { return state_; }
  uint64_t epoch() const;
  // Timings of the batches delivered since the last call (oldest first; at most
  // timing_capacity are kept, the count of older ones dropped is in timings_dropped()).
  std::vector<BatchTiming> take_timings();
  uint64_t timings_dropped() const { return timings_dropped_; }
  // Requests shutdown: blocked workers and a blocked next() return promptly.
  void stop();
  const LoaderOptions& options() const { return options_; }

  class Impl;

 private:
  LoaderOptions options_;
  LoaderState state_;
  std::unique_ptr<Impl> impl_;
  std::deque<BatchTiming> timings_;
  uint64_t timings_dropped_ = 0;
  std::exception_ptr failed_;
  bool ended_ = false;
};

}  // namespace ft::trainer::data
