// block_pool.cpp: the shared caching-allocator policy: rounding, best fit per owner, split,
// coalesce, segment budget and flush-and-retry, statistics and OOM reports.
#include "ft/core/block_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "ft/core/annotate.h"
#include "ft/core/error.h"

namespace ft {
namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
bool is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

// Merges b's successor into b.
void absorb_next(PoolBlock* b) {
  PoolBlock* next = b->next;
  b->size += next->size;
  b->next = next->next;
  if (next->next) next->next->prev = b;
  delete next;
}

}  // namespace

bool BlockPool::BlockLess::operator()(const PoolBlock* a, const PoolBlock* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

BlockPool::BlockPool(BlockPoolOptions options, std::unique_ptr<SegmentSource> source)
    : options_(options), source_(std::move(source)) {
  if (!is_pow2(options_.round_to) || options_.round_to < options_.min_round_to) {
    throw ConfigError(fmt::format("{} round_to must be a power of two >= {}, got {}",
                                  options_.name, options_.min_round_to, options_.round_to));
  }
  if (options_.min_segment == 0) {
    throw ConfigError(fmt::format("{} min_segment must be > 0", options_.name));
  }
  if (options_.segment_granule == 0 || options_.segment_granule % options_.round_to != 0) {
    throw ConfigError(fmt::format("{} segment granule {} is not a multiple of round_to {}",
                                  options_.name, options_.segment_granule, options_.round_to));
  }
  if (!source_) throw ConfigError(fmt::format("{}: no segment source", options_.name));
}

BlockPool::~BlockPool() {
  for (PoolSegment* seg : segments_) {
    try {
      source_->unmap(seg->base, seg->size);
    } catch (...) {  // a failed device must not turn teardown into a crash
    }
    for (PoolBlock* b = seg->head; b != nullptr;) {
      PoolBlock* next = b->next;
      delete b;
      b = next;
    }
    delete seg;
  }
}

size_t BlockPool::round_request(size_t bytes, const char* tag) {
  if (bytes > options_.max_request) {
    throw_oom(bytes, tag, "request exceeds the maximum supported size");
  }
  return round_up(std::max<size_t>(bytes, 1), options_.round_to);
}

size_t BlockPool::segment_size(size_t size, bool large) const {
  const size_t granule = options_.segment_granule;
  return large ? round_up(round_up(size, kLargeSegmentRound), granule)
               : round_up(std::max(options_.min_segment, size), granule);
}

PoolBlock* BlockPool::take_best_fit(size_t size, bool large, Owner owner) {
  auto sets = free_.find(owner);
  if (sets == free_.end()) return nullptr;
  FreeSet& set = sets->second.get(large);
  PoolBlock key;
  key.size = size;
  auto it = set.lower_bound(&key);
  if (it == set.end()) return nullptr;
  PoolBlock* b = *it;
  set.erase(it);
  return b;
}

PoolBlock* BlockPool::take_best_fit_elsewhere(size_t size, bool large, Owner owner) {
  PoolBlock key;
  key.size = size;
  FreeSet* best_set = nullptr;
  FreeSet::iterator best;
  for (auto& [o, sets] : free_) {
    if (o == owner) continue;
    FreeSet& set = sets.get(large);
    auto it = set.lower_bound(&key);
    if (it != set.end() && (best_set == nullptr || BlockLess()(*it, *best))) {
      best_set = &set;
      best = it;
    }
  }
  if (best_set == nullptr) return nullptr;
  PoolBlock* b = *best;
  best_set->erase(best);
  return b;
}

BlockPool::MapResult BlockPool::map_segment(size_t size, bool large, Owner owner) {
  MapResult r;
  const size_t seg_size = segment_size(size, large);
  const size_t limit = options_.memory_limit;
  r.over_budget = limit != 0 && (seg_size > limit || stats_.reserved > limit - seg_size);
  if (r.over_budget) {
    r.why = fmt::format("a new {} segment would exceed the limit", format_bytes(seg_size));
    return r;
  }
  auto* base = static_cast<char*>(source_->map(seg_size, &r.why));
  if (base == nullptr) return r;
  auto* seg = new PoolSegment;
  seg->base = base;
  seg->size = seg_size;
  seg->large = large;
  seg->index = segments_.size();
  auto* b = new PoolBlock;
  b->segment = seg;
  b->ptr = base;
  b->size = seg_size;
  b->owner = owner;
  seg->head = b;
  segments_.push_back(seg);
  stats_.reserved += seg_size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.segments;
  ++stats_.segment_maps;
  ++stats_.slow_path_allocs;
  r.block = b;
  return r;
}

PoolBlock* BlockPool::grow(size_t size, bool large, Owner owner, size_t requested,
                           const char* tag, const std::function<FlushResult()>& flush) {
  FT_RANGE("alloc.slow_path", RangeKind::kAlloc, static_cast<int64_t>(requested));
  MapResult r = map_segment(size, large, owner);
  if (r.block != nullptr) return r.block;
  FlushResult flushed;
  {
    FT_RANGE("alloc.retry.flush_cache", RangeKind::kAlloc);  // time; the instant below counts
    flushed = flush();
  }
  const bool retry = flushed.block != nullptr || flushed.freed > 0 ||
                     (options_.retry_failed_map && !r.over_budget);
  if (retry) {
    ++stats_.cache_flush_retries;
    mark("alloc.retry", RangeKind::kAlloc, static_cast<int64_t>(requested));
    if (flushed.block != nullptr) return flushed.block;
    r = map_segment(size, large, owner);
    if (r.block != nullptr) return r.block;
  }
  throw_oom(requested, tag, r.why);
}

void* BlockPool::commit(PoolBlock* b, size_t size, size_t requested, Owner owner) {
  const Owner origin = b->owner;
  b->owner = owner;
  const size_t remainder = b->size - size;
  const bool large = b->segment->large;
  const bool split = large ? (options_.split_large && remainder >= kMinLargeRemainder)
                           : remainder >= kMinSmallRemainder;
  if (split) {
    auto* rest = new PoolBlock;
    rest->segment = b->segment;
    rest->ptr = b->ptr + size;
    rest->size = remainder;
    rest->owner = origin;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    free_set(rest).insert(rest);
  }
  b->allocated = true;
  b->held = false;
  b->requested = requested;
  live_.emplace(b->ptr, b);
  stats_.allocated += b->size;
  stats_.requested += requested;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.num_allocs;
  return b->ptr;
}

PoolBlock* BlockPool::find_live(const void* ptr) const {
  auto it = live_.find(ptr);
  return it == live_.end() ? nullptr : it->second;
}

PoolBlock* BlockPool::take_live(const void* ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw Error(fmt::format("{}: deallocate of unknown pointer {} (double free or foreign)",
                            options_.name, ptr));
  }
  PoolBlock* b = it->second;
  live_.erase(it);
  stats_.allocated -= b->size;
  stats_.requested -= b->requested;
  ++stats_.num_frees;
  b->allocated = false;
  b->held = true;
  b->requested = 0;
  return b;
}

void BlockPool::free(PoolBlock* b) {
  b->held = false;
  FreeSet& set = free_set(b);
  const Owner owner = b->owner;
  auto mergeable = [owner](const PoolBlock* n) {
    return n != nullptr && !n->allocated && !n->held && n->owner == owner;
  };
  if (PoolBlock* prev = b->prev; mergeable(prev)) {
    set.erase(prev);
    absorb_next(prev);
    b = prev;
  }
  if (mergeable(b->next)) {
    set.erase(b->next);
    absorb_next(b);
  }
  if (!options_.caching && b->prev == nullptr && b->next == nullptr) {
    FT_RANGE("alloc.unmap", RangeKind::kAlloc, static_cast<int64_t>(b->segment->size));
    source_->before_uncached_unmap();
    unmap_segment(b->segment);
    return;
  }
  set.insert(b);
}

void BlockPool::unmap_segment(PoolSegment* seg) {
  source_->unmap(seg->base, seg->size);
  stats_.reserved -= seg->size;
  --stats_.segments;
  ++stats_.segment_unmaps;
  PoolSegment* last = segments_.back();
  segments_[seg->index] = last;
  last->index = seg->index;
  segments_.pop_back();
  for (PoolBlock* b = seg->head; b != nullptr;) {
    PoolBlock* next = b->next;
    if (!b->allocated && !b->held) free_set(b).erase(b);  // a no-op for a block not yet cached
    delete b;
    b = next;
  }
  delete seg;
}

size_t BlockPool::release_free_segments() {
  size_t released = 0;
  for (size_t i = segments_.size(); i-- > 0;) {
    PoolSegment* seg = segments_[i];
    bool all_free = true;
    for (const PoolBlock* b = seg->head; b != nullptr && all_free; b = b->next) {
      all_free = !b->allocated && !b->held;
    }
    if (!all_free) continue;
    released += seg->size;
    unmap_segment(seg);  // swaps the last segment into slot i, which was already visited
  }
  return released;
}

AllocatorStats BlockPool::stats() const {
  AllocatorStats s = stats_;
  s.largest_free_block = 0;
  for (const auto& [owner, sets] : free_) {
    for (const FreeSet* set : {&sets.small, &sets.large}) {
      if (!set->empty()) {
        s.largest_free_block = std::max(s.largest_free_block, (*set->rbegin())->size);
      }
    }
  }
  return s;
}

void BlockPool::reset_peak() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

bool BlockPool::over_limit() const {
  return options_.memory_limit != 0 && stats_.reserved > options_.memory_limit;
}

size_t BlockPool::free_block_count() const {
  size_t n = 0;
  for (const auto& [owner, sets] : free_) n += sets.small.size() + sets.large.size();
  return n;
}

void BlockPool::throw_oom(size_t requested, const char* tag, const std::string& why) {
  FT_RANGE("alloc.oom.report", RangeKind::kAlloc);
  ++stats_.ooms;
  mark("alloc.oom", RangeKind::kAlloc,
       static_cast<int64_t>(std::min(requested, options_.max_request)));
  const AllocatorStats s = stats();
  const std::string limit = options_.memory_limit ? format_bytes(options_.memory_limit)
                                                  : std::string(options_.unlimited);
  throw OutOfMemoryError(fmt::format(
      "{}: '{}' requested {}; limit {}, reserved {}, allocated {}, free in cache {} "
      "(largest free block {}, fragmentation {:.0f}%); {}",
      options_.oom_prefix, tag ? tag : "", format_bytes(requested), limit,
      format_bytes(s.reserved), format_bytes(s.allocated), format_bytes(s.reserved - s.allocated),
      format_bytes(s.largest_free_block), s.fragmentation() * 100.0, why));
}

}  // namespace ft
