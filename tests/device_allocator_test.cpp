// device_allocator_test.cpp: the device caching allocator's policy (rounding, reuse, stream
// ordering, OOM retry, stats) on a fake device.
#include "../trainer/cuda/device_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ft/core/error.h"

namespace ft::trainer::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr StreamId kS1 = 0x1000, kS2 = 0x2000, kS3 = 0x3000;

// Hands out address ranges (never dereferenced) up to a capacity; events complete when the
// test says so (or on synchronize). Logs what the allocator asked of the device.
struct FakeLog {
  size_t capacity = 64 * kMiB;
  size_t in_use = 0;
  uintptr_t next_addr = 0x10000000;
  std::map<uintptr_t, size_t> ranges;
  int mallocs = 0, releases = 0, syncs = 0, failed_mallocs = 0;
  EventId next_event = 1;
  std::map<EventId, StreamId> events;  // live events and the stream they were recorded on
  std::set<EventId> done;
  std::vector<std::pair<StreamId, StreamId>> waits;  // (waiting stream, event's stream)
  int destroyed = 0;
};

class FakeDeviceMemory final : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(FakeLog* log) : log_(log) {}
  void* allocate(size_t bytes) override {
    if (log_->in_use + bytes > log_->capacity) {
      ++log_->failed_mallocs;
      return nullptr;
    }
    const uintptr_t a = log_->next_addr;
    log_->next_addr += bytes + 4096;  // gaps: segments are never adjacent
    log_->ranges[a] = bytes;
    log_->in_use += bytes;
    ++log_->mallocs;
    return reinterpret_cast<void*>(a);
  }
  void release(void* ptr, size_t bytes) override {
    auto it = log_->ranges.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, log_->ranges.end()) << "release of a range never handed out";
    ASSERT_EQ(it->second, bytes);
    log_->in_use -= bytes;
    log_->ranges.erase(it);
    ++log_->releases;
  }
  void synchronize() override {
    ++log_->syncs;
    for (auto& [e, s] : log_->events) log_->done.insert(e);
  }
  EventId record_event(StreamId stream) override {
    const EventId e = log_->next_event++;
    log_->events[e] = stream;
    return e;
  }
  bool event_done(EventId event) override { return log_->done.count(event) > 0; }
  void stream_wait(StreamId stream, EventId event) override {
    log_->waits.emplace_back(stream, log_->events.at(event));
  }
  void destroy_event(EventId event) override {
    log_->events.erase(event);
    ++log_->destroyed;
  }
  std::string describe() override { return "fake device"; }

 private:
  FakeLog* log_;
};

DeviceCachingAllocator make(FakeLog& log, DeviceAllocatorOptions o = {}) {
  return DeviceCachingAllocator(std::make_unique<FakeDeviceMemory>(&log), o);
}

TEST(DeviceAllocatorTest, RoundsLikeTheCpuAllocatorAndSplitsSegments) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(1000, kS1, "p");
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocated, 1024u);
  EXPECT_EQ(s.requested, 1000u);
  EXPECT_EQ(s.reserved, 2 * kMiB);  // small requests map a min_segment
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.largest_free_block, 2 * kMiB - 1024);  // the split-off tail
  void* big = a.allocate(3 * kMiB, kS1, "big");
  s = a.stats();
  EXPECT_EQ(s.reserved, 2 * kMiB + 4 * kMiB);  // large: rounded to 2 MiB multiples
  EXPECT_EQ(s.allocated, 1024u + 3 * kMiB);    // the 1 MiB tail was split off
  EXPECT_EQ(s.slow_path_allocs, 2u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % 512, 0u);
  a.deallocate(p);
  a.deallocate(big);
  s = a.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.num_frees, 2u);
  EXPECT_EQ(s.largest_free_block, 4 * kMiB);  // coalesced back into whole segments
  EXPECT_DOUBLE_EQ(s.fragmentation(), 1.0 - 4.0 / 6.0);
}

TEST(DeviceAllocatorTest, SameStreamReuseIsImmediateWithoutEvents) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(8 * kMiB, kS1);
  a.deallocate(p);
  void* q = a.allocate(8 * kMiB, kS1);
  EXPECT_EQ(q, p);
  EXPECT_EQ(log.mallocs, 1);
  EXPECT_TRUE(log.waits.empty());
  EXPECT_EQ(log.next_event, 1u);  // no event was ever recorded
  EXPECT_EQ(a.cross_stream_reuses(), 0u);
  a.deallocate(q);
}

TEST(DeviceAllocatorTest, OtherStreamReusesAfterAnEventWait) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(8 * kMiB, kS1);
  a.deallocate(p);
  void* q = a.allocate(8 * kMiB, kS2);
  EXPECT_EQ(q, p);
  EXPECT_EQ(log.mallocs, 1);
  ASSERT_EQ(log.waits.size(), 1u);
  EXPECT_EQ(log.waits[0].first, kS2);   // the new stream waits...
  EXPECT_EQ(log.waits[0].second, kS1);  // ...for the work queued on the old one
  EXPECT_EQ(log.destroyed, 1);
  EXPECT_EQ(a.cross_stream_reuses(), 1u);
  // The block now belongs to kS2: reusing it there needs no further wait.
  a.deallocate(q);
  void* r = a.allocate(8 * kMiB, kS2);
  EXPECT_EQ(r, p);
  EXPECT_EQ(log.waits.size(), 1u);
  a.deallocate(r);
}

TEST(DeviceAllocatorTest, OwnStreamBlockIsPreferredOverAnotherStreams) {
  FakeLog log;
  auto a = make(log);
  void* p1 = a.allocate(4 * kMiB, kS1);
  void* p2 = a.allocate(4 * kMiB, kS2);
  a.deallocate(p1);
  a.deallocate(p2);
  void* q = a.allocate(4 * kMiB, kS2);
  EXPECT_EQ(q, p2);
  EXPECT_TRUE(log.waits.empty());
  a.deallocate(q);
}

TEST(DeviceAllocatorTest, StolenBlockRemainderStaysWithItsStream) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(8 * kMiB, kS1);
  a.deallocate(p);
  void* q = a.allocate(2 * kMiB, kS2);  // steals the 8 MiB block and splits it
  EXPECT_EQ(q, p);
  ASSERT_EQ(log.waits.size(), 1u);
  // The 6 MiB remainder is still kS1's: kS1 takes it with no wait.
  void* r = a.allocate(6 * kMiB, kS1);
  EXPECT_EQ(reinterpret_cast<char*>(r), reinterpret_cast<char*>(p) + 2 * kMiB);
  EXPECT_EQ(log.waits.size(), 1u);
  EXPECT_EQ(log.mallocs, 1);
  a.deallocate(q);
  a.deallocate(r);
  // Blocks of different streams are not coalesced while the device runs...
  EXPECT_EQ(a.stats().largest_free_block, 6 * kMiB);
  // ...but a flush (which synchronizes) returns the whole segment.
  a.release_cached();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(log.releases, 1);
}

TEST(DeviceAllocatorTest, RecordStreamDefersReuseUntilTheEventCompletes) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(4 * kMiB, kS1);
  a.record_stream(p, kS2);
  a.record_stream(p, kS2);  // idempotent
  a.record_stream(p, kS1);  // its own stream: nothing to do
  a.deallocate(p);
  ASSERT_EQ(log.events.size(), 1u);  // one event, on kS2
  const EventId e = log.events.begin()->first;
  EXPECT_EQ(log.events.begin()->second, kS2);
  EXPECT_EQ(a.stats().allocated, 0u);
  void* q = a.allocate(4 * kMiB, kS1);  // kS2 may still use p: a new segment
  EXPECT_NE(q, p);
  EXPECT_EQ(log.mallocs, 2);
  a.deallocate(q);
  log.done.insert(e);                   // kS2's work finished
  void* r = a.allocate(4 * kMiB, kS3);  // polled: p (kS1's) is free again, reused via a wait
  EXPECT_TRUE(r == p || r == q);
  EXPECT_EQ(log.mallocs, 2);
  EXPECT_EQ(log.events.size(), 0u);  // every event destroyed
  a.deallocate(r);
}

TEST(DeviceAllocatorTest, FlushesTheCacheAndRetriesBeforeOom) {
  FakeLog log;
  log.capacity = 16 * kMiB;
  auto a = make(log);
  void* p = a.allocate(10 * kMiB, kS1);
  a.deallocate(p);                       // cached: 10 MiB reserved, none allocated
  void* q = a.allocate(12 * kMiB, kS1);  // needs a new segment: only fits after the flush
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.cache_flush_retries, 1u);
  EXPECT_EQ(s.ooms, 0u);
  EXPECT_EQ(s.reserved, 12 * kMiB);
  EXPECT_EQ(s.segment_unmaps, 1u);
  EXPECT_EQ(log.failed_mallocs, 1);
  EXPECT_GE(log.syncs, 1);  // the flush synchronized before releasing
  a.deallocate(q);
}

TEST(DeviceAllocatorTest, FlushFinishesPendingBlocksAndReusesThem) {
  FakeLog log;
  log.capacity = 4 * kMiB;
  auto a = make(log);
  void* p = a.allocate(3 * kMiB, kS1);  // one 4 MiB segment: p (3 MiB) + a 1 MiB tail
  void* k = a.allocate(kMiB, kS1);      // takes the tail: the segment never becomes free
  a.record_stream(p, kS2);
  a.deallocate(p);                      // pending on kS2's event
  void* q = a.allocate(3 * kMiB, kS1);  // no room for a new segment: the flush finishes p
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().cache_flush_retries, 1u);
  EXPECT_EQ(log.mallocs, 1);
  a.deallocate(q);
  a.deallocate(k);
}

TEST(DeviceAllocatorTest, OomReportNamesRequestReservedAllocatedAndLargestFreeBlock) {
  FakeLog log;
  log.capacity = 8 * kMiB;
  auto a = make(log);
  void* p = a.allocate(3 * kMiB, kS1, "keep");
  void* r = a.allocate(3 * kMiB, kS1, "gap");
  a.deallocate(r);  // a 4 MiB segment sits free in the cache
  try {
    a.allocate(7 * kMiB, kS1, "act.logits");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'act.logits' requested 7.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved 4.0 MiB"), std::string::npos) << m;  // after the flush
    EXPECT_NE(m.find("allocated 3.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free block 1.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("fake device"), std::string::npos) << m;
  }
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.ooms, 1u);
  EXPECT_EQ(s.cache_flush_retries, 1u);
  a.deallocate(p);
}

TEST(DeviceAllocatorTest, MemoryLimitIsABudgetOnReservedBytes) {
  FakeLog log;
  DeviceAllocatorOptions o;
  o.memory_limit = 6 * kMiB;
  auto a = make(log, o);
  void* p = a.allocate(4 * kMiB, kS1);
  EXPECT_THROW(a.allocate(4 * kMiB, kS1, "over"), OutOfMemoryError);
  EXPECT_EQ(log.failed_mallocs, 0);  // refused by the budget, never asked the device
  void* q = a.allocate(2 * kMiB, kS1);
  EXPECT_EQ(a.stats().reserved, 6 * kMiB);
  a.deallocate(p);
  a.deallocate(q);
}

TEST(DeviceAllocatorTest, NoCachingReleasesFreeSegmentsAtOnce) {
  FakeLog log;
  DeviceAllocatorOptions o;
  o.caching = false;
  auto a = make(log, o);
  void* p = a.allocate(4 * kMiB, kS1);
  a.deallocate(p);
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(log.releases, 1);
  EXPECT_EQ(a.stats().segment_unmaps, 1u);
}

TEST(DeviceAllocatorTest, PeaksTrackHighWaterMarksAndReset) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(4 * kMiB, kS1);
  void* q = a.allocate(4 * kMiB, kS1);
  a.deallocate(q);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.peak_allocated, 8 * kMiB);
  EXPECT_EQ(s.allocated, 4 * kMiB);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_allocated, 4 * kMiB);
  a.deallocate(p);
}

TEST(DeviceAllocatorTest, BadPointersAndOptionsAreErrors) {
  FakeLog log;
  auto a = make(log);
  void* p = a.allocate(100, kS1);
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), Error);
  int x = 0;
  EXPECT_THROW(a.record_stream(&x, kS2), Error);
  DeviceAllocatorOptions o;
  o.round_to = 100;
  EXPECT_THROW(make(log, o), ConfigError);
}

TEST(DeviceAllocatorTest, RandomTrafficKeepsLiveBlocksDisjointAndStatsConsistent) {
  FakeLog log;
  log.capacity = 512 * kMiB;
  auto a = make(log);
  std::mt19937 rng(7);
  struct Live {
    char* p;
    size_t n;
  };
  std::vector<Live> live;
  const StreamId streams[] = {kS1, kS2, kS3};
  for (int i = 0; i < 3000; ++i) {
    if (live.empty() || rng() % 2 != 0) {
      const size_t n = rng() % 2 ? 1 + rng() % 100000 : 1 + rng() % (3 * kMiB);
      char* p = static_cast<char*>(a.allocate(n, streams[rng() % 3]));
      for (const Live& l : live) {
        ASSERT_TRUE(p + n <= l.p || l.p + l.n <= p) << "overlapping live blocks";
      }
      live.push_back({p, n});
    } else {
      const size_t k = rng() % live.size();
      if (rng() % 4 == 0) a.record_stream(live[k].p, streams[rng() % 3]);
      a.deallocate(live[k].p);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    if (i % 500 == 0) {
      for (auto& [e, s] : log.events) log.done.insert(e);
    }
  }
  size_t requested = 0;
  for (const Live& l : live) requested += l.n;
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.requested, requested);
  EXPECT_LE(s.allocated, s.reserved);
  EXPECT_EQ(s.reserved, log.in_use);
  for (const Live& l : live) a.deallocate(l.p);
  a.release_cached();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(log.in_use, 0u);
}

}  // namespace
}  // namespace ft::trainer::gpu
