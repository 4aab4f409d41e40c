// allocator_test.cpp: behaviour of the caching allocator (reuse, split/coalesce, budget, stats) and byte-size helpers.
#include "ft/core/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ft/core/block_pool.h"
#include "ft/core/error.h"

namespace ft {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

size_t round512(size_t n) { return (std::max<size_t>(n, 1) + 511) / 512 * 512; }

AllocatorOptions small_segments(size_t min_segment) {
  AllocatorOptions o;
  o.min_segment = min_segment;
  o.huge_pages = false;
  return o;
}

TEST(AllocatorTest, FreedBlockIsReusedWithoutNewSegment) {
  CachingAllocator alloc;
  void* a = alloc.allocate(4096, "a");
  void* big = alloc.allocate(8 * kMiB, "big");
  const AllocatorStats before = alloc.stats();
  EXPECT_EQ(before.slow_path_allocs, 2u);
  alloc.deallocate(a);
  alloc.deallocate(big);
  void* a2 = alloc.allocate(4096, "a2");
  void* big2 = alloc.allocate(8 * kMiB, "big2");
  const AllocatorStats after = alloc.stats();
  EXPECT_EQ(a2, a);
  EXPECT_EQ(big2, big);
  EXPECT_EQ(after.slow_path_allocs, before.slow_path_allocs);
  EXPECT_EQ(after.segment_maps, before.segment_maps);
  EXPECT_EQ(after.reserved, before.reserved);
  EXPECT_EQ(after.num_allocs, 4u);
  EXPECT_EQ(after.num_frees, 2u);
  alloc.deallocate(a2);
  alloc.deallocate(big2);
}

TEST(AllocatorTest, SmallAndLargePoolsUseSeparateSegments) {
  CachingAllocator alloc;
  void* small = alloc.allocate(1000);
  void* large = alloc.allocate(3 * kMiB);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.reserved, 2 * kMiB + 4 * kMiB);  // min_segment + request rounded to 2 MiB
  EXPECT_EQ(s.allocated, 1024u + 3 * kMiB);      // the 1 MiB tail of the large segment was split off
  alloc.deallocate(small);
  alloc.deallocate(large);
}

TEST(AllocatorTest, SplitsAndCoalescesNeighbours) {
  // A 12 KiB segment holds exactly three 4 KiB blocks.
  CachingAllocator alloc(small_segments(12 * kKiB));
  char* a = static_cast<char*>(alloc.allocate(4096));
  char* b = static_cast<char*>(alloc.allocate(4096));
  char* c = static_cast<char*>(alloc.allocate(4096));
  EXPECT_EQ(b, a + 4096);
  EXPECT_EQ(c, b + 4096);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.largest_free_block, 0u);

  alloc.deallocate(b);  // the middle
  s = alloc.stats();
  EXPECT_EQ(s.largest_free_block, 4096u);
  alloc.deallocate(a);  // an end: merges with the free middle
  s = alloc.stats();
  EXPECT_EQ(s.largest_free_block, 8192u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);

  // The merged block serves an 8 KiB request in place, without a new segment.
  void* ab = alloc.allocate(8192);
  EXPECT_EQ(ab, a);
  EXPECT_EQ(alloc.stats().segments, 1u);
  alloc.deallocate(ab);
  alloc.deallocate(c);
  s = alloc.stats();
  EXPECT_EQ(s.largest_free_block, 12 * kKiB);
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.segment_maps, 1u);
}

TEST(AllocatorTest, LargeBlocksSplitOnlyWhenRemainderIsAtLeastOneMiB) {
  CachingAllocator alloc;
  void* p = alloc.allocate(8 * kMiB);
  alloc.deallocate(p);
  void* q = alloc.allocate(2 * kMiB);  // 6 MiB remainder is split off and stays cached
  EXPECT_EQ(q, p);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 2 * kMiB);
  EXPECT_EQ(s.largest_free_block, 6 * kMiB);
  alloc.deallocate(q);

  void* r = alloc.allocate(8 * kMiB - 512 * kKiB);  // remainder 512 KiB: not split
  EXPECT_EQ(alloc.stats().allocated, 8 * kMiB);
  EXPECT_EQ(alloc.stats().requested, 8 * kMiB - 512 * kKiB);
  alloc.deallocate(r);
}

// BlockPool::fresh_block_size (what the memory model counts per tensor) is the block a fresh
// allocator hands out, on either side of each rule's edge.
TEST(AllocatorTest, FreshBlockSizeIsWhatAFreshAllocatorHolds) {
  for (const size_t bytes : {size_t{1}, size_t{513}, 700 * kKiB, kMiB - 1, kMiB, kMiB + 1,
                             3 * kMiB / 2, 2 * kMiB, 2 * kMiB + 1, 3 * kMiB, 3 * kMiB + 1,
                             size_t{13031424} / 2, size_t{13031424}, 15 * kMiB + 512 * kKiB}) {
    CachingAllocator alloc;
    void* p = alloc.allocate(bytes);
    const size_t rounded = (bytes + 511) / 512 * 512;
    EXPECT_EQ(alloc.stats().allocated, BlockPool::fresh_block_size(rounded)) << bytes;
    alloc.deallocate(p);
  }
  EXPECT_EQ(BlockPool::fresh_block_size(3 * kMiB / 2), 2 * kMiB);
  EXPECT_EQ(BlockPool::fresh_block_size(3 * kMiB), 3 * kMiB);  // 1 MiB left: split
}

TEST(AllocatorTest, SplitLargeFalseHandsOutWholeBlocks) {
  AllocatorOptions o;
  o.split_large = false;
  CachingAllocator alloc(o);
  void* p = alloc.allocate(8 * kMiB);
  alloc.deallocate(p);
  void* q = alloc.allocate(2 * kMiB);
  EXPECT_EQ(q, p);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 8 * kMiB);
  EXPECT_EQ(s.requested, 2 * kMiB);
  EXPECT_EQ(s.largest_free_block, 0u);
  alloc.deallocate(q);
}

TEST(AllocatorTest, PointersAre64ByteAligned) {
  CachingAllocator alloc;
  std::vector<void*> ptrs;
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{65}, size_t{1000}, size_t{4097},
                   kMiB - 1, kMiB + 1, 3 * kMiB + 7}) {
    void* p = alloc.allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << "size " << n;
    ptrs.push_back(p);
  }
  for (void* p : ptrs) alloc.deallocate(p);
}

// Random allocs/frees against a shadow model of the live set.
void run_shadow_model(bool with_large, uint32_t seed) {
  CachingAllocator alloc(small_segments(256 * kKiB));
  std::mt19937 rng(seed);
  std::map<void*, size_t> live;
  size_t expected_alloc = 0, expected_req = 0, live_large = 0;
  uint64_t allocs = 0, frees = 0;
  for (int step = 0; step < 3000; ++step) {
    const bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      size_t n = 1 + rng() % (64 * kKiB);
      if (with_large && rng() % 10 == 0) n = kMiB + rng() % (6 * kMiB);
      void* p = alloc.allocate(n, "shadow");
      ASSERT_EQ(live.count(p), 0u);
      live[p] = n;
      expected_alloc += round512(n);
      expected_req += n;
      if (round512(n) >= kMiB) ++live_large;
      ++allocs;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const size_t n = it->second;
      alloc.deallocate(it->first);
      live.erase(it);
      expected_alloc -= round512(n);
      expected_req -= n;
      if (round512(n) >= kMiB) --live_large;
      ++frees;
    }
    const AllocatorStats s = alloc.stats();
    ASSERT_EQ(s.requested, expected_req);
    if (with_large) {
      // An unsplit large block carries a tail of less than 1 MiB.
      ASSERT_GE(s.allocated, expected_alloc);
      ASSERT_LT(s.allocated, expected_alloc + live_large * kMiB + 1);
    } else {
      ASSERT_EQ(s.allocated, expected_alloc);
    }
    ASSERT_EQ(s.num_allocs, allocs);
    ASSERT_EQ(s.num_frees, frees);
    ASSERT_GE(s.reserved, s.allocated);
    ASSERT_LE(s.largest_free_block, s.reserved - s.allocated);
    ASSERT_GE(s.peak_allocated, s.allocated);
    ASSERT_GE(s.peak_reserved, s.reserved);
    ASSERT_EQ(s.segments, s.segment_maps - s.segment_unmaps);
  }
  for (auto& [p, n] : live) alloc.deallocate(p);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.requested, 0u);
  EXPECT_GT(s.reserved, 0u);
  // release_cached drops only wholly free segments, so reserved reaching 0 shows that
  // every segment coalesced back into a single free block.
  alloc.release_cached();
  s = alloc.stats();
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(s.segment_maps, s.segment_unmaps);
  EXPECT_EQ(s.largest_free_block, 0u);
}

TEST(AllocatorTest, StatsMatchShadowModelSmall) { run_shadow_model(false, 1234); }
TEST(AllocatorTest, StatsMatchShadowModelMixed) { run_shadow_model(true, 99); }

TEST(AllocatorTest, PeakTrackingAndReset) {
  CachingAllocator alloc;
  void* a = alloc.allocate(2 * kMiB);
  void* b = alloc.allocate(4 * kMiB);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.peak_allocated, 6 * kMiB);
  EXPECT_EQ(s.peak_reserved, 6 * kMiB);
  alloc.deallocate(b);
  alloc.release_cached();
  s = alloc.stats();
  EXPECT_EQ(s.allocated, 2 * kMiB);
  EXPECT_EQ(s.reserved, 2 * kMiB);
  EXPECT_EQ(s.peak_allocated, 6 * kMiB);
  EXPECT_EQ(s.peak_reserved, 6 * kMiB);
  alloc.reset_peak();
  s = alloc.stats();
  EXPECT_EQ(s.peak_allocated, 2 * kMiB);
  EXPECT_EQ(s.peak_reserved, 2 * kMiB);
  alloc.deallocate(a);
}

TEST(AllocatorTest, OverBudgetThrowsWithDiagnosticMessage) {
  AllocatorOptions o;
  o.memory_limit = 8 * kMiB;
  CachingAllocator alloc(o);
  void* keep = alloc.allocate(2 * kMiB, "weights");
  try {
    alloc.allocate(16 * kMiB, "logits");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'logits'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested 16.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("limit 8.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("allocated 2.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fragmentation"), std::string::npos) << msg;
  }
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.ooms, 1u);
  EXPECT_EQ(s.num_allocs, 1u);
  EXPECT_EQ(s.allocated, 2 * kMiB);
  // Still usable after the failure.
  void* p = alloc.allocate(4 * kMiB, "fits");
  alloc.deallocate(p);
  alloc.deallocate(keep);
  EXPECT_THROW(alloc.allocate(size_t{1} << 62), OutOfMemoryError);
  EXPECT_EQ(alloc.stats().ooms, 2u);
}

TEST(AllocatorTest, ReleasesCacheAndRetriesBeforeFailing) {
  AllocatorOptions o;
  o.memory_limit = 8 * kMiB;
  CachingAllocator alloc(o);
  void* a = alloc.allocate(4 * kMiB);
  void* b = alloc.allocate(4 * kMiB);
  alloc.deallocate(a);
  alloc.deallocate(b);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved, 8 * kMiB);
  EXPECT_EQ(s.cache_flush_retries, 0u);
  // No cached block fits 6 MiB and mapping one would exceed the budget: the cache goes first.
  void* c = alloc.allocate(6 * kMiB, "activations");
  s = alloc.stats();
  EXPECT_EQ(s.cache_flush_retries, 1u);
  EXPECT_EQ(s.segment_unmaps, 2u);
  EXPECT_EQ(s.reserved, 6 * kMiB);
  EXPECT_EQ(s.ooms, 0u);
  alloc.deallocate(c);
}

TEST(AllocatorTest, LoweringTheLimitReleasesCache) {
  CachingAllocator alloc;
  void* a = alloc.allocate(4 * kMiB);
  void* b = alloc.allocate(4 * kMiB);
  alloc.deallocate(b);
  alloc.set_memory_limit(6 * kMiB);
  EXPECT_EQ(alloc.options().memory_limit, 6 * kMiB);
  EXPECT_EQ(alloc.stats().reserved, 4 * kMiB);
  EXPECT_THROW(alloc.allocate(4 * kMiB), OutOfMemoryError);
  alloc.set_memory_limit(0);
  void* c = alloc.allocate(4 * kMiB);
  alloc.deallocate(c);
  alloc.deallocate(a);
}

TEST(AllocatorTest, NoCachingUnmapsOnFree) {
  AllocatorOptions o;
  o.caching = false;
  CachingAllocator alloc(o);
  void* big = alloc.allocate(4 * kMiB);
  alloc.deallocate(big);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.segment_unmaps, 1u);
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.segments, 0u);

  // A small segment goes back only once its last block is freed.
  void* x = alloc.allocate(1000);
  void* y = alloc.allocate(2000);
  alloc.deallocate(x);
  EXPECT_EQ(alloc.stats().segment_unmaps, 1u);
  alloc.deallocate(y);
  s = alloc.stats();
  EXPECT_EQ(s.segment_unmaps, 2u);
  EXPECT_EQ(s.reserved, 0u);

  // Every reallocation is a slow path.
  for (int i = 0; i < 3; ++i) alloc.deallocate(alloc.allocate(4 * kMiB));
  s = alloc.stats();
  EXPECT_EQ(s.slow_path_allocs, 2u + 3u);
  EXPECT_EQ(s.segment_maps, s.segment_unmaps);
}

TEST(AllocatorTest, FragmentationOfAlternatingHoles) {
  // 16 blocks of 4 KiB fill one 64 KiB segment; free every other one.
  CachingAllocator alloc(small_segments(64 * kKiB));
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(alloc.allocate(4096));
  ASSERT_EQ(alloc.stats().segments, 1u);
  for (int i = 0; i < 16; i += 2) alloc.deallocate(blocks[i]);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved - s.allocated, 32 * kKiB);
  EXPECT_EQ(s.largest_free_block, 4 * kKiB);
  EXPECT_NEAR(s.fragmentation(), 0.875, 1e-12);

  // 32 KiB is free but no 8 KiB block exists, and the budget forbids a new segment.
  alloc.set_memory_limit(64 * kKiB);
  try {
    alloc.allocate(8192, "grads");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("free in cache 32.0 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("largest free block 4.0 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fragmentation 88%"), std::string::npos) << msg;
  }
  EXPECT_EQ(alloc.stats().cache_flush_retries, 0u);  // nothing wholly free to release
  for (int i = 1; i < 16; i += 2) alloc.deallocate(blocks[i]);
  EXPECT_DOUBLE_EQ(alloc.stats().fragmentation(), 0.0);
}

TEST(AllocatorTest, FragmentationIsZeroWhenNothingFree) {
  AllocatorStats s;
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  s.reserved = 10;
  s.allocated = 10;
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  s.allocated = 6;
  s.largest_free_block = 1;
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.75);
}

uint8_t pattern(uint32_t id, size_t i) { return static_cast<uint8_t>(id * 131u + i * 7u); }

TEST(AllocatorTest, LiveBlocksKeepTheirContentsUnderChurn) {
  CachingAllocator alloc(small_segments(128 * kKiB));
  std::mt19937 rng(7);
  struct Live {
    uint8_t* p;
    size_t n;
    uint32_t id;
  };
  std::vector<Live> live;
  uint32_t next_id = 0;
  auto add = [&] {
    size_t n = 1 + rng() % (32 * kKiB);
    if (rng() % 20 == 0) n = kMiB + rng() % (2 * kMiB);
    auto* p = static_cast<uint8_t*>(alloc.allocate(n));
    const uint32_t id = next_id++;
    for (size_t i = 0; i < n; ++i) p[i] = pattern(id, i);
    live.push_back({p, n, id});
  };
  for (int i = 0; i < 100; ++i) add();
  for (int round = 0; round < 20; ++round) {
    for (int k = 0; k < 30 && !live.empty(); ++k) {
      const size_t j = rng() % live.size();
      alloc.deallocate(live[j].p);
      live[j] = live.back();
      live.pop_back();
    }
    for (int k = 0; k < 30; ++k) add();
    for (const Live& l : live) {
      for (size_t i = 0; i < l.n; ++i) {
        ASSERT_EQ(l.p[i], pattern(l.id, i)) << "block " << l.id << " byte " << i;
      }
    }
  }
  for (const Live& l : live) alloc.deallocate(l.p);
  EXPECT_EQ(alloc.stats().allocated, 0u);
}

TEST(AllocatorTest, BadDeallocationsThrowInsteadOfCrashing) {
  CachingAllocator alloc;
  alloc.deallocate(nullptr);  // no-op
  EXPECT_EQ(alloc.stats().num_frees, 0u);
  int on_stack = 0;
  EXPECT_THROW(alloc.deallocate(&on_stack), Error);
  char* p = static_cast<char*>(alloc.allocate(1024));
  EXPECT_THROW(alloc.deallocate(p + 64), Error);  // interior pointer
  alloc.deallocate(p);
  EXPECT_THROW(alloc.deallocate(p), Error);  // double free
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.allocated, 0u);
}

TEST(AllocatorTest, RejectsBadOptions) {
  AllocatorOptions o;
  o.round_to = 100;
  EXPECT_THROW(CachingAllocator{o}, ConfigError);
  o.round_to = 32;
  EXPECT_THROW(CachingAllocator{o}, ConfigError);
  o = {};
  o.min_segment = 0;
  EXPECT_THROW(CachingAllocator{o}, ConfigError);
}

TEST(AllocatorTest, TwoThreadsKeepStatsConsistent) {
  CachingAllocator alloc(small_segments(512 * kKiB));
  constexpr int kOps = 4000;
  auto worker = [&alloc](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::pair<uint8_t*, size_t>> mine;
    for (int i = 0; i < kOps; ++i) {
      if (mine.empty() || rng() % 2 == 0) {
        size_t n = 1 + rng() % (16 * kKiB);
        if (rng() % 50 == 0) n = kMiB + rng() % kMiB;
        auto* p = static_cast<uint8_t*>(alloc.allocate(n, "thread"));
        std::memset(p, static_cast<int>(seed), n);
        mine.emplace_back(p, n);
      } else {
        const size_t j = rng() % mine.size();
        auto [p, n] = mine[j];
        if (p[0] != static_cast<uint8_t>(seed) || p[n - 1] != static_cast<uint8_t>(seed)) {
          ADD_FAILURE() << "corrupted block";
        }
        alloc.deallocate(p);
        mine[j] = mine.back();
        mine.pop_back();
      }
    }
    for (auto& [p, n] : mine) alloc.deallocate(p);
  };
  std::thread t1(worker, 11u), t2(worker, 22u);
  t1.join();
  t2.join();
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.requested, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_GT(s.num_allocs, 0u);
  EXPECT_EQ(s.segments, s.segment_maps - s.segment_unmaps);
  EXPECT_EQ(s.largest_free_block > 0, s.reserved > 0);
}

TEST(AllocatorTest, BufferIsRaii) {
  CachingAllocator alloc;
  {
    Buffer<float> x(alloc, 1000, "x");
    EXPECT_EQ(x.size(), 1000u);
    x[999] = 1.5f;
    Buffer<float> y = std::move(x);
    EXPECT_EQ(x.data(), nullptr);
    EXPECT_EQ(y[999], 1.5f);
    EXPECT_EQ(alloc.stats().requested, 4000u);
    Buffer<float> empty(alloc, 0);
    EXPECT_EQ(empty.data(), nullptr);
  }
  EXPECT_EQ(alloc.stats().allocated, 0u);
  EXPECT_EQ(alloc.stats().num_frees, 1u);
}

TEST(AllocatorTest, DefaultAllocatorIsASingleton) {
  EXPECT_EQ(&default_allocator(), &default_allocator());
  void* p = default_allocator().allocate(100);
  default_allocator().deallocate(p);
}

TEST(ParseBytesTest, AcceptsPlainAndSuffixedSizes) {
  EXPECT_EQ(parse_bytes("1048576"), 1048576u);
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("512K"), 512 * kKiB);
  EXPECT_EQ(parse_bytes("512M"), 512 * kMiB);
  EXPECT_EQ(parse_bytes("512m"), 512 * kMiB);
  EXPECT_EQ(parse_bytes("2G"), 2048 * kMiB);
  EXPECT_EQ(parse_bytes("1.5G"), 1536 * kMiB);
  EXPECT_EQ(parse_bytes("64MiB"), 64 * kMiB);
  EXPECT_EQ(parse_bytes("64mib"), 64 * kMiB);
  EXPECT_EQ(parse_bytes("1GB"), 1024 * kMiB);
  EXPECT_EQ(parse_bytes("100B"), 100u);
  EXPECT_EQ(parse_bytes("2T"), size_t{2} << 40);
  EXPECT_EQ(parse_bytes(" 64 MiB "), 64 * kMiB);
  EXPECT_EQ(parse_bytes(".5K"), 512u);
}

TEST(ParseBytesTest, RejectsJunkWithTheTextInTheMessage) {
  for (const char* bad : {"", " ", "-1", "-1G", "abc", "12Q", "1.5", "1.", ".", "1e9", "G",
                          "1GG", "1 G B", "0x10", "99999999999999999999999", "20000000000T"}) {
    try {
      parse_bytes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(FormatBytesTest, PicksAUnitAndPrecision) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(12 * kKiB), "12.0 KiB");
  EXPECT_EQ(format_bytes(512 * kMiB), "512.0 MiB");
  EXPECT_EQ(format_bytes(411 * kMiB), "411.0 MiB");
  EXPECT_EQ(format_bytes(1024 * kMiB), "1.00 GiB");
  EXPECT_EQ(format_bytes(1536 * kMiB), "1.50 GiB");
  EXPECT_EQ(format_bytes(parse_bytes("1.5G")), "1.50 GiB");
}

}  // namespace
}  // namespace ft
