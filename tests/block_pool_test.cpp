// block_pool_test.cpp: the block policy shared by both caching allocators (best fit, split,
// coalesce, owners, budget and retry, statistics), against a reference model on a fake source.
#include "ft/core/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ft/core/error.h"

namespace ft {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// Hands out address ranges (never dereferenced) up to a capacity, with gaps between them.
struct SourceLog {
  int maps = 0, unmaps = 0, failed_maps = 0, before_unmaps = 0;
  std::map<uintptr_t, size_t> ranges;  // base -> bytes of every mapped range
  size_t in_use = 0;
  size_t capacity = 1024 * kMiB;
  uintptr_t next_addr = 0x10000000;
};

class FakeSource final : public SegmentSource {
 public:
  explicit FakeSource(SourceLog* log) : log_(log) {}
  void* map(size_t bytes, std::string* why) override {
    if (log_->in_use + bytes > log_->capacity) {
      *why = "fake source full";
      ++log_->failed_maps;
      return nullptr;
    }
    auto [range, inserted] = log_->ranges.emplace(log_->next_addr, bytes);
    EXPECT_TRUE(inserted);
    log_->next_addr = range->first + bytes + 4096;  // segments are never adjacent
    log_->in_use += bytes;
    ++log_->maps;
    return reinterpret_cast<void*>(range->first);
  }
  void unmap(void* base, size_t bytes) override {
    const size_t erased = log_->ranges.erase(reinterpret_cast<uintptr_t>(base));
    EXPECT_EQ(erased, 1u) << "unmap of a range never mapped";
    log_->in_use -= bytes;
    ++log_->unmaps;
  }
  void before_uncached_unmap() override { ++log_->before_unmaps; }

 private:
  SourceLog* log_;
};

BlockPoolOptions small_options(size_t min_segment = 64 * kKiB) {
  BlockPoolOptions o;
  o.min_segment = min_segment;
  o.segment_granule = 512;
  return o;
}

BlockPool make(SourceLog& log, BlockPoolOptions o = small_options()) {
  return BlockPool(o, std::make_unique<FakeSource>(&log));
}

bool is_free(const PoolBlock* b) { return !b->allocated && !b->held; }

// Hands out `bytes` on `owner` the way the allocators do: own best fit, another owner's, or a
// new segment (no flush).
char* alloc(BlockPool& pool, size_t bytes, BlockPool::Owner owner = 0) {
  const size_t size = pool.round_request(bytes, "test");
  const bool large = BlockPool::is_large(size);
  PoolBlock* b = pool.take_best_fit(size, large, owner);
  if (b == nullptr) b = pool.take_best_fit_elsewhere(size, large, owner);
  if (b == nullptr) b = pool.grow(size, large, owner, bytes, "test", [] {
    return BlockPool::FlushResult{};
  });
  return static_cast<char*>(pool.commit(b, size, bytes, owner));
}

void release(BlockPool& pool, const void* p) { pool.free(pool.take_live(p)); }

// Every structural and statistical invariant of the pool.
void check_invariants(const BlockPool& pool, const SourceLog& log) {
  size_t reserved = 0, allocated = 0, requested = 0, largest = 0, free_blocks = 0;
  const auto& segs = pool.segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    const PoolSegment* seg = segs[i];
    ASSERT_EQ(seg->index, i);
    ASSERT_EQ(seg->head->ptr, seg->base);
    ASSERT_EQ(seg->head->prev, nullptr);
    reserved += seg->size;
    const char* end = seg->base;
    for (const PoolBlock* b = seg->head; b != nullptr; b = b->next) {
      ASSERT_EQ(b->segment, seg);
      ASSERT_EQ(b->ptr, end) << "blocks must tile the segment";
      ASSERT_GT(b->size, 0u);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(b->ptr) % pool.options().round_to, 0u);
      if (b->next) {
        ASSERT_EQ(b->next->prev, b);
      }
      end = b->ptr + b->size;
      if (b->allocated) {
        allocated += b->size;
        requested += b->requested;
        ASSERT_EQ(pool.find_live(b->ptr), b);
      } else if (!b->held) {
        ++free_blocks;
        largest = std::max(largest, b->size);
        if (b->next) {
          ASSERT_FALSE(is_free(b->next) && b->next->owner == b->owner) << "not coalesced";
        }
      }
    }
    ASSERT_EQ(end, seg->base + seg->size);
  }
  const AllocatorStats s = pool.stats();
  ASSERT_EQ(s.reserved, reserved);
  ASSERT_EQ(s.reserved, log.in_use);
  ASSERT_EQ(s.allocated, allocated);
  ASSERT_EQ(s.requested, requested);
  ASSERT_EQ(s.largest_free_block, largest);
  ASSERT_EQ(pool.free_block_count(), free_blocks);
  ASSERT_EQ(s.segments, segs.size());
  ASSERT_EQ(s.segments, s.segment_maps - s.segment_unmaps);
  ASSERT_GE(s.peak_allocated, s.allocated);
  ASSERT_GE(s.peak_reserved, s.reserved);
}

// The model's best fit: the smallest free block of `owner` in the pool class that fits, lowest
// address first; nullptr when there is none.
const PoolBlock* expected_best_fit(const BlockPool& pool, size_t size, bool large,
                                   BlockPool::Owner owner) {
  const PoolBlock* best = nullptr;
  for (const PoolSegment* seg : pool.segments()) {
    if (seg->large != large) continue;
    for (const PoolBlock* b = seg->head; b != nullptr; b = b->next) {
      if (!is_free(b) || b->owner != owner || b->size < size) continue;
      if (best == nullptr || std::tie(b->size, b->ptr) < std::tie(best->size, best->ptr)) best = b;
    }
  }
  return best;
}

TEST(BlockPoolTest, RoundsRequestsAndSizesSegments) {
  SourceLog log;
  BlockPoolOptions o = small_options(2 * kMiB);
  o.segment_granule = 4096;
  BlockPool pool = make(log, o);
  EXPECT_EQ(pool.round_request(0, "t"), 512u);
  EXPECT_EQ(pool.round_request(1000, "t"), 1024u);
  EXPECT_EQ(pool.segment_size(1024, false), 2 * kMiB);             // at least min_segment
  EXPECT_EQ(pool.segment_size(3 * kMiB, true), 4 * kMiB);          // large: 2 MiB multiples
  EXPECT_EQ(pool.segment_size(2 * kMiB + 512, false), 2 * kMiB + 4096);  // granule multiples
  EXPECT_FALSE(BlockPool::is_large(kMiB - 512));
  EXPECT_TRUE(BlockPool::is_large(kMiB));
  EXPECT_THROW(pool.round_request(size_t{1} << 60, "huge"), OutOfMemoryError);
  EXPECT_EQ(pool.stats().ooms, 1u);
}

TEST(BlockPoolTest, BestFitTakesTheSmallestFittingBlockThenTheLowestAddress) {
  SourceLog log;
  BlockPool pool = make(log);  // one 64 KiB small segment
  // Holes of 8, 4, 16 and 4 KiB between live 1 KiB separators.
  std::vector<char*> holes, keep;
  for (size_t kib : {8, 4, 16, 4}) {
    holes.push_back(alloc(pool, kib * kKiB));
    keep.push_back(alloc(pool, kKiB));
  }
  for (char* h : holes) release(pool, h);
  ASSERT_EQ(pool.segments().size(), 1u);
  check_invariants(pool, log);
  EXPECT_EQ(alloc(pool, 3 * kKiB), holes[1]);  // the first of the two 4 KiB holes
  EXPECT_EQ(alloc(pool, 4 * kKiB), holes[3]);  // the other one
  EXPECT_EQ(alloc(pool, 5 * kKiB), holes[0]);  // 8 KiB beats 16 KiB and the segment's tail
  EXPECT_EQ(pool.stats().segment_maps, 1u);
  check_invariants(pool, log);
}

TEST(BlockPoolTest, SplitsOnlyWhenTheRemainderIsWorthKeeping) {
  SourceLog log;
  BlockPoolOptions o = small_options(4 * kKiB);
  o.round_to = 256;
  o.segment_granule = 256;
  BlockPool pool = make(log, o);
  char* a = alloc(pool, 3584);  // leaves 512: split
  EXPECT_EQ(pool.find_live(a)->size, 3584u);
  EXPECT_EQ(pool.stats().largest_free_block, 512u);
  release(pool, a);
  char* b = alloc(pool, 3840);  // would leave 256 < 512: the whole 4 KiB block
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.stats().allocated, 4096u);
  EXPECT_EQ(pool.stats().requested, 3840u);
  release(pool, b);
  char* big = alloc(pool, 3 * kMiB + 512 * kKiB);  // a 4 MiB segment; 512 KiB left: no split
  EXPECT_EQ(pool.find_live(big)->size, 4 * kMiB);
  release(pool, big);
  char* c = alloc(pool, 2 * kMiB);  // 2 MiB left: split
  EXPECT_EQ(c, big);
  EXPECT_EQ(pool.find_live(c)->size, 2 * kMiB);
  release(pool, c);
  check_invariants(pool, log);

  SourceLog log2;
  BlockPoolOptions no_split = small_options();
  no_split.split_large = false;
  BlockPool whole = make(log2, no_split);
  release(whole, alloc(whole, 8 * kMiB));
  EXPECT_EQ(whole.find_live(alloc(whole, 2 * kMiB))->size, 8 * kMiB);
  check_invariants(whole, log2);
}

TEST(BlockPoolTest, OwnersKeepTheirBlocksAndTheRemainderOfAStolenOne) {
  SourceLog log;
  BlockPool pool = make(log);
  char* p = alloc(pool, 8 * kMiB, 1);
  release(pool, p);
  // Owner 2 finds nothing of its own; owner 1's block serves it and is split.
  const size_t size = pool.round_request(2 * kMiB, "t");
  EXPECT_EQ(pool.take_best_fit(size, true, 2), nullptr);
  PoolBlock* stolen = pool.take_best_fit_elsewhere(size, true, 2);
  ASSERT_NE(stolen, nullptr);
  EXPECT_EQ(stolen->owner, 1u);
  char* q = static_cast<char*>(pool.commit(stolen, size, 2 * kMiB, 2));
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.find_live(q)->owner, 2u);
  const PoolBlock* rest = pool.find_live(q)->next;
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->owner, 1u);  // the remainder stays with its owner
  EXPECT_EQ(rest->size, 6 * kMiB);
  release(pool, q);
  // Free neighbours of different owners are not coalesced...
  EXPECT_EQ(pool.free_block_count(), 2u);
  EXPECT_EQ(pool.stats().largest_free_block, 6 * kMiB);
  check_invariants(pool, log);
  // ...but a segment whose blocks are all free goes back whole.
  EXPECT_EQ(pool.release_free_segments(), 8 * kMiB);
  EXPECT_EQ(log.in_use, 0u);
  check_invariants(pool, log);
}

TEST(BlockPoolTest, HeldBlocksAreNeitherReusedNorMerged) {
  SourceLog log;
  BlockPool pool = make(log, small_options(12 * kKiB));
  char* a = alloc(pool, 4 * kKiB);
  char* b = alloc(pool, 4 * kKiB);
  char* c = alloc(pool, 4 * kKiB);
  PoolBlock* held = pool.take_live(b);  // freed, but not yet handed back
  EXPECT_TRUE(held->held);
  release(pool, a);
  release(pool, c);
  EXPECT_EQ(pool.free_block_count(), 2u);  // a and c stay apart: b is between them
  EXPECT_EQ(pool.release_free_segments(), 0u);
  check_invariants(pool, log);
  pool.free(held);
  EXPECT_EQ(pool.free_block_count(), 1u);  // all three merged
  EXPECT_EQ(pool.stats().largest_free_block, 12 * kKiB);
  EXPECT_EQ(pool.release_free_segments(), 12 * kKiB);
  check_invariants(pool, log);
}

TEST(BlockPoolTest, ReleasesOnlyWhollyFreeSegments) {
  SourceLog log;
  BlockPool pool = make(log, small_options(16 * kKiB));
  std::vector<char*> live;
  for (int i = 0; i < 12; ++i) live.push_back(alloc(pool, 4 * kKiB));  // three full segments
  ASSERT_EQ(pool.segments().size(), 3u);
  for (int i : {0, 1, 2, 3, 9}) release(pool, live[i]);  // the first segment, part of the third
  EXPECT_EQ(pool.release_free_segments(), 16 * kKiB);
  const AllocatorStats s = pool.stats();
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.segment_unmaps, 1u);
  EXPECT_EQ(s.reserved, 32 * kKiB);
  EXPECT_EQ(s.allocated, 28 * kKiB);
  check_invariants(pool, log);
  EXPECT_EQ(pool.release_free_segments(), 0u);
}

TEST(BlockPoolTest, NoCachingReturnsASegmentWhenItsLastBlockIsFreed) {
  SourceLog log;
  BlockPoolOptions o = small_options();
  o.caching = false;
  BlockPool pool = make(log, o);
  char* x = alloc(pool, 1000);
  char* y = alloc(pool, 2000);
  release(pool, x);
  EXPECT_EQ(log.unmaps, 0);
  release(pool, y);
  EXPECT_EQ(log.unmaps, 1);
  EXPECT_EQ(log.before_unmaps, 1);
  EXPECT_EQ(pool.stats().reserved, 0u);
  check_invariants(pool, log);
}

TEST(BlockPoolTest, GrowFlushesOnceThenReportsTheOom) {
  SourceLog log;
  BlockPoolOptions o = small_options();
  o.memory_limit = 8 * kMiB;
  o.oom_prefix = "pool out of memory";
  BlockPool pool = make(log, o);
  char* keep = alloc(pool, 2 * kMiB);
  int flushes = 0;
  auto freeing = [&] {
    ++flushes;
    return BlockPool::FlushResult{2 * kMiB, nullptr};
  };
  auto nothing = [&] {
    ++flushes;
    return BlockPool::FlushResult{};
  };
  // Fits: no flush.
  PoolBlock* b = pool.grow(4 * kMiB, true, 0, 4 * kMiB, "fits", nothing);
  EXPECT_EQ(flushes, 0);
  pool.commit(b, 4 * kMiB, 4 * kMiB, 0);
  // Over the budget, a flush that frees nothing: OOM without a retry.
  try {
    pool.grow(4 * kMiB, true, 0, 4 * kMiB, "act", nothing);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("pool out of memory: 'act' requested 4.0 MiB; limit 8.0 MiB"),
              std::string::npos) << m;
    EXPECT_NE(m.find("reserved 6.0 MiB, allocated 6.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("would exceed the limit"), std::string::npos) << m;
  }
  EXPECT_EQ(flushes, 1);
  EXPECT_EQ(pool.stats().cache_flush_retries, 0u);
  EXPECT_EQ(pool.stats().ooms, 1u);
  // A flush that frees something is followed by one retry (still over budget here).
  EXPECT_THROW(pool.grow(4 * kMiB, true, 0, 4 * kMiB, "act", freeing), OutOfMemoryError);
  EXPECT_EQ(flushes, 2);
  EXPECT_EQ(pool.stats().cache_flush_retries, 1u);
  // A flush that finds a block returns it.
  release(pool, keep);
  PoolBlock* found = pool.take_best_fit(2 * kMiB, true, 0);
  ASSERT_NE(found, nullptr);
  PoolBlock* got = pool.grow(4 * kMiB, true, 0, 2 * kMiB, "act", [&] {
    return BlockPool::FlushResult{0, found};
  });
  EXPECT_EQ(got, found);
  EXPECT_EQ(pool.stats().cache_flush_retries, 2u);
  pool.commit(got, 2 * kMiB, 2 * kMiB, 0);
  check_invariants(pool, log);
}

TEST(BlockPoolTest, RetryFailedMapRetriesASourceFailureWithinTheBudget) {
  for (bool retry : {false, true}) {
    SourceLog log;
    log.capacity = 4 * kMiB;
    BlockPoolOptions o = small_options();
    o.retry_failed_map = retry;
    BlockPool pool = make(log, o);
    try {
      pool.grow(8 * kMiB, true, 0, 8 * kMiB, "big", [] { return BlockPool::FlushResult{}; });
      FAIL() << "expected OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("limit unlimited"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("fake source full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(log.failed_maps, retry ? 2 : 1);
    EXPECT_EQ(pool.stats().cache_flush_retries, retry ? 1u : 0u);
  }
}

TEST(BlockPoolTest, BadOptionsAndUnknownPointersAreErrors) {
  SourceLog log;
  BlockPoolOptions o = small_options();
  o.round_to = 100;
  EXPECT_THROW(make(log, o), ConfigError);
  o.round_to = 32;  // below min_round_to
  EXPECT_THROW(make(log, o), ConfigError);
  o = small_options();
  o.min_segment = 0;
  EXPECT_THROW(make(log, o), ConfigError);
  o = small_options();
  o.segment_granule = 768;
  EXPECT_THROW(make(log, o), ConfigError);
  o = small_options();
  o.name = "test pool";
  BlockPool pool = make(log, o);
  char* p = alloc(pool, 100);
  release(pool, p);
  try {
    pool.take_live(p);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test pool: deallocate of unknown pointer"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().num_frees, 1u);
}

// Random traffic on `owners` owners; after every step the pool must satisfy every invariant,
// hand out exactly the model's best fit, and keep the live set of the model.
void run_random_traffic(int owners, uint32_t seed) {
  SourceLog log;
  BlockPool pool = make(log, small_options(256 * kKiB));
  std::mt19937 rng(seed);
  std::map<char*, std::pair<size_t, BlockPool::Owner>> live;  // ptr -> (requested, owner)
  uint64_t allocs = 0, frees = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      size_t n = 1 + rng() % (64 * kKiB);
      if (rng() % 10 == 0) n = kMiB + rng() % (6 * kMiB);
      const BlockPool::Owner owner = 1 + rng() % owners;
      const size_t size = pool.round_request(n, "t");
      const bool large = BlockPool::is_large(size);
      const PoolBlock* want = expected_best_fit(pool, size, large, owner);
      const char* want_ptr = want ? want->ptr : nullptr;
      const uint64_t maps = pool.stats().segment_maps;
      char* p = alloc(pool, n, owner);
      if (want_ptr != nullptr) {
        ASSERT_EQ(p, want_ptr) << "not the best fit";
      } else if (owners == 1) {
        ASSERT_EQ(pool.stats().segment_maps, maps + 1) << "no fit must map a segment";
      }
      const PoolBlock* b = pool.find_live(p);
      ASSERT_GE(b->size, size);
      ASSERT_LT(b->size - size, large ? BlockPool::kMinLargeRemainder
                                      : BlockPool::kMinSmallRemainder);
      ASSERT_EQ(b->owner, owner);
      ASSERT_TRUE(live.emplace(p, std::make_pair(n, owner)).second);
      ++allocs;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      release(pool, it->first);
      live.erase(it);
      ++frees;
    }
    check_invariants(pool, log);
    const AllocatorStats s = pool.stats();
    ASSERT_EQ(s.num_allocs, allocs);
    ASSERT_EQ(s.num_frees, frees);
    size_t requested = 0;
    for (const auto& [p, v] : live) requested += v.first;
    ASSERT_EQ(s.requested, requested);
    if (step % 700 == 0) pool.release_free_segments();
  }
  for (const auto& [p, v] : live) release(pool, p);
  check_invariants(pool, log);
  if (owners == 1) {
    // One owner: every segment coalesced back into a single free block.
    ASSERT_EQ(pool.free_block_count(), pool.segments().size());
  }
  pool.release_free_segments();
  EXPECT_EQ(pool.stats().reserved, 0u);
  EXPECT_EQ(log.in_use, 0u);
  EXPECT_EQ(pool.free_block_count(), 0u);
}

TEST(BlockPoolTest, RandomTrafficOneOwnerMatchesTheModel) { run_random_traffic(1, 1234); }
TEST(BlockPoolTest, RandomTrafficThreeOwnersMatchesTheModel) { run_random_traffic(3, 99); }

TEST(BlockPoolTest, DestructorUnmapsEverySegmentLiveBlocksIncluded) {
  SourceLog log;
  {
    BlockPool pool = make(log);
    alloc(pool, 1000);
    alloc(pool, 3 * kMiB);
    EXPECT_EQ(log.maps, 2);
  }
  EXPECT_EQ(log.unmaps, 2);
  EXPECT_EQ(log.in_use, 0u);
}

}  // namespace
}  // namespace ft
