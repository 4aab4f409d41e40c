// prefetch_loader.cpp: workers turn chunks into token rows; an assembler cuts them, in order, into
// queued batches.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/core/rng.h"
#include "ft/trainer/loader.h"
#include "staging_pool.h"

namespace ft::trainer::data {
namespace {

using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fisher-Yates with ft's own generator, so the order is the same on every platform.
void shuffle(std::vector<uint32_t>& v, uint64_t seed) {
  Rng rng(seed);
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = rng.next_u64() % i;
    std::swap(v[i - 1], v[j]);
  }
}

// Thrown inside the assembler when the loader is stopping.
struct Stopped {};

struct ChunkResult {
  std::vector<int32_t> tokens;  // the packed stream; row i = tokens[i*T, i*T+T+1)
  std::vector<uint32_t> order;  // rows in the order they are used
  int64_t preprocess_ns = 0;
  int worker = -1;
  uint64_t checksum = 0;
  std::exception_ptr error;
};

struct Ready {
  int32_t* buf = nullptr;
  BatchTiming timing;
  LoaderState next;
  uint64_t checksum = 0;
  std::exception_ptr error;
  bool end = false;
};

}  // namespace

class PrefetchLoader::Impl {
 public:
  Impl(std::shared_ptr<const ChunkedDataset> ds, const LoaderOptions& o)
      : ds_(std::move(ds)), o_(o), nc_(ds_->num_chunks()) {
    const size_t bt = static_cast<size_t>(o_.batch_size) * o_.seq_len;
    const int buffers = o_.prefetch + (o_.workers > 0 ? 3 : 2);
    pool_ = std::make_shared<StagingPool>(o_.staging, 2 * bt * sizeof(int32_t), buffers);
    cur_s_ = o_.start.chunk;
    cur_row_ = o_.start.row;
    batches_ = o_.start.batches;
    if (o_.workers > 0) {
      next_task_ = cur_s_;
      assembler_s_ = cur_s_;
      window_ = static_cast<uint64_t>(o_.workers) + 1;
      try {
        for (int w = 0; w < o_.workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
        threads_.emplace_back([this] { assembler_loop(); });
      } catch (...) {  // e.g. no more threads: join the started ones before failing
        stop();
        for (std::thread& t : threads_) t.join();
        throw;
      }
    }
  }

  ~Impl() {
    stop();
    for (std::thread& t : threads_) t.join();
    for (Ready& r : ready_) pool_->release(r.buf);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_work_.notify_all();
    cv_asm_.notify_all();
    cv_ready_.notify_all();
    pool_->stop();
  }

  // The consumer side of next(): a ready batch (or end / error / stop).
  Ready take(int64_t& wait_ns) {
    const auto t0 = Clock::now();
    if (pool_->held_by_consumer.load() >= static_cast<int>(pool_->capacity())) {
      throw ConfigError(fmt::format(
          "the caller holds all {} staging buffers: release Batch objects before asking for more",
          pool_->capacity()));
    }
    Ready r;
    FT_RANGE("loader.wait", RangeKind::kData);
    if (o_.workers == 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) {
          r.end = true;
          wait_ns = ns_since(t0);
          return r;
        }
      }
      try {
        r = assemble(-1, [this](uint64_t s) { return produce(s, -1); });
      } catch (...) {
        r.error = std::current_exception();
      }
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      cv_ready_.wait(lock, [&] { return !ready_.empty() || stopping_; });
      if (ready_.empty()) {
        r.end = true;  // stopped
      } else {
        r = std::move(ready_.front());
        ready_.pop_front();
        lock.unlock();
        cv_asm_.notify_one();  // the queue has room
      }
    }
    wait_ns = ns_since(t0);
    return r;
  }

  std::shared_ptr<StagingPool> pool() const { return pool_; }
  size_t num_chunks() const { return nc_; }

 private:
  // Chunk id at position k of epoch e.
  size_t chunk_id(uint64_t e, size_t k) {
    if (!o_.shuffle) return k;
    std::lock_guard<std::mutex> lock(perm_mu_);
    if (!perm_ || perm_epoch_ != e) {
      auto p = std::make_shared<std::vector<uint32_t>>(nc_);
      std::iota(p->begin(), p->end(), 0u);
      shuffle(*p, mix(o_.seed, e));
      perm_ = std::move(p);
      perm_epoch_ = e;
    }
    return (*perm_)[k];
  }

  // Preprocesses chunk sequence number s (epoch s / nc). Never throws: errors are carried.
  ChunkResult produce(uint64_t s, int worker) {
    FT_RANGE("loader.preprocess", RangeKind::kData, static_cast<int64_t>(s));
    const auto t0 = Clock::now();
    ChunkResult r;
    r.worker = worker;
    try {
      const uint64_t e = s / nc_;
      const size_t c = chunk_id(e, s % nc_);
      r.checksum = ds_->read_chunk(c, o_.preprocess_cost, r.tokens);
      const size_t T = static_cast<size_t>(o_.seq_len);
      const size_t rows = r.tokens.size() > T ? (r.tokens.size() - 1) / T : 0;
      r.order.resize(rows);
      std::iota(r.order.begin(), r.order.end(), 0u);
      if (o_.shuffle) shuffle(r.order, mix(mix(o_.seed, e), c + 1));
    } catch (const Error&) {
      r.error = std::current_exception();
    } catch (const std::exception& e) {  // reaches the caller as an ft::Error with its message
      r.error =
          std::make_exception_ptr(Error(fmt::format("data loader, chunk {}: {}", s, e.what())));
    } catch (...) {
      r.error =
          std::make_exception_ptr(Error(fmt::format("data loader, chunk {}: unknown error", s)));
    }
    r.preprocess_ns = ns_since(t0);
    return r;
  }

  // Makes cur_ the chunk holding the next row of the stream; false at the end of a finite one.
  template <typename Get>
  bool seek_row(Get& get) {
    size_t skipped = 0;
    for (;;) {
      if (!have_cur_) {
        if (o_.finite && cur_s_ >= nc_) return false;
        cur_ = get(cur_s_);
        have_cur_ = true;
        if (cur_.error) std::rethrow_exception(cur_.error);
      }
      if (cur_row_ < cur_.order.size()) return true;
      have_cur_ = false;
      ++cur_s_;
      cur_row_ = 0;
      if (++skipped > nc_ + 1) {
        throw ConfigError(
            fmt::format("the data yields no sequence of {} tokens in a whole epoch ({} chunks)",
                        o_.seq_len + 1, nc_));
      }
    }
  }

  void end_of_batch() {
    if (cur_row_ >= cur_.order.size()) {  // normalise: the next batch starts the next chunk
      have_cur_ = false;
      ++cur_s_;
      cur_row_ = 0;
    }
  }

  bool in_shard(uint64_t g) const {
    const uint64_t k = g % static_cast<uint64_t>(o_.shard_period);
    return k >= static_cast<uint64_t>(o_.shard_first) &&
           k < static_cast<uint64_t>(o_.shard_first + o_.shard_count);
  }

  // Cuts the next batch out of the ordered row stream. `get(s)` yields chunk s. Batches outside
  // this loader's shard only advance the position (no copy, no staging buffer).
  template <typename Get>
  Ready assemble(int worker_hint, Get&& get) {
    Ready r;
    const size_t T = static_cast<size_t>(o_.seq_len), B = static_cast<size_t>(o_.batch_size);
    while (!in_shard(batches_)) {
      for (size_t b = 0; b < B; ++b) {
        if (!seek_row(get)) {
          r.end = true;
          return r;
        }
        ++cur_row_;
      }
      end_of_batch();
      ++batches_;
    }
    int32_t* buf = pool_->acquire(/*wait=*/o_.workers > 0);
    if (!buf) {
      if (o_.workers > 0) throw Stopped{};
      throw Error("staging pool exhausted");  // held_by_consumer guards against this
    }
    int64_t pre_ns = 0;
    int worker = worker_hint;
    uint64_t mixed_s = ~0ull;  // the chunk whose checksum was last mixed into this batch's
    try {
      for (size_t b = 0; b < B; ++b) {
        if (!seek_row(get)) {
          pool_->release(buf);
          r.end = true;
          return r;
        }
        const auto tc = Clock::now();
        const int32_t* row = cur_.tokens.data() + static_cast<size_t>(cur_.order[cur_row_]) * T;
        std::memcpy(buf + b * T, row, T * sizeof(int32_t));
        std::memcpy(buf + B * T + b * T, row + 1, T * sizeof(int32_t));
        pre_ns += ns_since(tc) + cur_.preprocess_ns / static_cast<int64_t>(cur_.order.size());
        if (b == 0) worker = cur_.worker;
        if (mixed_s != cur_s_ && cur_.checksum != 0) r.checksum = mix(r.checksum, cur_.checksum);
        mixed_s = cur_s_;
        ++cur_row_;
      }
      end_of_batch();
      pool_->backend().on_filled(buf, pool_->bytes(), static_cast<int64_t>(batches_));
    } catch (...) {
      pool_->release(buf);
      throw;
    }
    r.buf = buf;
    r.timing.index = static_cast<int64_t>(batches_);
    r.timing.worker = worker;
    r.timing.preprocess_ns = pre_ns;
    r.timing.tokens = static_cast<int64_t>(B * T);
    ++batches_;
    r.next = LoaderState{cur_s_, cur_row_, batches_};
    return r;
  }

  void worker_loop(int w) {
    for (;;) {
      uint64_t s;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_work_.wait(lock, [&] {
          return stopping_ ||
                 (next_task_ < assembler_s_ + window_ && !(o_.finite && next_task_ >= nc_));
        });
        if (stopping_) return;
        s = next_task_++;
      }
      ChunkResult r = produce(s, w);
      {
        std::lock_guard<std::mutex> lock(mu_);
        results_.emplace(s, std::move(r));
      }
      cv_asm_.notify_one();
    }
  }

  ChunkResult wait_chunk(uint64_t s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (assembler_s_ != s) {
      assembler_s_ = s;
      cv_work_.notify_all();  // the window moved
    }
    cv_asm_.wait(lock, [&] { return stopping_ || results_.count(s) != 0; });
    if (stopping_) throw Stopped{};
    auto it = results_.find(s);
    ChunkResult r = std::move(it->second);
    results_.erase(it);
    return r;
  }

  void assembler_loop() {
    for (;;) {
      Ready r;
      try {
        r = assemble(-1, [this](uint64_t s) { return wait_chunk(s); });
      } catch (const Stopped&) {
        return;
      } catch (...) {
        r.error = std::current_exception();
      }
      const bool last = r.end || r.error;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_asm_.wait(lock,
                     [&] { return stopping_ || ready_.size() < static_cast<size_t>(o_.prefetch); });
        if (stopping_) {
          pool_->release(r.buf);
          return;
        }
        ready_.push_back(std::move(r));
      }
      cv_ready_.notify_one();
      if (last) return;
    }
  }

  std::shared_ptr<const ChunkedDataset> ds_;
  LoaderOptions o_;
  size_t nc_;
  std::shared_ptr<StagingPool> pool_;

  // Ordered row stream (the assembler's, or the caller's in-line).
  uint64_t cur_s_ = 0, cur_row_ = 0, batches_ = 0;
  ChunkResult cur_;
  bool have_cur_ = false;

  // Shared between threads, under mu_.
  std::mutex mu_;
  std::condition_variable cv_work_, cv_asm_, cv_ready_;  // workers, assembler, consumer
  bool stopping_ = false;
  uint64_t next_task_ = 0, assembler_s_ = 0, window_ = 1;
  std::map<uint64_t, ChunkResult> results_;
  std::deque<Ready> ready_;
  std::vector<std::thread> threads_;

  std::mutex perm_mu_;
  std::shared_ptr<std::vector<uint32_t>> perm_;
  uint64_t perm_epoch_ = 0;
};

// ---- Batch ----

Batch::~Batch() { release(); }
Batch::Batch(Batch&& o) noexcept
    : timing(o.timing),
      next(o.next),
      checksum(o.checksum),
      pool_(std::move(o.pool_)),
      data_(o.data_),
      bt_(o.bt_) {
  o.data_ = nullptr;
}
Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    release();
    timing = o.timing;
    next = o.next;
    checksum = o.checksum;
    pool_ = std::move(o.pool_);
    data_ = o.data_;
    bt_ = o.bt_;
    o.data_ = nullptr;
  }
  return *this;
}
void Batch::release() noexcept {
  if (data_ && pool_) {
    pool_->held_by_consumer.fetch_sub(1);
    pool_->release(data_);
  }
  data_ = nullptr;
  pool_.reset();
}

// ---- PrefetchLoader ----

PrefetchLoader::PrefetchLoader(std::shared_ptr<const ChunkedDataset> dataset, LoaderOptions options)
    : options_(std::move(options)) {
  const LoaderOptions& o = options_;
  if (!dataset) throw ConfigError("PrefetchLoader: no dataset");
  if (o.batch_size <= 0 || o.seq_len <= 0) {
    throw ConfigError(fmt::format("batch size and sequence length must be > 0 (got B={}, T={})",
                                  o.batch_size, o.seq_len));
  }
  if (o.workers < 0 || o.workers > 64) {
    throw ConfigError(fmt::format("--loader-workers {} must be in [0, 64]", o.workers));
  }
  if (o.prefetch < 1 || o.prefetch > 1024) {
    throw ConfigError(fmt::format("--prefetch {} must be in [1, 1024]", o.prefetch));
  }
  if (o.preprocess_cost < 0) throw ConfigError("--preprocess-cost must be >= 0");
  if (o.shard_period < 1 || o.shard_first < 0 || o.shard_count < 1 ||
      o.shard_first + o.shard_count > o.shard_period) {
    throw ConfigError(fmt::format("loader shard: batches [{}, {}) of every {} is not a valid share",
                                  o.shard_first, o.shard_first + o.shard_count, o.shard_period));
  }
  if (dataset->num_chunks() == 0) {
    throw ConfigError(fmt::format("the data ({}) holds no sequence of {} tokens",
                                  dataset->describe(), o.seq_len + 1));
  }
  state_ = o.start;
  impl_ = std::make_unique<Impl>(std::move(dataset), options_);
}

PrefetchLoader::~PrefetchLoader() = default;

void PrefetchLoader::stop() { impl_->stop(); }

uint64_t PrefetchLoader::epoch() const { return state_.chunk / impl_->num_chunks(); }

bool PrefetchLoader::next(Batch& out) {
  out.release();
  if (failed_) std::rethrow_exception(failed_);
  if (ended_) return false;
  int64_t wait_ns = 0;
  Ready r = impl_->take(wait_ns);
  if (r.error) {
    failed_ = r.error;
    std::rethrow_exception(r.error);
  }
  if (r.end) {
    ended_ = true;
    return false;
  }
  out.pool_ = impl_->pool();
  out.pool_->held_by_consumer.fetch_add(1);
  out.data_ = r.buf;
  out.bt_ = static_cast<size_t>(options_.batch_size) * options_.seq_len;
  out.timing = r.timing;
  out.timing.wait_ns = wait_ns;
  out.next = r.next;
  out.checksum = r.checksum;
  state_ = r.next;
  if (options_.timing_capacity > 0) {
    if (timings_.size() >= options_.timing_capacity) {
      timings_.pop_front();
      ++timings_dropped_;
    }
    timings_.push_back(out.timing);
  }
  return true;
}

std::vector<BatchTiming> PrefetchLoader::take_timings() {
  std::vector<BatchTiming> t(timings_.begin(), timings_.end());
  timings_.clear();
  return t;
}

}  // namespace ft::trainer::data
