// block_pool.h: the block policy both caching allocators share: best fit, split, coalesce, stats.
//
// A BlockPool carves segments (from a SegmentSource: mmap for the host allocator, a device
// backend for the device allocator) into address-ordered blocks. Requests are rounded, served
// best-fit from size-ordered free sets (small and large pools, kept per owner), split when the
// remainder is worth keeping, and coalesced with free neighbours of the same owner on free.
// Owners are opaque integers: the host allocator uses one (0), the device allocator one per
// stream, adding its stream-ordering rules (cross-stream reuse, held blocks) on top.
// Not thread-safe: the allocators lock around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ft/core/allocator.h"

namespace ft {

// Where a BlockPool's segments come from.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // A fresh range of `bytes`, or nullptr with `*why` saying what failed.
  virtual void* map(size_t bytes, std::string* why) = 0;
  // Returns a range from map().
  virtual void unmap(void* base, size_t bytes) = 0;
  // Called before free() returns a segment without caching (e.g. a device synchronize).
  virtual void before_uncached_unmap() {}
};

struct BlockPoolOptions {
  const char* name = "allocator";           // opens error messages
  const char* oom_prefix = "out of memory";  // opens OOM reports
  const char* unlimited = "unlimited";       // the limit's text in OOM reports when it is 0
  size_t min_round_to = 64;                  // round_to must be a power of two >= this
  size_t round_to = 512;                     // request rounding (and alignment)
  size_t min_segment = 2u << 20;             // smallest segment mapped for small requests
  size_t segment_granule = 512;              // segment sizes are multiples of this
  size_t memory_limit = 0;                   // budget on reserved bytes; 0 = none
  size_t max_request = size_t{1} << 48;      // larger requests fail outright
  bool caching = true;                       // false: a segment that becomes free goes back
  bool split_large = true;                   // false: large blocks are never split
  // After a failed map within the budget, flush and retry even when the flush freed nothing.
  bool retry_failed_map = false;
};

struct PoolSegment;

// A contiguous range inside a segment: free (in its owner's free set), live, or held (freed
// but not yet reusable: neither in a free set nor merged).
struct PoolBlock {
  PoolSegment* segment = nullptr;
  char* ptr = nullptr;
  size_t size = 0;       // rounded size of the range
  size_t requested = 0;  // caller's bytes while live
  uintptr_t owner = 0;   // whose free set it goes to (a stream for the device allocator)
  bool allocated = false;
  bool held = false;
  PoolBlock* prev = nullptr;  // address-ordered neighbours within the segment
  PoolBlock* next = nullptr;
};

// One range from the source, split into an address-ordered list of blocks.
struct PoolSegment {
  char* base = nullptr;
  size_t size = 0;
  bool large = false;
  size_t index = 0;  // position in the pool's segment list
  PoolBlock* head = nullptr;
};

class BlockPool {
 public:
  using Owner = uintptr_t;
  static constexpr size_t kLargeThreshold = size_t{1} << 20;     // rounded sizes >= this: large
  static constexpr size_t kLargeSegmentRound = size_t{2} << 20;  // large segments: multiples
  static constexpr size_t kMinSmallRemainder = 512;              // split small blocks if >= left
  static constexpr size_t kMinLargeRemainder = size_t{1} << 20;  // split large blocks if >= left
  // The block a request rounded to `size` gets from a segment mapped for it (default options):
  // a large one takes its whole 2 MiB-rounded segment when less than kMinLargeRemainder would
  // be left over (a 1.5 MiB tensor holds 2 MiB). What the memory model counts per tensor.
  static constexpr size_t fresh_block_size(size_t size) {
    if (size < kLargeThreshold) return size;
    const size_t seg = (size + kLargeSegmentRound - 1) / kLargeSegmentRound * kLargeSegmentRound;
    return seg - size < kMinLargeRemainder ? seg : size;
  }

  // What a flush before the retry of a failed segment map achieved.
  struct FlushResult {
    size_t freed = 0;              // bytes returned to the source
    PoolBlock* block = nullptr;    // a block that now serves the request (already taken)
  };
  struct MapResult {
    PoolBlock* block = nullptr;  // the new segment's single block (not in a free set)
    bool over_budget = false;
    std::string why;  // when block is null
  };

  // Throws ConfigError on bad options.
  BlockPool(BlockPoolOptions options, std::unique_ptr<SegmentSource> source);
  ~BlockPool();  // unmaps every segment, live blocks included
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // The rounded size of a request; OutOfMemoryError beyond max_request.
  size_t round_request(size_t bytes, const char* tag);
  static bool is_large(size_t size) { return size >= kLargeThreshold; }
  size_t segment_size(size_t size, bool large) const;

  // Best fit (smallest, then lowest address) among `owner`'s free blocks of the pool, removed
  // from its free set; nullptr when none fits.
  PoolBlock* take_best_fit(size_t size, bool large, Owner owner);
  // The same over every other owner's free blocks.
  PoolBlock* take_best_fit_elsewhere(size_t size, bool large, Owner owner);
  // Maps a new segment for `size` within the budget.
  MapResult map_segment(size_t size, bool large, Owner owner);
  // The slow path: maps a segment; failing that, calls `flush` and retries once (counted in
  // cache_flush_retries); failing that, throws OutOfMemoryError naming `tag`.
  PoolBlock* grow(size_t size, bool large, Owner owner, size_t requested, const char* tag,
                  const std::function<FlushResult()>& flush);
  // Hands out `b` (from take_* or grow) for `requested` bytes rounded to `size`, on `owner`:
  // splits off the tail (which keeps b's previous owner) when worth it. Returns b->ptr.
  void* commit(PoolBlock* b, size_t size, size_t requested, Owner owner);

  PoolBlock* find_live(const void* ptr) const;
  // Ends a live block's life (statistics included); Error for an unknown pointer. The block is
  // held (neither reusable nor merged) until the caller passes it to free().
  PoolBlock* take_live(const void* ptr);
  // Coalesces a held block with its free same-owner neighbours and caches it; without
  // caching, a segment left as one free block goes back to the source.
  void free(PoolBlock* b);
  // Returns every segment whose blocks are all free (whatever their owners); the bytes freed.
  size_t release_free_segments();

  AllocatorStats stats() const;  // largest_free_block computed now
  void reset_peak();
  void set_memory_limit(size_t bytes) { options_.memory_limit = bytes; }
  bool over_limit() const;
  [[noreturn]] void throw_oom(size_t requested, const char* tag, const std::string& why);
  const BlockPoolOptions& options() const { return options_; }

  // For tests and diagnostics: the segments in pool order, and how many blocks are cached.
  const std::vector<PoolSegment*>& segments() const { return segments_; }
  size_t free_block_count() const;

 private:
  struct BlockLess {
    bool operator()(const PoolBlock* a, const PoolBlock* b) const;
  };
  using FreeSet = std::set<PoolBlock*, BlockLess>;
  struct OwnerSets {
    FreeSet small, large;
    FreeSet& get(bool large_pool) { return large_pool ? large : small; }
  };

  FreeSet& free_set(const PoolBlock* b) { return free_[b->owner].get(b->segment->large); }
  void unmap_segment(PoolSegment* seg);

  BlockPoolOptions options_;
  std::unique_ptr<SegmentSource> source_;
  std::vector<PoolSegment*> segments_;
  std::map<Owner, OwnerSets> free_;
  std::unordered_map<const void*, PoolBlock*> live_;
  AllocatorStats stats_;
};

}  // namespace ft
