// classifier_test.cpp: exact per-step partition on synthetic traces (nesting, page faults, device
// streams).
#include "ft/profiler/classifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>

#include "../profiler/classify/interval_sweep.h"
#include "ft/core/error.h"

namespace {

using namespace ft::profiler;

// AddressSanitizer maps one shadow byte per 8 bytes of application memory, and the shadow of a
// fresh mapping faults on first touch too: 1 MiB of 4 KiB pages adds 32 shadow-page faults.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kShadowFaultsPerMiB = 32;
#else
constexpr int kShadowFaultsPerMiB = 0;
#endif

constexpr Track kMain{1, 1, false};
constexpr Track kWorker{1, 2, false};

struct Builder {
  Trace t;
  Event& span(const Track& tr, const char* name, Category c, int64_t ts, int64_t dur,
              int64_t step = -1) {
    Event e;
    e.track = tr;
    e.name = t.names.intern(name);
    e.category = c;
    e.phase = Phase::kSpan;
    e.ts_ns = ts;
    e.dur_ns = dur;
    e.step = step;
    t.events.push_back(e);
    return t.events.back();
  }
  void counter(const char* name, int64_t step, double v, int64_t ts = 0) {
    Event e;
    e.track = kMain;
    e.name = t.names.intern(name);
    e.category = Category::kCounter;
    e.phase = Phase::kCounter;
    e.step = step;
    e.value = v;
    e.ts_ns = ts;
    t.events.push_back(e);
  }
};

int64_t sum(const StepPartitionNs& p) {
  return std::accumulate(p.ns.begin(), p.ns.end(), int64_t{0});
}
int64_t at(const StepPartitionNs& p, WaitClass c) { return p.ns[static_cast<int>(c)]; }

TEST(Classifier, NestedSpansInnermostWinsAndPartsSumExactly) {
  Builder b;
  // step 0: [1000, 101000): data [1000, 11000), fwd [11000, 81000) containing an alloc
  // [20000, 23000) and a sync [50000, 50500); optimizer [81000, 96000); 5000 ns uncovered.
  b.span(kMain, "step", Category::kStep, 1000, 100000, 0);
  b.span(kMain, "data.next", Category::kData, 1000, 10000, 0);
  b.span(kMain, "fwd.block", Category::kCompute, 11000, 70000, 0);
  b.span(kMain, "alloc.segment_map", Category::kAlloc, 20000, 3000, 0);
  b.span(kMain, "stream.sync", Category::kSync, 50000, 500, 0);
  b.span(kMain, "optimizer", Category::kOptimizer, 81000, 15000, 0);
  // Spans on another thread do not count toward the training thread.
  b.span(kWorker, "loader.preprocess", Category::kData, 1000, 100000);
  const auto parts = partition_steps(b.t);
  ASSERT_EQ(parts.size(), 1u);
  const auto& p = parts[0];
  EXPECT_EQ(p.wall_ns, 100000);
  EXPECT_EQ(sum(p), p.wall_ns);
  EXPECT_EQ(at(p, WaitClass::kData), 10000);
  EXPECT_EQ(at(p, WaitClass::kMemory), 3000);
  EXPECT_EQ(at(p, WaitClass::kSync), 500);
  EXPECT_EQ(at(p, WaitClass::kCompute), 70000 - 3000 - 500 + 15000);
  EXPECT_EQ(at(p, WaitClass::kOther), 5000);
  EXPECT_EQ(p.detail_ns.at("data.wait"), 10000);
  EXPECT_EQ(p.detail_ns.at("memory.allocator"), 3000);
  EXPECT_EQ(p.detail_ns.at("compute.optimizer"), 15000);
}

TEST(Classifier, SpansCrossingStepBoundariesAreClipped) {
  Builder b;
  b.span(kMain, "step", Category::kStep, 0, 1000, 0);
  b.span(kMain, "step", Category::kStep, 1000, 1000, 1);
  b.span(kMain, "comm.wait", Category::kComm, 600, 800);  // 400 in step 0, 400 in step 1
  b.span(kMain, "h2d", Category::kH2D, 1500, 100).flags = kPageable;
  const auto parts = partition_steps(b.t);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(at(parts[0], WaitClass::kComm), 400);
  EXPECT_EQ(at(parts[1], WaitClass::kComm), 400);
  EXPECT_EQ(parts[0].detail_ns.at("comm.wait"), 400);
  EXPECT_EQ(at(parts[1], WaitClass::kPcie), 100);
  EXPECT_EQ(parts[1].detail_ns.at("pcie.pageable"), 100);
  EXPECT_EQ(parts[1].start_ns, 1000);
  for (const auto& p : parts) EXPECT_EQ(sum(p), p.wall_ns);
}

TEST(Classifier, OverlappingSiblingsLaterStartWins) {
  Builder b;
  b.span(kMain, "step", Category::kStep, 0, 1000, 0);
  b.span(kMain, "a", Category::kCompute, 0, 600);
  b.span(kMain, "b", Category::kHost, 400, 400);  // overlaps a's tail: [400,600) goes to b
  const auto p = partition_steps(b.t).at(0);
  EXPECT_EQ(at(p, WaitClass::kCompute), 400);
  EXPECT_EQ(at(p, WaitClass::kHost), 400);
  EXPECT_EQ(at(p, WaitClass::kOther), 200);
  EXPECT_EQ(sum(p), 1000);
}

TEST(Classifier, PageFaultsMoveComputeThenOtherToMemoryCapped) {
  Builder b;
  b.span(kMain, "step", Category::kStep, 0, 100000, 0);
  b.span(kMain, "fwd", Category::kCompute, 0, 60000);
  b.span(kMain, "data", Category::kData, 60000, 30000);  // 10000 other at the end
  b.span(kMain, "step", Category::kStep, 100000, 100000, 1);
  b.span(kMain, "fwd", Category::kCompute, 100000, 100000);
  b.counter(kCounterMinorFaults, 0, 10);  // 10 x 13 us = 130 us > 70 us: capped
  b.counter(kCounterMinorFaults, 1, 2);   // 2 x 13 us = 26 us from compute
  const auto parts = partition_steps(b.t);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].page_faults, 10);
  EXPECT_EQ(at(parts[0], WaitClass::kMemory), 70000);
  EXPECT_EQ(at(parts[0], WaitClass::kCompute), 0);
  EXPECT_EQ(at(parts[0], WaitClass::kOther), 0);
  EXPECT_EQ(at(parts[0], WaitClass::kData), 30000) << "faults never take time from waits";
  EXPECT_EQ(parts[0].detail_ns.at("memory.page_faults_capped"), 60000);
  EXPECT_EQ(at(parts[1], WaitClass::kMemory), 26000);
  EXPECT_EQ(at(parts[1], WaitClass::kCompute), 74000);
  for (const auto& p : parts) EXPECT_EQ(sum(p), p.wall_ns);
  // Recorded kernel CPU time is evidence only; it does not bound the fault time.
  b.counter(kCounterSystemNs, 1, 20000);
  EXPECT_EQ(at(partition_steps(b.t)[1], WaitClass::kMemory), 26000);
  EXPECT_EQ(partition_steps(b.t)[1].detail_ns.at("cpu.system"), 20000);
  b.t.events.pop_back();
  // A measured cost in the metadata replaces the default; options override both.
  b.t.metadata[kMetaPageFaultNs] = "1000";
  EXPECT_EQ(at(partition_steps(b.t)[1], WaitClass::kMemory), 2000);
  ClassifyOptions o;
  o.page_fault_ns = 500;
  EXPECT_EQ(at(partition_steps(b.t, o)[1], WaitClass::kMemory), 1000);
}

TEST(Classifier, HugePageFaultsAreChargedOnlyUpToWhatTheStepsSlowPathsMapped) {
  // Two 100 us steps with 3 faults each. Step 0's allocator slow path requested 3 MiB (2 huge
  // pages at most), step 1 mapped nothing: its faults are 4 KiB faults whatever the huge cost.
  Builder b;
  for (int s = 0; s < 2; ++s) {
    b.span(kMain, "step", Category::kStep, s * 100000, 100000, s);
    b.span(kMain, "fwd", Category::kCompute, s * 100000, 100000);
    b.counter(kCounterMinorFaults, s, 3);
  }
  b.span(kMain, "alloc.slow_path", Category::kAlloc, 1000, 1000);
  b.t.events.back().flags = kSlowPath;
  b.t.events.back().bytes = 3u << 20;
  b.t.metadata[kMetaPageFaultNs] = "1000";
  b.t.metadata[kMetaHugePageFaultNs] = "20000";
  auto parts = partition_steps(b.t);
  EXPECT_EQ(parts[0].detail_ns.at("memory.page_faults"), 2 * 20000 + 1000);
  EXPECT_EQ(parts[1].detail_ns.at("memory.page_faults"), 3 * 1000);
  // A run with --allocator-huge-pages false advised nothing: its faults are all 4 KiB faults.
  b.t.metadata["config.allocator_huge_pages"] = "false";
  EXPECT_EQ(partition_steps(b.t)[0].detail_ns.at("memory.page_faults"), 3 * 1000);
  b.t.metadata["config.allocator_huge_pages"] = "true";
  EXPECT_EQ(partition_steps(b.t)[0].detail_ns.at("memory.page_faults"), 2 * 20000 + 1000);
  // "0": no huge pages were granted, every fault is a 4 KiB fault.
  b.t.metadata[kMetaHugePageFaultNs] = "0";
  EXPECT_EQ(partition_steps(b.t)[0].detail_ns.at("memory.page_faults"), 3 * 1000);
  // A trace from before the split (no huge key): page_fault_ns for every fault, as it was.
  b.t.metadata.erase(kMetaHugePageFaultNs);
  EXPECT_EQ(partition_steps(b.t)[0].detail_ns.at("memory.page_faults"), 3 * 1000);
  b.t.metadata[kMetaPageFaultNs] = "20000";
  EXPECT_EQ(partition_steps(b.t)[1].detail_ns.at("memory.page_faults"), 3 * 20000);
}

TEST(Classifier, DeviceIdleSplitByOtherStreamsAndHost) {
  Builder b;
  const Track s7{0, 7, true}, s8{0, 8, true};
  b.span(kMain, "step", Category::kStep, 0, 1000, 0);
  b.span(kMain, "data.next", Category::kData, 0, 200);
  b.span(kMain, "launch", Category::kHost, 200, 100);
  b.span(kMain, "cudaStreamSynchronize", Category::kSync, 700, 300);
  b.span(s7, "gemm", Category::kCompute, 300, 300);  // busy [300,600)
  b.span(s7, "gemm", Category::kCompute, 550, 150);  // overlaps: busy until 700
  b.span(s8, "memcpy", Category::kH2D, 100, 300);    // [100,300) idle → pcie; [300,400) busy
  b.span(s8, "nccl", Category::kComm, 800, 100);     // [800,900) idle → comm
  const auto p = partition_steps(b.t).at(0);
  EXPECT_EQ(p.detail_ns.at("device0.busy"), 400);
  EXPECT_EQ(p.detail_ns.at("device0.idle.data"), 100);  // [0,100)
  EXPECT_EQ(p.detail_ns.at("device0.idle.pcie"), 200);  // [100,300)
  EXPECT_EQ(p.detail_ns.at("device0.idle.comm"), 100);  // [800,900)
  EXPECT_EQ(p.detail_ns.at("device0.idle.sync"), 200);  // [700,800) + [900,1000)
  int64_t total = 0;
  for (const auto& [k, v] : p.detail_ns) {
    if (k.rfind("device0.", 0) == 0) total += v;
  }
  EXPECT_EQ(total, 1000) << "busy + idle classes cover the step exactly";
  EXPECT_EQ(sum(p), 1000);
}

TEST(Classifier, TrainingTrackIsTheOneWithSteps) {
  Builder b;
  b.span(kWorker, "data", Category::kData, 0, 5000);
  b.span(kMain, "step", Category::kStep, 0, 1000, 3);
  b.span(kMain, "step", Category::kStep, 1000, 1000, 4);
  Track t;
  ASSERT_TRUE(find_training_track(b.t, &t));
  EXPECT_EQ(t, kMain);
  const auto steps = classify_steps(b.t);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 3);
  EXPECT_DOUBLE_EQ(steps[1].wall_ms, 0.001);
  EXPECT_DOUBLE_EQ(steps[0].ms[static_cast<int>(WaitClass::kOther)], 0.001);
}

TEST(Classifier, KinetoProfilerStepSpansAreSteps) {
  Builder b;
  b.span(kMain, "ProfilerStep#12", Category::kOther, 0, 1000);
  b.span(kMain, "ProfilerStep#13", Category::kHost, 1000, 1000);
  b.span(kMain, "aten::mm", Category::kCompute, 100, 500);
  const auto parts = partition_steps(b.t);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].step, 12);
  EXPECT_EQ(parts[1].step, 13);
  EXPECT_EQ(at(parts[0], WaitClass::kCompute), 500);
  EXPECT_EQ(at(parts[1], WaitClass::kOther), 1000) << "the step marker itself is not host time";
}

TEST(Classifier, CountersAttachToSteps) {
  Builder b;
  b.span(kMain, "step", Category::kStep, 0, 2000000, 0);
  b.counter(kCounterLoss, 0, 5.5);
  b.counter(kCounterMemAllocated, 0, 1024);
  const auto s = classify_steps(b.t).at(0);
  EXPECT_DOUBLE_EQ(s.loss, 5.5);
  EXPECT_DOUBLE_EQ(s.mem_allocated, 1024);
  EXPECT_TRUE(std::isnan(s.lr));
  EXPECT_DOUBLE_EQ(s.wall_ms, 2.0);
}

TEST(Classifier, NoStepsIsAClearError) {
  Builder b;
  b.span(kMain, "fwd", Category::kCompute, 0, 10);
  EXPECT_THROW(partition_steps(b.t), ft::FormatError);
}

TEST(Classifier, PageFaultProbeMeasuresFaults) {
  const PageFaultCosts c = measure_page_fault_costs(size_t{1} << 20, size_t{8} << 20, 2);
  // 1 MiB advised MADV_NOHUGEPAGE: a fault per 4 KiB page (256 per repeat).
  EXPECT_GE(c.small_faults, 2 * 256) << "fresh mappings fault on first touch, once per page";
  EXPECT_LE(c.small_faults, 2 * (256 + kShadowFaultsPerMiB))
      << "one fault per page (plus ASan's shadow pages under ASan), no more";
  EXPECT_GT(c.small_ns, 50.0);  // a fault is never cheaper than a few hundred cycles
  EXPECT_LT(c.small_ns, 1e9);   // nor slower than a second
  if (c.huge_ns > 0) {  // THP granted: at most 4 faults per 8 MiB, each zeroing 2 MiB
    EXPECT_LE(c.huge_faults, 2 * 4 * 2);
    EXPECT_GT(c.huge_ns, c.small_ns);
  }
}

}  // namespace

namespace {

// One step [0, 1000) on the training thread with a device kernel stream: the read-back scenarios
// of issue 19, partitioned on the device's timeline.
Builder readback_step(int64_t kernel_end, int64_t call_end) {
  Builder b;
  const Track s7{0, 7, true};
  b.span(kMain, "step", Category::kStep, 0, 1000, 0);
  b.span(kMain, "cudaLaunchKernel", Category::kHost, 0, 10);
  b.span(s7, "gemm", Category::kCompute, 20, kernel_end - 20);
  b.span(kMain, "aten::item", Category::kCompute, 50, call_end + 5 - 50);
  Event& rb = b.span(kMain, "cudaMemcpyAsync", Category::kD2H, 60, call_end - 60);
  rb.flags = kPageable;
  rb.bytes = 4;
  b.span(kMain, "cudaLaunchKernel", Category::kHost, 900, 10);
  b.span(s7, "gemm", Category::kCompute, 915, 85);
  return b;
}

}  // namespace

// A 4-byte read-back that blocks the host 835 ns while the device stays busy costs the device
// only the drain: from the kernel's end (890) to the next kernel (915), not the call's length.
TEST(Classifier, DeviceBusyReadBackCostsOnlyTheDrain) {
  const auto p = partition_steps(readback_step(890, 895).t).at(0);
  EXPECT_EQ(sum(p), 1000);
  EXPECT_EQ(at(p, WaitClass::kCompute), 870 + 85);
  EXPECT_EQ(at(p, WaitClass::kPcie), 0) << "a read-back is no transfer problem";
  EXPECT_EQ(at(p, WaitClass::kSync), 25);  // [890, 915): the drain, then the refill launch
  EXPECT_EQ(at(p, WaitClass::kHost), 20);  // [0, 20): the first launch
  EXPECT_EQ(p.detail_ns.at("sync.by.aten::item > cudaMemcpyAsync"), 25);
  EXPECT_EQ(p.detail_ns.at("host.pcie"), 835) << "the host's own view keeps the call";
}

// The device finishes at 100 and the read-back returns at 120; the host then runs 780 ns of
// untraced code before the next launch. The read-back is charged its wait plus a refill of at
// most its own length (60 ns): the rest of the idle stretch is the host's.
TEST(Classifier, StarvingReadBackIsMostlyTheHost) {
  const auto p = partition_steps(readback_step(100, 120).t).at(0);
  EXPECT_EQ(sum(p), 1000);
  EXPECT_EQ(at(p, WaitClass::kCompute), 80 + 85);
  EXPECT_EQ(at(p, WaitClass::kSync), 20 + 60);  // [100, 120) blocked, then 60 ns of refill
  EXPECT_EQ(p.detail_ns.at("sync.refill"), 60);
  EXPECT_EQ(at(p, WaitClass::kHost), 20 + (915 - 180));
}

// Idle charged to the host is kept by the innermost CPU operator running then
// ("host_op.<operator>", the step's top three): a long operator during which the device stays
// busy holds none of it, a short one during which it idles holds its idle.
TEST(Classifier, HostIdleIsKeptByTheOperatorTheDeviceWaitedOn) {
  Builder b;
  const Track s7{0, 7, true};
  b.span(kMain, "step", Category::kStep, 0, 1000, 0);
  b.span(kMain, "aten::long_while_busy", Category::kCompute, 0, 600);
  b.span(s7, "gemm", Category::kCompute, 0, 650);
  b.span(kMain, "aten::short_while_idle", Category::kCompute, 600, 300);
  b.span(kMain, "cudaLaunchKernel", Category::kHost, 890, 10);
  b.span(s7, "gemm", Category::kCompute, 905, 95);
  const auto p = partition_steps(b.t).at(0);
  EXPECT_EQ(at(p, WaitClass::kHost), 255);  // [650, 905): under the short operator, then launch
  // [650, 900): the launch call inside it is the operator's own
  EXPECT_EQ(p.detail_ns.at("host_op.aten::short_while_idle"), 250);
  EXPECT_EQ(p.detail_ns.count("host_op.aten::long_while_busy"), 0u);
}

// The device idles while the training thread waits for the loader: data, whatever the host's
// other spans; with the device busy meanwhile, the same wait costs nothing.
TEST(Classifier, DeviceIdleDuringTheLoaderIsData) {
  for (const bool busy : {false, true}) {
    Builder b;
    const Track s7{0, 7, true};
    b.span(kMain, "step", Category::kStep, 0, 1000, 0);
    b.span(kMain, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", Category::kData,
           0, 600);
    b.span(kMain, "cudaLaunchKernel", Category::kHost, 600, 10);
    if (busy) b.span(s7, "prev_step_kernel", Category::kCompute, 0, 600);
    b.span(s7, "gemm", Category::kCompute, 615, 385);
    const auto p = partition_steps(b.t).at(0);
    EXPECT_EQ(sum(p), 1000);
    EXPECT_EQ(at(p, WaitClass::kData), busy ? 0 : 600);
    EXPECT_EQ(at(p, WaitClass::kHost), 15);
    EXPECT_EQ(p.detail_ns.at("host.data"), 600);
  }
}

// Span intervals (the innermost span of a thread wins) sweep as their Interval form
// {a, b, label, -a, b - a, prio} does, whole and handed out one at a time, with spans cut by
// [lo, hi) keeping their unclamped keys; nested and overlapping spans with equal starts and
// lengths exercise every tie-break.
TEST(IntervalSweep, SpanIntervalsSweepAsTheirIntervalForm) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    const int64_t lo = 5000, hi = lo + 200000;
    std::vector<sweep::SpanInterval> spans;
    std::vector<sweep::Interval> ivs;
    for (int i = 0; i < 2000; ++i) {
      sweep::SpanInterval s;
      s.a = lo - 3000 + static_cast<int64_t>(rng() % 210000);
      s.b = s.a + 1 + static_cast<int64_t>(rng() % (round % 2 ? 40 : 20000));
      if (rng() % 5 == 0 && !spans.empty()) s.a = spans.back().a;  // equal starts
      if (s.b <= s.a) s.b = s.a + 1;
      s.label = i;
      s.prio = static_cast<int32_t>(rng() % 3);
      spans.push_back(s);
      ivs.push_back({s.a, s.b, s.label, -s.a, s.b - s.a, s.prio});
    }
    if (round % 4 == 0) {
      std::sort(spans.begin(), spans.end(), [](const auto& x, const auto& y) { return x.a < y.a; });
      ivs.clear();
      for (const auto& s : spans) ivs.push_back({s.a, s.b, s.label, -s.a, s.b - s.a, s.prio});
    }
    const auto want = sweep::sweep(ivs, lo, hi);
    const auto got = sweep::sweep_spans(spans, lo, hi);
    std::vector<sweep::Segment> each;
    sweep::sweep_spans_each(spans, lo, hi, [&](const sweep::Segment& s) { each.push_back(s); });
    ASSERT_EQ(got.size(), want.size()) << "round " << round;
    ASSERT_EQ(each.size(), want.size()) << "round " << round;
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(got[k].a, want[k].a);
      EXPECT_EQ(got[k].b, want[k].b);
      EXPECT_EQ(got[k].label, want[k].label) << "round " << round << " segment " << k;
      EXPECT_EQ(each[k].label, want[k].label);
      EXPECT_EQ(each[k].b, want[k].b);
    }
  }
}

// The labelled sweep under the partition: every elementary piece of [lo, hi) carries the label
// of the covering interval with the smallest key, checked against a brute-force scan. 3000
// intervals take the radix-sorted edge path (in any order, and by start, whose starts are not
// sorted again); a 2^40 ns span the pair-sorted one.
TEST(IntervalSweep, SegmentsMatchABruteForceScan) {
  for (const auto& [span, by_start] : std::vector<std::pair<int64_t, bool>>{
           {int64_t{1} << 20, false}, {int64_t{1} << 20, true}, {int64_t{1} << 40, false}}) {
    std::mt19937_64 rng(static_cast<uint64_t>(span));
    const int64_t lo = 1000, hi = lo + span;
    std::vector<sweep::Interval> ivs;
    for (int i = 0; i < 3000; ++i) {
      sweep::Interval iv;
      iv.a = lo - 500 + static_cast<int64_t>(rng() % static_cast<uint64_t>(span));
      iv.b = iv.a + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(span / 64));
      iv.label = i;
      iv.k1 = static_cast<int64_t>(rng() % 7);  // ties on k1 and k2 exercise the later keys
      iv.k2 = static_cast<int64_t>(rng() % 3);
      iv.k3 = static_cast<int64_t>(rng() % 1000);
      ivs.push_back(iv);
    }
    if (by_start) {
      std::sort(ivs.begin(), ivs.end(),
                [](const sweep::Interval& x, const sweep::Interval& y) { return x.a < y.a; });
    }
    const auto segs = sweep::sweep(ivs, lo, hi);
    ASSERT_FALSE(segs.empty());
    EXPECT_EQ(segs.front().a, lo);
    EXPECT_EQ(segs.back().b, hi);
    std::vector<int64_t> cuts = {lo, hi};
    for (const auto& iv : ivs) {
      if (iv.a > lo && iv.a < hi) cuts.push_back(iv.a);
      if (iv.b > lo && iv.b < hi) cuts.push_back(iv.b);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    size_t s = 0;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int64_t t = cuts[c];
      int want = -1;
      for (size_t i = 0; i < ivs.size(); ++i) {
        const auto& iv = ivs[i];
        if (iv.a > t || iv.b <= t) continue;
        const auto& w = ivs[static_cast<size_t>(want < 0 ? 0 : want)];
        const int idx = static_cast<int>(i);
        if (want < 0 || std::tie(iv.k1, iv.k2, iv.k3, idx) < std::tie(w.k1, w.k2, w.k3, want)) {
          want = idx;
        }
      }
      while (s < segs.size() && segs[s].b <= t) ++s;
      ASSERT_LT(s, segs.size());
      ASSERT_LE(segs[s].a, t);
      ASSERT_EQ(segs[s].label, want < 0 ? -1 : ivs[static_cast<size_t>(want)].label) << "at " << t;
    }
    for (size_t k = 1; k < segs.size(); ++k) {
      EXPECT_EQ(segs[k].a, segs[k - 1].b);
      EXPECT_NE(segs[k].label, segs[k - 1].label);  // neighbours with one label are merged
    }
  }
}
