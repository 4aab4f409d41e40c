// device_allocator.cpp: the device caching allocator's stream ordering (host code, no CUDA) over
// the shared block pool: free sets per stream, cross-stream reuse through events, held blocks.
#include "device_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "ft/core/block_pool.h"
#include "ft/core/error.h"

namespace ft::trainer::gpu {
namespace {

// Segments from the injected DeviceMemory.
class DeviceSource final : public SegmentSource {
 public:
  explicit DeviceSource(DeviceMemory* memory) : memory_(memory) {}
  void* map(size_t bytes, std::string* why) override {
    void* p = memory_->allocate(bytes);
    if (p == nullptr) {
      *why = fmt::format("device allocation of {} failed ({})", format_bytes(bytes),
                         memory_->describe());
    }
    return p;
  }
  void unmap(void* base, size_t bytes) override { memory_->release(base, bytes); }
  // Work on any stream may still use the segment.
  void before_uncached_unmap() override { memory_->synchronize(); }

 private:
  DeviceMemory* memory_;
};

BlockPoolOptions pool_options(const DeviceAllocatorOptions& o) {
  BlockPoolOptions p;
  p.name = "device allocator";
  p.oom_prefix = "device out of memory";
  p.unlimited = "device memory";
  p.min_round_to = 256;
  p.round_to = o.round_to;
  p.min_segment = o.min_segment;
  p.segment_granule = o.round_to;
  p.memory_limit = o.memory_limit;
  p.max_request = size_t{1} << 46;  // 64 TiB: no rounding overflow, no absurd request
  p.caching = o.caching;
  // A failed device allocation within the budget is retried after the flush's synchronize.
  p.retry_failed_map = true;
  return p;
}

}  // namespace

struct DeviceCachingAllocator::Impl {
  // A freed block that other streams used: reusable once their events have completed.
  struct Pending {
    PoolBlock* block;
    std::vector<EventId> events;
  };
  Impl(const DeviceAllocatorOptions& options, DeviceMemory* memory)
      : pool(pool_options(options), std::make_unique<DeviceSource>(memory)) {}

  BlockPool pool;  // owners are streams
  std::unordered_map<const PoolBlock*, std::vector<StreamId>> extra_streams;  // record_stream()
  std::vector<Pending> pending;
  uint64_t cross_stream_reuses = 0;
};

DeviceCachingAllocator::DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory,
                                               DeviceAllocatorOptions options)
    : memory_(std::move(memory)), options_(options) {
  if (!memory_) throw ConfigError("device allocator: no backing memory");
  impl_ = std::make_unique<Impl>(options_, memory_.get());
}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  try {
    memory_->synchronize();
  } catch (...) {  // a failed device must not turn teardown into a crash
  }
  for (const Impl::Pending& p : impl_->pending) {
    for (EventId e : p.events) memory_->destroy_event(e);
  }
  impl_.reset();  // releases every segment, while memory_ lives
}

PoolBlock* DeviceCachingAllocator::take_free_block(size_t size, bool large, StreamId stream) {
  BlockPool& pool = impl_->pool;
  // Own stream first: reusable at once, no synchronization.
  if (PoolBlock* b = pool.take_best_fit(size, large, stream)) return b;
  // Best fit over the other streams' free blocks, ordered by an event.
  PoolBlock* b = pool.take_best_fit_elsewhere(size, large, stream);
  if (b == nullptr) return nullptr;
  const EventId e = memory_->record_event(b->owner);
  memory_->stream_wait(stream, e);
  memory_->destroy_event(e);
  ++impl_->cross_stream_reuses;
  return b;
}

void* DeviceCachingAllocator::allocate(size_t bytes, StreamId stream, const char* tag) {
  std::lock_guard<std::mutex> lock(mu_);
  BlockPool& pool = impl_->pool;
  const size_t size = pool.round_request(bytes, tag);
  process_pending_locked(false);
  const bool large = BlockPool::is_large(size);
  PoolBlock* b = take_free_block(size, large, stream);
  if (b == nullptr) {
    // Flush: synchronize, finish pending frees, return wholly free segments; pending blocks
    // finished by the flush may then fit without a new segment.
    b = pool.grow(size, large, stream, bytes, tag, [&] {
      BlockPool::FlushResult flushed;
      flushed.freed = release_cached_locked();
      flushed.block = take_free_block(size, large, stream);
      return flushed;
    });
  }
  // A split-off remainder keeps the block's stream before this request.
  return pool.commit(b, size, bytes, stream);
}

void DeviceCachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const PoolBlock* b = impl_->pool.find_live(ptr);
  if (b == nullptr) {
    throw Error(fmt::format("device allocator: record_stream on unknown pointer {}", ptr));
  }
  if (stream == b->owner) return;
  std::vector<StreamId>& extra = impl_->extra_streams[b];
  if (std::find(extra.begin(), extra.end(), stream) == extra.end()) extra.push_back(stream);
}

void DeviceCachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  PoolBlock* b = impl_->pool.take_live(ptr);  // held until freed
  auto extra = impl_->extra_streams.find(b);
  if (extra == impl_->extra_streams.end()) {
    impl_->pool.free(b);
    return;
  }
  Impl::Pending p{b, {}};
  for (StreamId s : extra->second) p.events.push_back(memory_->record_event(s));
  impl_->extra_streams.erase(extra);
  impl_->pending.push_back(std::move(p));
}

void DeviceCachingAllocator::process_pending_locked(bool all_done) {
  auto& pend = impl_->pending;
  size_t kept = 0;
  for (size_t i = 0; i < pend.size(); ++i) {
    Impl::Pending& p = pend[i];
    bool done = true;
    if (!all_done) {
      for (EventId e : p.events) done = done && memory_->event_done(e);
    }
    if (!done) {
      if (kept != i) pend[kept] = std::move(p);  // never self-move: it would empty the events
      ++kept;
      continue;
    }
    for (EventId e : p.events) memory_->destroy_event(e);
    impl_->pool.free(p.block);
  }
  pend.resize(kept);
}

size_t DeviceCachingAllocator::release_cached_locked() {
  memory_->synchronize();
  process_pending_locked(true);
  // After a synchronize, stream tags no longer matter: a segment whose blocks are all free
  // (possibly still split between streams) goes back whole.
  return impl_->pool.release_free_segments();
}

void DeviceCachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

AllocatorStats DeviceCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->pool.stats();
}

uint64_t DeviceCachingAllocator::cross_stream_reuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->cross_stream_reuses;
}

void DeviceCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  impl_->pool.reset_peak();
}

void DeviceCachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.memory_limit = bytes;
  impl_->pool.set_memory_limit(bytes);
  if (impl_->pool.over_limit()) release_cached_locked();
}

}  // namespace ft::trainer::gpu
