// loader_test.cpp: the prefetching loader: determinism across workers, shuffle, errors, shutdown,
// resume, timing, staging.
#include "ft/trainer/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::trainer::data {
namespace {

namespace fs = std::filesystem;

// Runs `fn` on another thread; a deadlock (no return within `seconds`) fails and aborts the test
// binary instead of hanging ctest.
template <typename Fn>
void within(double seconds, Fn&& fn, const char* what) {
  auto fut = std::async(std::launch::async, std::forward<Fn>(fn));
  if (fut.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "DEADLOCK: %s did not finish within %.0f s\n", what, seconds);
    std::abort();
  }
  fut.get();
}

// Token i has id i % mod (row r starts with id (r*T) % mod).
std::shared_ptr<TokenSource> counting_source(size_t n, int32_t mod = 1 << 30) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i % static_cast<size_t>(mod));
  return make_vector_source(std::move(v));
}

struct Copy {
  std::vector<int32_t> inputs, targets;
  uint64_t checksum = 0;
  bool operator==(const Copy& o) const {
    return inputs == o.inputs && targets == o.targets && checksum == o.checksum;
  }
};

std::vector<Copy> take(PrefetchLoader& l, size_t n) {
  std::vector<Copy> out;
  Batch b;
  const size_t bt = static_cast<size_t>(l.options().batch_size) * l.options().seq_len;
  while (out.size() < n && l.next(b)) {
    out.push_back({std::vector<int32_t>(b.inputs(), b.inputs() + bt),
                   std::vector<int32_t>(b.targets(), b.targets() + bt), b.checksum});
  }
  return out;
}

LoaderOptions opts(int workers, int prefetch = 3, int B = 4, int T = 16) {
  LoaderOptions o;
  o.batch_size = B;
  o.seq_len = T;
  o.workers = workers;
  o.prefetch = prefetch;
  o.seed = 7;
  return o;
}

std::shared_ptr<const DocumentStore> synthetic_docs(int n) {
  auto s = std::make_shared<DocumentStore>();
  for (int i = 0; i < n; ++i) {
    std::string text = "Document " + std::to_string(i) + ":";
    for (int w = 0; w < 5 + i % 23; ++w) text += " Word" + std::to_string((i * 31 + w) % 97);
    s->add(text, "synthetic", static_cast<uint64_t>(i + 1), false);
  }
  return s;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_loader_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(Loader, BatchesAreIdenticalForEveryWorkerCountAndPrefetch) {
  // 1249 rows of T=16 in 157 chunks of 8 rows; 400 batches of 4 cross into the second epoch.
  auto tokens = make_token_dataset(counting_source(20000), 16, 8);
  auto docs = make_document_dataset(synthetic_docs(300), std::make_shared<ByteTokenizer>(),
                                    {.seq_len = 16, .chunk_bytes = 700});
  for (auto ds : {tokens, docs}) {
    LoaderOptions o0 = opts(0);
    o0.preprocess_cost = 2;
    PrefetchLoader ref_loader(ds, o0);
    const std::vector<Copy> ref = take(ref_loader, 400);
    ASSERT_EQ(ref.size(), 400u);
    EXPECT_NE(ref[0].checksum, 0u);
    for (int workers : {1, 2, 4}) {
      for (int prefetch : {1, 5}) {
        LoaderOptions o = opts(workers, prefetch);
        o.preprocess_cost = 2;
        PrefetchLoader l(ds, o);
        const std::vector<Copy> got = take(l, 400);
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_TRUE(got[i] == ref[i]) << ds->describe() << " workers " << workers << " prefetch "
                                        << prefetch << " batch " << i;
        }
      }
    }
  }
}

TEST(Loader, ShuffleIsASeededPermutationOfAllRows) {
  const int T = 16;
  auto ds = make_token_dataset(counting_source(10 * 1000 + 1), T, 8);  // 625 rows
  auto epoch_rows = [&](bool shuffle, uint64_t seed, int workers) {
    LoaderOptions o = opts(workers, 2, 1, T);
    o.finite = true;
    o.shuffle = shuffle;
    o.seed = seed;
    PrefetchLoader l(ds, o);
    std::vector<int32_t> starts;
    for (const Copy& c : take(l, 100000)) {
      starts.push_back(c.inputs[0]);
      for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(c.targets[t], c.inputs[t + 1]);
      EXPECT_EQ(c.targets[T - 1], c.inputs[T - 1] + 1);  // targets continue the stream
    }
    return starts;
  };
  std::vector<int32_t> all(625);
  for (int r = 0; r < 625; ++r) all[r] = r * T;
  const auto seq = epoch_rows(false, 1, 2);
  EXPECT_EQ(seq, all) << "without shuffle the rows come in order";
  const auto a = epoch_rows(true, 1, 2), b = epoch_rows(true, 2, 2), a0 = epoch_rows(true, 1, 0);
  EXPECT_NE(a, all);
  EXPECT_NE(a, b) << "the order depends on the seed";
  EXPECT_EQ(a, a0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, all) << "one epoch is a permutation of all rows";
}

TEST(Loader, EpochsHaveDifferentOrders) {
  auto ds = make_token_dataset(counting_source(64 * 16 + 1), 16, 4);  // 64 rows, 16 chunks
  PrefetchLoader l(ds, opts(2, 2, 8, 16));
  const auto batches = take(l, 16);  // two epochs
  std::vector<int32_t> e0, e1;
  for (size_t i = 0; i < 16; ++i) {
    for (int b = 0; b < 8; ++b) (i < 8 ? e0 : e1).push_back(batches[i].inputs[b * 16]);
  }
  EXPECT_NE(e0, e1);
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, e1);
  EXPECT_EQ(l.epoch(), 2u);
}

TEST(Loader, UnshuffledTokenBatchesMatchTheSequentialLoader) {
  auto src = counting_source(5000, 256);
  auto ds = make_token_dataset(src, 16, 8);
  LoaderOptions o = opts(3, 2, 4, 16);
  o.shuffle = false;
  PrefetchLoader l(ds, o);
  BatchLoader seq(src, 4, 16);
  std::vector<int32_t> in(64), tg(64);
  for (const Copy& c : take(l, 70)) {  // 78 batches per epoch for the sequential loader
    seq.next(in.data(), tg.data());
    ASSERT_EQ(c.inputs, in);
    ASSERT_EQ(c.targets, tg);
  }
}

TEST(Loader, ResumesFromAnySavedPosition) {
  auto ds = make_token_dataset(counting_source(3000), 16, 8);  // 187 rows, 24 chunks
  PrefetchLoader a(ds, opts(2));
  std::vector<Copy> full;
  std::vector<LoaderState> after;
  Batch b;
  while (full.size() < 120 && a.next(b)) {  // 480 rows: more than two epochs
    full.push_back({std::vector<int32_t>(b.inputs(), b.inputs() + 64),
                    std::vector<int32_t>(b.targets(), b.targets() + 64), b.checksum});
    after.push_back(b.next);
    EXPECT_EQ(a.state().chunk, b.next.chunk);
  }
  for (size_t k : {0, 17, 46, 47, 100}) {
    for (int workers : {0, 3}) {
      LoaderOptions o = opts(workers);
      o.start = after[k];
      PrefetchLoader r(ds, o);
      const std::vector<Copy> rest = take(r, full.size() - k - 1);
      ASSERT_EQ(rest.size(), full.size() - k - 1);
      for (size_t i = 0; i < rest.size(); ++i) {
        ASSERT_TRUE(rest[i] == full[k + 1 + i]) << "resumed after batch " << k << ", batch " << i;
      }
    }
  }
}

TEST(Loader, FiniteLoaderEndsAndStaysEnded) {
  auto ds = make_token_dataset(counting_source(1000), 16, 4);  // 62 rows -> 15 batches of 4
  for (int workers : {0, 1, 4}) {
    LoaderOptions o = opts(workers);
    o.finite = true;
    within(
        20,
        [&] {
          PrefetchLoader l(ds, o);
          EXPECT_EQ(take(l, 1000).size(), 15u);
          Batch b;
          EXPECT_FALSE(l.next(b));
          EXPECT_FALSE(l.next(b));
          EXPECT_TRUE(b.empty());
        },
        "finite loader");
  }
}

TEST(Loader, WorkerErrorReachesTheCallerAtTheSameBatchForEveryWorkerCount) {
  std::vector<int32_t> v(4000, 3);
  v[2345] = 999;  // beyond the vocabulary: found by the worker reading that chunk
  auto ds = make_token_dataset(make_vector_source(v), 16, 8, /*vocab_limit=*/256);
  for (int workers : {0, 1, 4}) {
    LoaderOptions o = opts(workers);
    o.shuffle = false;
    within(
        20,
        [&] {
          PrefetchLoader l(ds, o);
          Batch b;
          int good = 0;
          try {
            while (l.next(b)) ++good;
            ADD_FAILURE() << "no error";
          } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("token id 999 at token 2345"), std::string::npos)
                << e.what();
          }
          // Row 2345/16 = 146 is in chunk 18 (rows 144..151): batches 0..35 are clean.
          EXPECT_EQ(good, 36) << "workers " << workers;
          EXPECT_THROW(l.next(b), FormatError) << "the error stays";
        },
        "error then destroy");
  }
}

TEST_F(LoaderTest, MalformedJsonlLineMidStreamIsAWorkerError) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += i == 150 ? "{\"text\": \"unterminated\n"
                     : "{\"text\": \"record " + std::to_string(i) + " with some words in it\"}\n";
  }
  write_file_atomic(dir_ / "d.jsonl", text);
  DataOptions dopt;
  dopt.seq_len = 16;
  dopt.val_every = 0;
  std::string how;
  auto ds =
      open_data_whole((dir_ / "d.jsonl").string(), std::make_shared<ByteTokenizer>(), dopt, &how);
  for (int workers : {0, 2}) {
    LoaderOptions o = opts(workers);
    o.shuffle = false;
    PrefetchLoader l(ds, o);
    Batch b;
    int good = 0;
    try {
      while (l.next(b)) ++good;
      ADD_FAILURE() << "no error";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("d.jsonl:151: not valid JSON"), std::string::npos)
          << e.what();
    }
    EXPECT_GT(good, 10) << "the good records before it were delivered";
  }
}

// Chunk 3 throws a non-ft exception.
class ThrowingDataset : public ChunkedDataset {
 public:
  size_t num_chunks() const override { return 6; }
  uint64_t read_chunk(size_t c, int, std::vector<int32_t>& out) const override {
    if (c == 3) throw std::runtime_error("disk on fire");
    out.assign(16 * 4 + 1, static_cast<int32_t>(c));
    return 0;
  }
  size_t approx_tokens() const override { return 6 * 65; }
  int max_token_bound() const override { return 5; }
  std::string describe() const override { return "throwing"; }
};

TEST(Loader, AnyWorkerExceptionBecomesAnFtErrorWithItsMessage) {
  auto ds = std::make_shared<ThrowingDataset>();
  for (int workers : {0, 2}) {
    LoaderOptions o = opts(workers);
    o.shuffle = false;
    PrefetchLoader l(ds, o);
    Batch b;
    int good = 0;
    try {
      while (l.next(b)) ++good;
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("disk on fire"), std::string::npos) << e.what();
    }
    EXPECT_EQ(good, 3) << "chunks 0-2 (4 rows each) were delivered first";
  }
}

// A dataset whose chunks block until released: workers stuck inside read_chunk.
class GatedDataset : public ChunkedDataset {
 public:
  size_t num_chunks() const override { return 4; }
  uint64_t read_chunk(size_t, int, std::vector<int32_t>& out) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    out.assign(16 * 8 + 1, 1);
    return 0;
  }
  size_t approx_tokens() const override { return 4 * 129; }
  int max_token_bound() const override { return 1; }
  std::string describe() const override { return "gated"; }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait_entered(int n) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int entered_ = 0;
  bool open_ = false;
};

TEST(Loader, StopWakesABlockedNextAndDestroyJoins) {
  auto ds = std::make_shared<GatedDataset>();
  within(
      20,
      [&] {
        PrefetchLoader l(ds, opts(2));
        ds->wait_entered(2);  // both workers are inside a chunk; next() can only wait
        std::thread consumer([&] {
          Batch b;
          EXPECT_FALSE(l.next(b)) << "a stopped loader returns false";
        });
        l.stop();  // as a SIGINT handler's flag would make the trainer do
        consumer.join();
        ds->open();  // the workers finish their chunk and see the stop
      },
      "stop while next() is blocked");
}

TEST(Loader, StoppedInlineLoaderReturnsFalse) {
  auto ds = make_token_dataset(counting_source(5000), 16, 8);
  PrefetchLoader l(ds, opts(0));
  Batch b;
  ASSERT_TRUE(l.next(b));
  l.stop();
  EXPECT_FALSE(l.next(b));
}

TEST(Loader, DestroyWithAFullQueueOrUntouchedNeverDeadlocks) {
  auto ds = make_token_dataset(counting_source(200000), 16, 64);
  within(
      30,
      [&] {
        for (int workers : {1, 2, 4}) {
          for (int taken : {0, 1, 3}) {
            LoaderOptions o = opts(workers, 1);
            o.preprocess_cost = taken;  // some chunks mid-preprocessing at destruction
            PrefetchLoader l(ds, o);
            take(l, taken);
            if (taken == 1) std::this_thread::yield();
          }  // destroyed with workers blocked on the full queue / window, or still working
        }
      },
      "destroy");
}

TEST(Loader, BatchOutlivesItsLoader) {
  auto ds = make_token_dataset(counting_source(5000), 16, 8);
  Batch kept;
  {
    LoaderOptions o = opts(2);
    o.shuffle = false;
    PrefetchLoader l(ds, o);
    ASSERT_TRUE(l.next(kept));
  }
  EXPECT_EQ(kept.inputs()[0], 0);
  EXPECT_EQ(kept.targets()[63], 64);
}

TEST(Loader, HoldingEveryStagingBufferIsAnErrorNotADeadlock) {
  auto ds = make_token_dataset(counting_source(50000), 16, 8);
  for (int workers : {0, 2}) {
    within(
        20,
        [&] {
          LoaderOptions o = opts(workers, 1);
          PrefetchLoader l(ds, o);
          std::vector<Batch> held(16);
          bool threw = false;
          for (Batch& b : held) {
            try {
              ASSERT_TRUE(l.next(b));
            } catch (const ConfigError& e) {
              EXPECT_NE(std::string(e.what()).find("staging buffers"), std::string::npos);
              threw = true;
              break;
            }
          }
          EXPECT_TRUE(threw);
        },
        "hold all buffers");
  }
}

class CountingStaging : public StagingBackend {
 public:
  void* allocate(size_t bytes) override {
    ++allocs;
    return ::operator new(bytes);
  }
  void deallocate(void* p, size_t) noexcept override {
    ++frees;
    ::operator delete(p);
  }
  void on_filled(void*, size_t bytes, int64_t index) override {
    EXPECT_EQ(bytes, 2u * 4 * 16 * sizeof(int32_t));
    EXPECT_EQ(index, filled.load());
    ++filled;
  }
  std::string name() const override { return "counting"; }
  std::atomic<int> allocs{0}, frees{0}, filled{0};
};

TEST(Loader, StagingBuffersComeFromAReusedPool) {
  auto ds = make_token_dataset(counting_source(20000), 16, 8);
  auto staging = std::make_shared<CountingStaging>();
  {
    LoaderOptions o = opts(2, 3);
    o.staging = staging;
    PrefetchLoader l(ds, o);
    EXPECT_EQ(take(l, 200).size(), 200u);
    EXPECT_EQ(staging->allocs.load(), 3 + 3) << "prefetch + 3 buffers, allocated once";
    EXPECT_GE(staging->filled.load(), 200);
  }
  EXPECT_EQ(staging->frees.load(), staging->allocs.load());
}

TEST(Loader, EveryBatchCarriesItsTiming) {
  auto ds = make_document_dataset(synthetic_docs(400), std::make_shared<ByteTokenizer>(),
                                  {.seq_len = 16, .chunk_bytes = 2000});
  for (int workers : {0, 2}) {
    LoaderOptions o = opts(workers);
    o.preprocess_cost = 50;
    o.timing_capacity = 30;
    PrefetchLoader l(ds, o);
    Batch b;
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(l.next(b));
      EXPECT_EQ(b.timing.index, i);
      EXPECT_EQ(b.timing.tokens, 64);
      EXPECT_GT(b.timing.preprocess_ns, 0);
      EXPECT_GE(b.timing.wait_ns, 0);
      if (workers == 0) {
        EXPECT_EQ(b.timing.worker, -1);
      } else {
        EXPECT_GE(b.timing.worker, 0);
        EXPECT_LT(b.timing.worker, workers);
      }
    }
    const auto t = l.take_timings();
    ASSERT_EQ(t.size(), 30u);
    EXPECT_EQ(t.front().index, 10);
    EXPECT_EQ(t.back().index, 39);
    EXPECT_EQ(l.timings_dropped(), 10u);
    EXPECT_TRUE(l.take_timings().empty());
  }
}

TEST(Loader, PreprocessingCostIsRealWorkThatLeavesTokensAlone) {
  std::string scratch;
  const std::string s = "In the  Beginning\tGod";
  EXPECT_EQ(preprocess_text(s, 3, scratch), preprocess_text(s, 3, scratch));
  EXPECT_NE(preprocess_text(s, 3, scratch), preprocess_text(s, 4, scratch));
  EXPECT_EQ(preprocess_text("in the beginning god", 1, scratch), preprocess_text(s, 1, scratch))
      << "pass 0 folds case and collapses whitespace";
  auto ds = make_document_dataset(synthetic_docs(200), std::make_shared<ByteTokenizer>(),
                                  {.seq_len = 16, .chunk_bytes = 900});
  PrefetchLoader cheap(ds, opts(1)), costly(ds, [] {
    LoaderOptions o = opts(2);
    o.preprocess_cost = 20;
    return o;
  }());
  const auto a = take(cheap, 50), b = take(costly, 50);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].inputs, b[i].inputs);
    EXPECT_EQ(a[i].checksum, 0u);
    EXPECT_NE(b[i].checksum, 0u);
  }
}

TEST_F(LoaderTest, DocumentsSplitByIndexAndPackWithSeparators) {
  std::string text;
  for (int p = 0; p < 45; ++p) text += "Chapter " + std::to_string(p) + " line one.\nline two.\n\n";
  write_file_atomic(dir_ / "book.txt", text);
  DataOptions dopt;
  dopt.seq_len = 8;
  const DataSplit s =
      open_data((dir_ / "book.txt").string(), std::make_shared<ByteTokenizer>(), dopt);
  EXPECT_NE(s.description.find("45 documents"), std::string::npos) << s.description;
  LoaderOptions o = opts(0, 1, 1, 8);
  o.shuffle = false;
  o.finite = true;
  std::string val;
  PrefetchLoader l(s.val, o);
  for (const Copy& c : take(l, 100)) {
    for (int32_t t : c.inputs) val.push_back(static_cast<char>(t));
  }
  // Documents 19 and 39 (every 20th), each followed by a blank line, packed into rows of 8.
  const std::string expect =
      "Chapter 19 line one.\nline two.\n\nChapter 39 line one.\nline two.\n\n";
  EXPECT_EQ(val, expect.substr(0, (expect.size() - 1) / 8 * 8));
  EXPECT_THROW(open_data((dir_ / "missing").string(), std::make_shared<ByteTokenizer>(), dopt),
               ConfigError);
}

TEST_F(LoaderTest, ShardDataGoesThroughTheTokenPath) {
  std::vector<int32_t> toks(3000);
  std::iota(toks.begin(), toks.end(), 0);
  write_llmc_shard(dir_ / "train_000000.bin", toks, 1);
  write_llmc_shard(dir_ / "val_000000.bin", std::vector<int32_t>(500, 5), 1);
  DataOptions dopt;
  dopt.seq_len = 16;
  dopt.vocab_limit = 4000;
  const DataSplit s = open_data(dir_.string(), std::make_shared<ByteTokenizer>(), dopt);
  EXPECT_EQ(s.train->approx_tokens(), 3000u);
  EXPECT_EQ(s.val->approx_tokens(), 500u);
  EXPECT_EQ(s.train->max_token_bound(), 2999);
  LoaderOptions o = opts(2);
  o.shuffle = false;
  PrefetchLoader l(s.train, o);
  const auto b = take(l, 1);
  EXPECT_EQ(b[0].inputs[17], 17);
}

TEST(Loader, DataParallelSharesPartitionTheBatchSequenceAndResume) {
  // Shares of d=3 ranks taking K=2 of every 6 batches: rank r's i-th batch is batch
  // (i / K) * 6 + r * K + i % K of the unsharded sequence, for any worker count, across epochs,
  // and a share resumed from any of its positions continues identically.
  auto tokens = make_token_dataset(counting_source(3000), 16, 8);  // 187 rows, 24 chunks
  auto docs = make_document_dataset(synthetic_docs(200), std::make_shared<ByteTokenizer>(),
                                    {.seq_len = 16, .chunk_bytes = 700});
  const int d = 3, K = 2;
  for (auto ds : {tokens, docs}) {
    PrefetchLoader all(ds, opts(0));
    const std::vector<Copy> ref = take(all, 120);
    ASSERT_EQ(ref.size(), 120u);
    for (int r = 0; r < d; ++r) {
      for (int workers : {0, 2}) {
        LoaderOptions o = opts(workers);
        o.shard_period = d * K;
        o.shard_first = r * K;
        o.shard_count = K;
        PrefetchLoader l(ds, o);
        std::vector<LoaderState> after;
        Batch b;
        for (size_t i = 0; i < 120 / d; ++i) {
          ASSERT_TRUE(l.next(b));
          const size_t g = (i / K) * d * K + r * K + i % K;
          const size_t bt = 64;
          ASSERT_TRUE((Copy{std::vector<int32_t>(b.inputs(), b.inputs() + bt),
                            std::vector<int32_t>(b.targets(), b.targets() + bt),
                            b.checksum} == ref[g]))
              << ds->describe() << " rank " << r << " workers " << workers << " batch " << i;
          EXPECT_EQ(b.next.batches, g + 1);
          after.push_back(b.next);
        }
        for (size_t k : {0, 1, 7, 30}) {
          LoaderOptions ro = o;
          ro.start = after[k];
          PrefetchLoader resumed(ds, ro);
          ASSERT_TRUE(resumed.next(b));
          const size_t i = k + 1, g = (i / K) * d * K + r * K + i % K;
          EXPECT_TRUE((Copy{std::vector<int32_t>(b.inputs(), b.inputs() + 64),
                            std::vector<int32_t>(b.targets(), b.targets() + 64),
                            b.checksum} == ref[g]))
              << "rank " << r << " resumed after its batch " << k;
        }
      }
    }
  }
  LoaderOptions bad = opts(0);
  bad.shard_period = 2;
  bad.shard_first = 1;
  bad.shard_count = 2;
  EXPECT_THROW(PrefetchLoader(tokens, bad), ConfigError);
}

}  // namespace
}  // namespace ft::trainer::data
