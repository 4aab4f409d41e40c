// device_allocator.cpp: the device caching allocator's policy (host code, no CUDA): best-fit
// reuse per stream, split/coalesce, cross-stream reuse through events, OOM retry, statistics.
#include "device_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "ft/core/annotate.h"
#include "ft/core/error.h"

namespace ft::trainer::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kLargeThreshold = kMiB;         // rounded requests >= this use the large pool
constexpr size_t kLargeSegmentRound = 2 * kMiB;  // large segments are multiples of this
constexpr size_t kMinSmallRemainder = 512;       // split a small block if this much would remain
constexpr size_t kMinLargeRemainder = kMiB;      // split a large block if this much would remain
constexpr size_t kMaxRequest = size_t{1} << 46;  // 64 TiB: no rounding overflow, no absurd request

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
bool is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

// A contiguous range inside a segment: free (in its stream's pool), live, or pending
// (freed, waiting for events on the streams that also used it).
struct DeviceCachingAllocator::Block {
  Segment* segment = nullptr;
  char* ptr = nullptr;
  size_t size = 0;       // rounded size of the range
  size_t requested = 0;  // caller's bytes while live
  StreamId stream = 0;   // the stream the block is ordered on
  bool allocated = false;
  bool pending = false;
  std::vector<StreamId> extra_streams;  // record_stream() while live
  std::vector<EventId> events;          // while pending
  Block* prev = nullptr;                // address-ordered neighbours within the segment
  Block* next = nullptr;
};

struct DeviceCachingAllocator::Segment {
  char* base = nullptr;
  size_t size = 0;
  bool large = false;
  Block* head = nullptr;
};

namespace {
struct BlockLess {
  template <typename B>
  bool operator()(const B* a, const B* b) const {
    if (a->size != b->size) return a->size < b->size;
    return std::less<const char*>()(a->ptr, b->ptr);
  }
};
}  // namespace

struct DeviceCachingAllocator::Impl {
  using Pool = std::set<Block*, BlockLess>;
  struct StreamPools {
    Pool small, large;
    Pool& get(bool large_pool) { return large_pool ? large : small; }
  };
  std::map<StreamId, StreamPools> pools;
  std::unordered_map<const void*, Block*> live;
  std::vector<Block*> pending;
  std::vector<Segment*> segments;
  uint64_t cross_stream_reuses = 0;

  Pool& pool(const Block* b) { return pools[b->stream].get(b->segment->large); }
};

DeviceCachingAllocator::DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory,
                                               DeviceAllocatorOptions options)
    : memory_(std::move(memory)), options_(options), impl_(std::make_unique<Impl>()) {
  if (!memory_) throw ConfigError("device allocator: no backing memory");
  if (!is_pow2(options_.round_to) || options_.round_to < 256) {
    throw ConfigError(fmt::format("device allocator round_to must be a power of two >= 256, got {}",
                                  options_.round_to));
  }
  if (options_.min_segment == 0) throw ConfigError("device allocator min_segment must be > 0");
}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  try {
    memory_->synchronize();
  } catch (...) {  // a failed device must not turn teardown into a crash
  }
  for (Block* b : impl_->pending) {
    for (EventId e : b->events) memory_->destroy_event(e);
  }
  for (Segment* seg : impl_->segments) {
    try {
      memory_->release(seg->base, seg->size);
    } catch (...) {
    }
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    delete seg;
  }
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::take_free_block(size_t size, bool large,
                                                                       StreamId stream) {
  Block key;
  key.size = size;
  key.ptr = nullptr;
  // Own stream first: reusable at once, no synchronization.
  {
    Impl::Pool& own = impl_->pools[stream].get(large);
    auto it = own.lower_bound(&key);
    if (it != own.end()) {
      Block* b = *it;
      own.erase(it);
      return b;
    }
  }
  // Best fit over the other streams' free blocks, ordered by an event.
  Impl::Pool* best_pool = nullptr;
  Impl::Pool::iterator best;
  for (auto& [s, p] : impl_->pools) {
    if (s == stream) continue;
    Impl::Pool& pool = p.get(large);
    auto it = pool.lower_bound(&key);
    if (it != pool.end() && (best_pool == nullptr || BlockLess()(*it, *best))) {
      best_pool = &pool;
      best = it;
    }
  }
  if (best_pool == nullptr) return nullptr;
  Block* b = *best;
  best_pool->erase(best);
  const EventId e = memory_->record_event(b->stream);
  memory_->stream_wait(stream, e);
  memory_->destroy_event(e);
  ++impl_->cross_stream_reuses;
  return b;
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::map_segment(size_t size, bool large,
                                                                   StreamId stream,
                                                                   size_t requested,
                                                                   const char* tag) {
  const size_t seg_size = large ? round_up(size, kLargeSegmentRound)
                                : round_up(std::max(options_.min_segment, size), options_.round_to);
  for (int attempt = 0;; ++attempt) {
    const size_t limit = options_.memory_limit;
    const bool over_budget = limit != 0 && (seg_size > limit || stats_.reserved > limit - seg_size);
    char* base = nullptr;
    std::string failure;
    if (over_budget) {
      failure = fmt::format("a new {} segment would exceed the limit", format_bytes(seg_size));
    } else {
      base = static_cast<char*>(memory_->allocate(seg_size));
      if (base == nullptr) {
        failure = fmt::format("device allocation of {} failed ({})", format_bytes(seg_size),
                              memory_->describe());
      }
    }
    if (base != nullptr) {
      auto* seg = new Segment;
      seg->base = base;
      seg->size = seg_size;
      seg->large = large;
      auto* b = new Block;
      b->segment = seg;
      b->ptr = base;
      b->size = seg_size;
      b->stream = stream;
      seg->head = b;
      impl_->segments.push_back(seg);
      stats_.reserved += seg_size;
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
      ++stats_.segments;
      ++stats_.segment_maps;
      ++stats_.slow_path_allocs;
      return b;
    }
    if (attempt == 0) {
      // Flush: synchronize, finish pending frees, return wholly free segments; then retry.
      FT_RANGE("alloc.retry.flush_cache", RangeKind::kAlloc);
      const size_t freed = release_cached_locked();
      // Pending blocks finished by the flush may now fit without a new segment.
      Block* b = take_free_block(size, large, stream);
      if (b != nullptr || freed > 0 || !over_budget) {
        ++stats_.cache_flush_retries;
        mark("alloc.retry", RangeKind::kAlloc, static_cast<int64_t>(requested));
        if (b != nullptr) return b;
        continue;
      }
    }
    throw_oom_locked(requested, tag, failure);
  }
}

void DeviceCachingAllocator::throw_oom_locked(size_t requested, const char* tag,
                                              const std::string& why) {
  ++stats_.ooms;
  mark("alloc.oom", RangeKind::kAlloc, static_cast<int64_t>(std::min(requested, kMaxRequest)));
  update_largest_free_locked();
  const std::string limit =
      options_.memory_limit ? format_bytes(options_.memory_limit) : std::string("device memory");
  throw OutOfMemoryError(fmt::format(
      "device out of memory: '{}' requested {}; limit {}, reserved {}, allocated {}, free in "
      "cache {} (largest free block {}, fragmentation {:.0f}%); {}",
      tag ? tag : "", format_bytes(requested), limit, format_bytes(stats_.reserved),
      format_bytes(stats_.allocated), format_bytes(stats_.reserved - stats_.allocated),
      format_bytes(stats_.largest_free_block), stats_.fragmentation() * 100.0, why));
}

void* DeviceCachingAllocator::allocate(size_t bytes, StreamId stream, const char* tag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > kMaxRequest) throw_oom_locked(bytes, tag, "request exceeds the maximum size");
  process_pending_locked(false);
  const size_t size = round_up(std::max<size_t>(bytes, 1), options_.round_to);
  const bool large = size >= kLargeThreshold;
  Block* b = take_free_block(size, large, stream);
  // The stream a split-off remainder keeps: the block's stream before this request.
  StreamId origin = b ? b->stream : stream;
  if (b == nullptr) {
    FT_RANGE("alloc.slow_path", RangeKind::kAlloc, static_cast<int64_t>(bytes));
    b = map_segment(size, large, stream, bytes, tag);
    origin = b->stream;
  }
  b->stream = stream;
  const size_t remainder = b->size - size;
  if (remainder >= (large ? kMinLargeRemainder : kMinSmallRemainder)) {
    auto* rest = new Block;
    rest->segment = b->segment;
    rest->ptr = b->ptr + size;
    rest->size = remainder;
    rest->stream = origin;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    impl_->pool(rest).insert(rest);
  }
  b->allocated = true;
  b->requested = bytes;
  impl_->live.emplace(b->ptr, b);
  stats_.allocated += b->size;
  stats_.requested += bytes;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.num_allocs;
  return b->ptr;
}

void DeviceCachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = impl_->live.find(ptr);
  if (it == impl_->live.end()) {
    throw Error(fmt::format("device allocator: record_stream on unknown pointer {}", ptr));
  }
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->extra_streams.begin(), b->extra_streams.end(), stream) ==
      b->extra_streams.end()) {
    b->extra_streams.push_back(stream);
  }
}

void DeviceCachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = impl_->live.find(ptr);
  if (it == impl_->live.end()) {
    throw Error(fmt::format(
        "device allocator: deallocate of unknown pointer {} (double free or foreign)", ptr));
  }
  Block* b = it->second;
  impl_->live.erase(it);
  stats_.allocated -= b->size;
  stats_.requested -= b->requested;
  ++stats_.num_frees;
  b->allocated = false;
  b->requested = 0;
  if (!b->extra_streams.empty()) {
    for (StreamId s : b->extra_streams) b->events.push_back(memory_->record_event(s));
    b->extra_streams.clear();
    b->pending = true;
    impl_->pending.push_back(b);
    return;
  }
  free_block_locked(b);
}

void DeviceCachingAllocator::free_block_locked(Block* b) {
  Impl::Pool& pool = impl_->pool(b);
  // Coalesce with free neighbours ordered on the same stream. By reference: after a merge
  // with prev, b is prev (ASan caught the by-value capture reading the deleted block).
  auto mergeable = [&b](const Block* n) {
    return n != nullptr && !n->allocated && !n->pending && n->stream == b->stream;
  };
  if (Block* prev = b->prev; mergeable(prev)) {
    pool.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; mergeable(next)) {
    pool.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    delete next;
  }
  if (!options_.caching && b->prev == nullptr && b->next == nullptr) {
    FT_RANGE("alloc.unmap", RangeKind::kAlloc, static_cast<int64_t>(b->segment->size));
    Segment* seg = b->segment;
    memory_->synchronize();
    memory_->release(seg->base, seg->size);
    stats_.reserved -= seg->size;
    --stats_.segments;
    ++stats_.segment_unmaps;
    auto& segs = impl_->segments;
    segs.erase(std::find(segs.begin(), segs.end(), seg));
    delete b;
    delete seg;
    return;
  }
  pool.insert(b);
}

void DeviceCachingAllocator::process_pending_locked(bool all_done) {
  auto& pend = impl_->pending;
  size_t kept = 0;
  for (size_t i = 0; i < pend.size(); ++i) {
    Block* b = pend[i];
    bool done = true;
    if (!all_done) {
      for (EventId e : b->events) done = done && memory_->event_done(e);
    }
    if (!done) {
      pend[kept++] = b;
      continue;
    }
    for (EventId e : b->events) memory_->destroy_event(e);
    b->events.clear();
    b->pending = false;
    free_block_locked(b);
  }
  pend.resize(kept);
}

size_t DeviceCachingAllocator::release_cached_locked() {
  memory_->synchronize();
  process_pending_locked(true);
  size_t released = 0;
  auto& segs = impl_->segments;
  for (size_t i = segs.size(); i-- > 0;) {
    Segment* seg = segs[i];
    // After a synchronize, stream tags no longer matter: a segment whose blocks are all free
    // (possibly still split between streams) goes back whole.
    bool all_free = true;
    for (Block* b = seg->head; b != nullptr; b = b->next) all_free = all_free && !b->allocated;
    if (!all_free) continue;
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      impl_->pool(b).erase(b);
      delete b;
      b = next;
    }
    memory_->release(seg->base, seg->size);
    released += seg->size;
    stats_.reserved -= seg->size;
    --stats_.segments;
    ++stats_.segment_unmaps;
    segs.erase(segs.begin() + static_cast<std::ptrdiff_t>(i));
    delete seg;
  }
  return released;
}

void DeviceCachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void DeviceCachingAllocator::update_largest_free_locked() const {
  size_t largest = 0;
  for (const auto& [s, p] : impl_->pools) {
    if (!p.small.empty()) largest = std::max(largest, (*p.small.rbegin())->size);
    if (!p.large.empty()) largest = std::max(largest, (*p.large.rbegin())->size);
  }
  stats_.largest_free_block = largest;
}

AllocatorStats DeviceCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  update_largest_free_locked();
  return stats_;
}

uint64_t DeviceCachingAllocator::cross_stream_reuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->cross_stream_reuses;
}

void DeviceCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void DeviceCachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.memory_limit = bytes;
  if (bytes != 0 && stats_.reserved > bytes) release_cached_locked();
}

}  // namespace ft::trainer::gpu
