// cupti_records_test.cpp: synthetic CUPTI activity records (real CUpti_Activity* structs, as
// libkineto's tests build them) through ft's parser; no GPU needed. Without FT_WITH_CUPTI the
// source must say "not supported".
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#if FT_WITH_CUPTI
#include <cupti.h>
#endif

#include "ft/profiler/activity_source.h"
#include "ft/profiler/cupti_source.h"
#include "ft/profiler/session.h"

namespace ft::profiler {
namespace {

const Event* find(const Trace& t, const std::string& name, Phase phase = Phase::kSpan) {
  for (const Event& e : t.events) {
    if (t.names.at(e.name) == name && e.phase == phase) return &e;
  }
  return nullptr;
}

TEST(CuptiSource, WithoutADeviceTheSourceSaysWhyAndTheProfileIsHostOnly) {
  auto src = make_cupti_source();
  std::string why;
  const bool started = src->start(&why);
  if (started) {
    src->stop();
    GTEST_SKIP() << "a CUDA device is present: the source records for real";
  }
#if FT_WITH_CUPTI
  EXPECT_EQ(why.rfind("not available: ", 0), 0u) << why;
#else
  EXPECT_EQ(why.rfind("not supported: ", 0), 0u) << why;
#endif
  // A session degrades to host-only and says so in the trace.
  SessionOptions o;
  o.quiet = true;
  Session s(o);
  s.start();
  s.recorder().instant("host", Category::kOther);
  const Trace t = s.collect();
  EXPECT_EQ(t.metadata.at("device_activity"), s.device_status());
  EXPECT_EQ(s.device_status(), why);
  ASSERT_EQ(t.events.size(), 1u);
  set_range_sink(nullptr);
}

TEST(CuptiParser, BuildersPairFlowsAndSkipFtMarkers) {
  CuptiActivityParser p;
  p.add_api_call("cudaLaunchKernel", false, 100, 101, 1000, 1500, 9);
  p.add_api_call("cuLaunchKernel", true, 100, 101, 1100, 1400, 9);
  p.add_api_call("cudaMalloc", false, 100, 101, 2000, 2500, 10);  // no device work: no flow
  p.add_device_op("k", Category::kCompute, 0, 7, 3000, 4000, 9, 0, 0);
  p.add_marker(1, 5, 10, 100, 101, "fwd.block", "ft");
  p.add_marker(2, 5, 20, 100, 101, nullptr, nullptr);
  p.add_marker(1, 6, 30, 100, 101, "nccl:AllReduce", "NCCL");
  p.add_marker(2, 6, 90, 100, 101, nullptr, nullptr);
  p.add_marker(2, 99, 95, 100, 101, nullptr, nullptr);  // end without start: ignored
  p.map_thread(101, 4242);
  Trace t;
  p.drain(&t);
  const Event* fs = find(t, "ac2g", Phase::kFlowStart);
  const Event* fe = find(t, "ac2g", Phase::kFlowEnd);
  ASSERT_TRUE(fs && fe);
  EXPECT_EQ(fs->id, 9u);
  EXPECT_EQ(fe->id, 9u);
  EXPECT_EQ(fs->ts_ns, 1000);  // from the runtime call, not the nested driver call
  EXPECT_EQ(fs->track, (Track{100, 4242, false}));
  EXPECT_EQ(fe->ts_ns, 3000);
  EXPECT_EQ(fe->track, (Track{0, 7, true}));
  int flows = 0;
  for (const Event& e : t.events)
    flows += e.phase == Phase::kFlowStart || e.phase == Phase::kFlowEnd;
  EXPECT_EQ(flows, 2);
  EXPECT_EQ(find(t, "fwd.block"), nullptr);  // ft's own NVTX ranges come from the host tracer
  const Event* nccl = find(t, "nccl:AllReduce");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->dur_ns, 60);
  EXPECT_EQ(nccl->track.tid, CuptiActivityParser::kNvtxTid | 4242u);
  EXPECT_EQ(t.tracks.at(Track{0, 7, true}), "stream 7");
  EXPECT_EQ(t.processes.at(0), "GPU 0");
}

#if FT_WITH_CUPTI

TEST(CuptiRecords, KernelMemcpyMemsetSyncAndRuntimeRecords) {
  CuptiActivityParser p([](bool driver, uint32_t cbid) {
    return std::string(driver ? "drv" : "rt") + std::to_string(cbid);
  });

  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = 211;
  api.start = 1'000;
  api.end = 1'800;
  api.processId = 55;
  api.threadId = 66;
  api.correlationId = 42;
  EXPECT_TRUE(p.parse(&api));

  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 2'000;
  k.end = 7'000;
  k.deviceId = 1;
  k.streamId = 13;
  k.correlationId = 42;
  k.name = "ampere_sgemm_128x64_nn";
  EXPECT_TRUE(p.parse(&k));

  CUpti_ActivityMemcpy6 h2d{};
  h2d.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  h2d.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  h2d.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  h2d.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  h2d.flags = 0;  // not async: synchronous copy
  h2d.bytes = 1 << 20;
  h2d.start = 8'000;
  h2d.end = 9'000;
  h2d.deviceId = 1;
  h2d.streamId = 13;
  h2d.correlationId = 43;
  EXPECT_TRUE(p.parse(&h2d));

  CUpti_ActivityMemcpy6 d2h = h2d;
  d2h.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  d2h.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  d2h.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  d2h.flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
  d2h.bytes = 4096;
  d2h.start = 9'500;
  d2h.end = 9'700;
  d2h.correlationId = 44;
  EXPECT_TRUE(p.parse(&d2h));

  CUpti_ActivityMemset4 ms{};
  ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  ms.bytes = 256;
  ms.start = 10'000;
  ms.end = 10'100;
  ms.deviceId = 1;
  ms.streamId = 14;
  ms.flags = CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC;
  ms.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  EXPECT_TRUE(p.parse(&ms));

  CUpti_ActivitySynchronization2 sync{};
  sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.start = 2'100;
  sync.end = 9'800;
  sync.streamId = 13;
  EXPECT_TRUE(p.parse(&sync));

  CUpti_ActivityMarker2 m_start{};
  m_start.kind = CUPTI_ACTIVITY_KIND_MARKER;
  m_start.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  m_start.timestamp = 500;
  m_start.id = 3;
  m_start.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m_start.objectId.pt.processId = 55;
  m_start.objectId.pt.threadId = 66;
  m_start.name = "user range";
  m_start.domain = "app";
  CUpti_ActivityMarker2 m_end = m_start;
  m_end.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
  m_end.timestamp = 12'000;
  m_end.name = nullptr;
  EXPECT_TRUE(p.parse(&m_start));
  EXPECT_TRUE(p.parse(&m_end));

  CUpti_ActivityAPI unknown{};
  unknown.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;  // a kind ft does not model
  EXPECT_FALSE(p.parse(&unknown));
  p.add_dropped(17);
  EXPECT_EQ(p.parsed(), 8u);
  EXPECT_EQ(p.skipped(), 1u);

  Trace t;
  p.drain(&t);
  EXPECT_EQ(t.dropped_events, 17u);
  EXPECT_EQ(t.metadata.at("cupti.dropped_records"), "17");

  const Event* rt = find(t, "rt211");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->category, Category::kHost);
  EXPECT_EQ(rt->track, (Track{55, 66, false}));
  EXPECT_EQ(rt->dur_ns, 800);
  EXPECT_EQ(rt->id, 42u);

  const Event* kern = find(t, "ampere_sgemm_128x64_nn");
  ASSERT_NE(kern, nullptr);
  EXPECT_EQ(kern->category, Category::kCompute);
  EXPECT_EQ(kern->track, (Track{1, 13, true}));
  EXPECT_EQ(kern->ts_ns, 2000);
  EXPECT_EQ(kern->dur_ns, 5000);

  const Event* up = find(t, "Memcpy HtoD (Pageable -> Device)");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->category, Category::kH2D);
  EXPECT_EQ(up->bytes, 1u << 20);
  EXPECT_EQ(up->flags, kPageable | kSynchronous);

  const Event* down = find(t, "Memcpy DtoH (Device -> Pinned)");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->category, Category::kD2H);
  EXPECT_EQ(down->flags, kPinned);

  const Event* set = find(t, "Memset (Device)");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->category, Category::kMemset);
  EXPECT_EQ(set->bytes, 256u);
  EXPECT_EQ(set->flags, 0);

  const Event* s = find(t, "cudaStreamSynchronize");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->category, Category::kSync);
  EXPECT_TRUE(s->track.device);
  EXPECT_EQ(s->track.tid, CuptiActivityParser::kSyncTid | 13u);  // not on the kernels' track

  const Event* user = find(t, "user range");
  ASSERT_NE(user, nullptr);
  EXPECT_EQ(user->dur_ns, 11'500);

  // Only correlation 42 has both a runtime call and device work: exactly one flow.
  int starts = 0, ends = 0;
  for (const Event& e : t.events) {
    if (e.phase == Phase::kFlowStart || e.phase == Phase::kFlowEnd) {
      EXPECT_EQ(e.id, 42u);
      (e.phase == Phase::kFlowStart ? starts : ends) += 1;
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(ends, 1);

  // The parser is empty after a drain.
  Trace again;
  p.drain(&again);
  EXPECT_TRUE(again.events.empty());
}

TEST(CuptiRecords, NullAndKernelWithoutName) {
  CuptiActivityParser p;
  EXPECT_FALSE(p.parse(nullptr));
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
  k.start = 10;
  k.end = 5;  // clock skew: clamped to zero length
  EXPECT_TRUE(p.parse(&k));
  Trace t;
  p.drain(&t);
  const Event* e = find(t, "kernel");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dur_ns, 0);
}

#else

TEST(CuptiRecords, ParserRefusesRecordsWithoutCupti) {
  CuptiActivityParser p;
  int dummy = 0;
  EXPECT_FALSE(p.parse(&dummy));
  EXPECT_EQ(p.skipped(), 1u);
}

#endif

}  // namespace
}  // namespace ft::profiler
