// recorder_test.cpp: per-thread recording, ring bound and dropped count, step window, nesting,
// and the host tracer (FT_RANGE spans, allocator events, step counters).
#include "ft/profiler/recorder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/profiler/host_tracer.h"

namespace ft::profiler {
namespace {

std::vector<const Event*> named(const Trace& t, const std::string& name) {
  std::vector<const Event*> out;
  for (const Event& e : t.events) {
    if (t.names.at(e.name) == name) out.push_back(&e);
  }
  return out;
}

TEST(Recorder, ClockIsMonotonicNanoseconds) {
  const int64_t a = now_ns();
  const int64_t b = now_ns();
  EXPECT_GE(b, a);
  EXPECT_GT(a, 0);
}

TEST(Recorder, NestedSpansOnOneThread) {
  Recorder r;
  r.start();
  r.set_step(3);
  r.begin("outer", Category::kCompute, 7);
  r.begin("inner", Category::kOptimizer);
  r.instant("mark", Category::kAlloc, -1, 4096, kRetry);
  EXPECT_TRUE(r.end("inner"));
  r.counter("loss", 2.5);
  EXPECT_TRUE(r.end("outer"));
  EXPECT_FALSE(r.end("never-begun"));
  const Trace t = r.collect();
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.dropped_events, 0u);
  const Event& outer = *named(t, "outer").at(0);
  const Event& inner = *named(t, "inner").at(0);
  const Event& mark = *named(t, "mark").at(0);
  const Event& loss = *named(t, "loss").at(0);
  EXPECT_EQ(outer.category, Category::kCompute);
  EXPECT_EQ(outer.arg, 7);
  EXPECT_EQ(outer.step, 3);
  EXPECT_EQ(inner.category, Category::kOptimizer);
  EXPECT_LE(outer.ts_ns, inner.ts_ns);
  EXPECT_GE(outer.end_ns(), inner.end_ns());
  EXPECT_LE(inner.ts_ns, mark.ts_ns);
  EXPECT_GE(inner.end_ns(), mark.ts_ns);
  EXPECT_EQ(mark.phase, Phase::kInstant);
  EXPECT_EQ(mark.bytes, 4096u);
  EXPECT_EQ(mark.flags, kRetry);
  EXPECT_EQ(loss.phase, Phase::kCounter);
  EXPECT_DOUBLE_EQ(loss.value, 2.5);
  EXPECT_EQ(outer.track, inner.track);
  EXPECT_EQ(t.tracks.at(outer.track), "main");
  EXPECT_FALSE(outer.track.device);
}

TEST(Recorder, EndMatchesByTextAndDiscardsUnclosedChildren) {
  Recorder r;
  r.start();
  const std::string dynamic = "a";  // same text, different pointer
  r.begin("a", Category::kCompute);
  r.begin("child-never-closed", Category::kCompute);
  EXPECT_TRUE(r.end(dynamic.c_str()));
  const Trace t = r.collect();
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.names.at(t.events[0].name), "a");
}

TEST(Recorder, ManyThreadsRecordIntoTheirOwnTracks) {
  Recorder r;
  r.start();
  constexpr int kThreads = 4, kSpans = 2000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&r, i] {
      r.set_thread_name("worker " + std::to_string(i));
      for (int k = 0; k < kSpans; ++k) {
        r.begin("work", Category::kData, i);
        r.end("work");
      }
    });
  }
  for (auto& th : threads) th.join();
  const Trace t = r.collect();
  EXPECT_EQ(t.dropped_events, 0u);
  std::map<Track, std::vector<const Event*>> by_track;
  for (const Event& e : t.events) by_track[e.track].push_back(&e);
  ASSERT_EQ(by_track.size(), static_cast<size_t>(kThreads));
  std::set<std::string> names;
  for (const auto& [track, events] : by_track) {
    ASSERT_EQ(events.size(), static_cast<size_t>(kSpans));
    const int64_t arg = events[0]->arg;
    for (size_t k = 0; k < events.size(); ++k) {
      EXPECT_EQ(events[k]->arg, arg);  // one thread's events never land on another's track
      if (k) {
        EXPECT_GE(events[k]->ts_ns, events[k - 1]->end_ns());  // oldest first, no overlap
      }
    }
    names.insert(t.tracks.at(track));
  }
  EXPECT_EQ(names, (std::set<std::string>{"worker 0", "worker 1", "worker 2", "worker 3"}));
}

TEST(Recorder, RingKeepsTheNewestAndCountsTheDropped) {
  RecorderOptions o;
  o.events_per_thread = 16;
  Recorder r(o);
  r.start();
  for (int i = 0; i < 100; ++i) r.instant("tick", Category::kOther, i);
  const Trace t = r.collect();
  ASSERT_EQ(t.events.size(), 16u);
  EXPECT_EQ(t.dropped_events, 84u);
  for (size_t k = 0; k < t.events.size(); ++k)
    EXPECT_EQ(t.events[k].arg, 84 + static_cast<int64_t>(k));
}

TEST(Recorder, DepthBeyondTheLimitIsCountedNotRecorded) {
  RecorderOptions o;
  o.max_depth = 2;
  Recorder r(o);
  r.start();
  r.begin("d0", Category::kCompute);
  r.begin("d1", Category::kCompute);
  r.begin("d2", Category::kCompute);  // dropped
  r.end("d2");
  r.end("d1");
  r.end("d0");
  const Trace t = r.collect();
  EXPECT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.dropped_events, 1u);
}

TEST(Recorder, StepWindowKeepsOnlyItsSteps) {
  RecorderOptions o;
  o.window = parse_step_window("2-3");
  Recorder r(o);
  r.start();
  for (int s = 0; s < 6; ++s) {
    r.set_step(s);
    r.begin("step", Category::kStep, s);
    r.counter("loss", s);
    if (s == 3) r.set_step(4);  // the window closes while step 3's span is open: still kept
    r.end("step");
  }
  const Trace t = r.collect();
  std::vector<int64_t> spans, counters;
  for (const Event& e : t.events)
    (e.phase == Phase::kSpan ? spans : counters)
        .push_back(e.arg >= 0 ? e.arg : static_cast<int64_t>(e.value));
  EXPECT_EQ(spans, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(counters, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.metadata.at("profile_steps"), "2-3");
}

TEST(Recorder, StepWindowParsing) {
  EXPECT_EQ(parse_step_window("10-20").first, 10);
  EXPECT_EQ(parse_step_window("10-20").last, 20);
  EXPECT_EQ(parse_step_window("5").last, 5);
  for (const char* bad : {"", "-", "a-b", "3-1", "-2", "1-", "1-2-3", "1 - 2"}) {
    EXPECT_THROW(parse_step_window(bad), ConfigError) << bad;
  }
}

TEST(Recorder, NothingIsRecordedBeforeStartOrAfterStop) {
  Recorder r;
  r.instant("before", Category::kOther);
  r.start();
  r.instant("during", Category::kOther);
  r.stop();
  r.instant("after", Category::kOther);
  const Trace t = r.collect();
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.names.at(t.events[0].name), "during");
}

TEST(Recorder, CollectWhileThreadsRecordNeverTearsEvents) {
  Recorder r;
  r.start();
  std::atomic<bool> go{true};
  std::atomic<int> warm{0};
  std::vector<std::thread> threads;
  static const char* kNames[] = {"t0", "t1", "t2"};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; go.load(); ++n) {
        r.instant(kNames[i], Category::kOther, i, static_cast<uint64_t>(i) * 10);
        if (n == 1000) warm.fetch_add(1);
      }
    });
  }
  while (warm.load() < 3) std::this_thread::yield();  // every thread is mid-stream
  const Trace t = r.collect();  // stops recording while the threads keep calling
  go = false;
  for (auto& th : threads) th.join();
  ASSERT_FALSE(t.events.empty());
  for (const Event& e : t.events) {
    const std::string& n = t.names.at(e.name);
    ASSERT_EQ(n, kNames[e.arg]);
    ASSERT_EQ(e.bytes, static_cast<uint64_t>(e.arg) * 10);
  }
  EXPECT_FALSE(r.started());
}

class HostTracerTest : public ::testing::Test {
 protected:
  void TearDown() override { set_range_sink(nullptr); }
};

TEST_F(HostTracerTest, RangesBecomeCategorisedSpansAndStepsGetCounters) {
  Recorder r;
  HostTracer tracer(r);
  ASSERT_TRUE(tracer.install());
  HostTracer second(r);
  EXPECT_FALSE(second.install());  // one sink at a time
  r.start();
  ft::StepMetrics m;
  m.step = 0;
  m.loss = 3.25;
  m.lr = 1e-3f;
  m.grad_norm = 0.5;
  m.mem_allocated = 1000;
  m.mem_reserved = 2000;
  tracer.on_step_begin(0);
  {
    FT_RANGE("step", RangeKind::kStep, 0);
    { FT_RANGE("data.next", RangeKind::kData, 0); }
    {
      FT_RANGE("fwd.block", RangeKind::kCompute, 1);
      mark("alloc.oom", RangeKind::kAlloc, 12345);
    }
    { FT_RANGE("optimizer", RangeKind::kOptimizer); }
    tracer.on_step_end(m);
  }
  tracer.flush();  // getrusage counters are sampled between steps (Session::stop calls this)
  tracer.uninstall();
  EXPECT_EQ(range_sink(), nullptr);
  const Trace t = r.collect();
  ASSERT_EQ(named(t, "ProfilerStep#0").size(), 1u);
  const Event& step = *named(t, "ProfilerStep#0")[0];
  EXPECT_EQ(step.category, Category::kStep);
  EXPECT_EQ(step.arg, 0);
  EXPECT_EQ(named(t, "data.next").at(0)->category, Category::kData);
  EXPECT_EQ(named(t, "fwd.block").at(0)->arg, 1);
  EXPECT_EQ(named(t, "optimizer").at(0)->category, Category::kOptimizer);
  const Event& oom = *named(t, "alloc.oom").at(0);
  EXPECT_EQ(oom.phase, Phase::kInstant);
  EXPECT_EQ(oom.flags, kOom);
  EXPECT_EQ(oom.bytes, 12345u);
  for (const Event& e : t.events) {
    EXPECT_GE(e.ts_ns, step.ts_ns);
    // getrusage counters (page faults, kernel time) are sampled after the step span closes.
    const bool rusage = e.phase == Phase::kCounter && e.ts_ns >= step.end_ns();
    if (!rusage) {
      EXPECT_LE(e.ts_ns + e.dur_ns, step.end_ns()) << t.names.at(e.name);
    }
    EXPECT_EQ(e.step, 0);
  }
  EXPECT_DOUBLE_EQ(named(t, "loss").at(0)->value, 3.25);
  EXPECT_DOUBLE_EQ(named(t, "grad_norm").at(0)->value, 0.5);
  EXPECT_DOUBLE_EQ(named(t, "mem.reserved").at(0)->value, 2000);
  EXPECT_EQ(named(t, "page_faults.minor").size(), 1u);
  EXPECT_EQ(named(t, "page_faults.major").size(), 1u);
  // Sampled after the step span closed (getrusage can stall a loaded process for milliseconds).
  const Event& faults = *named(t, "page_faults.minor").at(0);
  EXPECT_EQ(faults.step, 0);
  EXPECT_GE(faults.ts_ns, named(t, "ProfilerStep#0").at(0)->end_ns());
}

TEST_F(HostTracerTest, AllocatorEventsCarryBytesAndFlags) {
  Recorder r;
  HostTracer tracer(r);
  ASSERT_TRUE(tracer.install());
  r.start();
  AllocatorOptions ao;
  ao.memory_limit = 8u << 20;
  CachingAllocator alloc(ao);
  void* a = alloc.allocate(6u << 20, "a");
  alloc.deallocate(a);
  void* b = alloc.allocate(5u << 20, "b");                        // reuses the cached 6 MiB segment
  EXPECT_THROW(alloc.allocate(4u << 20, "c"), OutOfMemoryError);  // no cached segment to free
  alloc.deallocate(b);
  void* d = alloc.allocate(7u << 20, "d");  // new segment over budget: flush the cache, retry
  alloc.deallocate(d);
  tracer.uninstall();
  const Trace t = r.collect();
  const auto slow = named(t, "alloc.slow_path");
  ASSERT_EQ(slow.size(), 3u);  // a, c (failed), d
  EXPECT_EQ(slow[0]->bytes, 6u << 20);
  EXPECT_EQ(slow[0]->flags, kSlowPath);
  EXPECT_EQ(slow[0]->category, Category::kAlloc);
  const auto retries = named(t, "alloc.retry");
  ASSERT_EQ(retries.size(), 1u);  // c found nothing to flush; d flushed the cache and retried
  EXPECT_EQ(retries[0]->phase, Phase::kInstant);
  EXPECT_EQ(retries[0]->flags, kRetry);
  EXPECT_EQ(retries[0]->bytes, 7u << 20);
  const auto ooms = named(t, "alloc.oom");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0]->bytes, 4u << 20);
  EXPECT_EQ(ooms[0]->flags, kOom);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.cache_flush_retries, 1u);
  EXPECT_EQ(s.ooms, 1u);
}

}  // namespace
}  // namespace ft::profiler
