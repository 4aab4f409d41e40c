// cupti_live_test.cpp: live CUPTI records joined to ft's host ranges, on synthetic records (no
// GPU): API-call classes, memcpy calls linked to their copies, CUPTI threads mapped to ft's
// threads (by id and by time), API calls inside wait ranges, and the device-time findings of a
// pageable-copy run against a pinned one.
#include <gtest/gtest.h>

#include <string>

#include "ft/profiler/classifier.h"
#include "ft/profiler/cupti_source.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/live_device.h"

namespace ft::profiler {
namespace {

// CUPTI's thread id of the main thread: bit 29 set, as the low half of a pthread_t may have.
constexpr uint32_t kPid = 4000, kMain = 4001, kCuptiMain = 0xBEEF1234u;

struct Builder {
  Trace t;
  uint64_t corr = 1;
  Event& span(const std::string& name, Category c, uint32_t tid, int64_t a, int64_t b,
              bool device = false, uint32_t pid = kPid) {
    Event e;
    e.ts_ns = a;
    e.dur_ns = b - a;
    e.track = Track{pid, tid, device};
    e.name = t.names.intern(name);
    e.category = c;
    t.events.push_back(e);
    return t.events.back();
  }
  // A CUPTI API call (host span with a correlation id), classified as the parser does.
  Event& api(const std::string& name, uint32_t tid, int64_t a, int64_t b, uint64_t id = 0) {
    Event& e = span(name, Category::kHost, tid, a, b);
    e.category = CuptiActivityParser::api_category(name, &e.flags);
    e.id = id ? id : corr++;
    return e;
  }
};

const Event* named(const Trace& t, const std::string& name, int64_t ts = -1) {
  for (const Event& e : t.events) {
    if (t.names.at(e.name) == name && (ts < 0 || e.ts_ns == ts)) return &e;
  }
  return nullptr;
}

TEST(CuptiLive, ApiCallAndKernelClasses) {
  auto cat = [](const char* n, uint8_t* f = nullptr) {
    uint8_t flags = 0;
    const Category c = CuptiActivityParser::api_category(n, &flags);
    if (f) *f = flags;
    return c;
  };
  uint8_t f = 0;
  EXPECT_EQ(cat("cudaStreamSynchronize", &f), Category::kSync);
  EXPECT_EQ(f, kSynchronous);
  EXPECT_EQ(cat("cuEventSynchronize"), Category::kSync);
  EXPECT_EQ(cat("cudaDeviceSynchronize"), Category::kSync);
  EXPECT_EQ(cat("cudaMalloc"), Category::kAlloc);
  EXPECT_EQ(cat("cudaFreeHost"), Category::kAlloc);
  EXPECT_EQ(cat("cudaHostAlloc"), Category::kAlloc);
  EXPECT_EQ(cat("cuMemAlloc_v2"), Category::kAlloc);
  EXPECT_EQ(cat("cudaMallocAsync"), Category::kAlloc);
  EXPECT_EQ(cat("cudaLaunchKernel"), Category::kHost);
  EXPECT_EQ(cat("cudaStreamQuery"), Category::kHost);
  EXPECT_EQ(cat("cudaMemcpy", &f), Category::kHost);
  EXPECT_EQ(f, kSynchronous);
  EXPECT_EQ(cat("cudaMemcpyAsync", &f), Category::kHost);
  EXPECT_EQ(f, 0);
  EXPECT_EQ(CuptiActivityParser::kernel_category("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            Category::kComm);
  EXPECT_EQ(CuptiActivityParser::kernel_category("sm90_xmma_gemm_bf16bf16_bf16f32"),
            Category::kCompute);
}

TEST(CuptiLive, MemcpyCallsTakeTheirCopysClassBytesAndFlags) {
  CuptiActivityParser p;
  p.add_api_call("cudaMemcpyAsync", false, kPid, kCuptiMain, 100, 900, 5);
  p.add_api_call("cuMemcpyHtoDAsync_v2", true, kPid, kCuptiMain, 120, 880, 5);
  p.add_api_call("cudaStreamSynchronize", false, kPid, kCuptiMain, 900, 1000, 6);
  p.add_device_op("Memcpy HtoD (Pageable -> Device)", Category::kH2D, 0, 7, 150, 950, 5, 4096,
                  kPageable);
  p.add_api_call("cudaMemcpy", false, kPid, kCuptiMain, 2000, 2300, 7);
  p.add_device_op("Memcpy DtoH (Device -> Pinned)", Category::kD2H, 0, 7, 2050, 2250, 7, 64,
                  kPinned | kSynchronous);
  Trace t;
  p.drain(&t);
  const Event* rt = named(t, "cudaMemcpyAsync");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->category, Category::kH2D);
  EXPECT_EQ(rt->bytes, 4096u);
  EXPECT_EQ(rt->flags, kPageable);  // async by name; pageable from the copy
  EXPECT_EQ(named(t, "cuMemcpyHtoDAsync_v2")->category, Category::kH2D);
  EXPECT_EQ(named(t, "cudaStreamSynchronize")->category, Category::kSync);
  const Event* down = named(t, "cudaMemcpy");
  EXPECT_EQ(down->category, Category::kD2H);
  EXPECT_EQ(down->flags, kPinned | kSynchronous);
}

TEST(CuptiLive, ParserMapsThreadIdsOfAll32Bits) {
  CuptiActivityParser p;
  p.add_api_call("cudaLaunchKernel", false, kPid, kCuptiMain, 10, 20, 3);
  p.add_marker(1, 7, 5, kPid, kCuptiMain, "user range", "app");
  p.add_marker(2, 7, 30, kPid, kCuptiMain, nullptr, nullptr);
  p.map_thread(kCuptiMain, kMain);
  Trace t;
  p.drain(&t);
  EXPECT_EQ(named(t, "cudaLaunchKernel")->track.tid, kMain);
  EXPECT_EQ(named(t, "user range")->track.tid, CuptiActivityParser::kNvtxTid | kMain);
}

TEST(CuptiLive, CuptiThreadsMapToFtThreadsById) {
  Builder b;
  b.span("fwd", Category::kCompute, kMain, 0, 1000);
  b.api("cudaLaunchKernel", kCuptiMain, 10, 20);
  Event marker;  // the parser keeps 29 bits of the id on a marker's track
  marker.track = Track{kPid, CuptiActivityParser::kNvtxTid | (kCuptiMain & 0x1FFFFFFFu), false};
  marker.name = b.t.names.intern("user nvtx");
  marker.ts_ns = 30;
  marker.dur_ns = 5;
  b.t.events.push_back(marker);
  b.t.tracks[marker.track] = "nvtx";
  const uint64_t pthread = (uint64_t{0x7f12} << 32) | kCuptiMain;    // low 32 bits: CUPTI's id
  EXPECT_EQ(map_api_threads(&b.t, {ThreadIds{kMain, pthread}}), 2);  // its API and marker tracks
  EXPECT_EQ(named(b.t, "cudaLaunchKernel")->track, (Track{kPid, kMain, false}));
  EXPECT_EQ(named(b.t, "user nvtx")->track,
            (Track{kPid, CuptiActivityParser::kNvtxTid | kMain, false}));
  EXPECT_TRUE(b.t.tracks.count(Track{kPid, CuptiActivityParser::kNvtxTid | kMain, false}));
  EXPECT_EQ(named(b.t, "fwd")->track.tid, kMain);  // ft's own events stay put
}

TEST(CuptiLive, UnknownCuptiThreadsMapByEnclosingRanges) {
  constexpr uint32_t kWorker = 4002, kOther = 0x5555u, kAmbiguous = 0x6666u, kFew = 0x7777u;
  Builder b;
  b.span("ProfilerStep#0", Category::kStep, kMain, 0, 10000);  // the step span is no evidence
  b.span("fwd", Category::kCompute, kMain, 0, 4000);
  b.span("loader.preprocess", Category::kData, kWorker, 5000, 9000);
  for (int i = 0; i < 5; ++i) b.api("cudaMemcpyAsync", kOther, 5100 + 100 * i, 5150 + 100 * i);
  b.api("cudaLaunchKernel", kAmbiguous, 100, 110);  // inside fwd only...
  b.api("cudaLaunchKernel", kAmbiguous, 200, 210);
  b.api("cudaLaunchKernel", kAmbiguous, 5200, 5210);  // ...and inside the worker's range
  b.api("cudaLaunchKernel", kAmbiguous, 5300, 5310);
  b.api("cudaMalloc", kFew, 100, 150);  // two calls: too few to judge
  b.api("cudaMalloc", kFew, 200, 250);
  const int mapped = map_api_threads(&b.t, {ThreadIds{kMain, 0x1111}, ThreadIds{kWorker, 0x2222}});
  EXPECT_EQ(mapped, 1);
  for (const Event& e : b.t.events) {
    if (b.t.names.at(e.name) == "cudaMemcpyAsync") {
      EXPECT_EQ(e.track.tid, kWorker);
    }
    if (b.t.names.at(e.name) == "cudaLaunchKernel") {
      EXPECT_EQ(e.track.tid, kAmbiguous);
    }
    if (b.t.names.at(e.name) == "cudaMalloc") {
      EXPECT_EQ(e.track.tid, kFew);
    }
  }
}

TEST(CuptiLive, ApiCallsInsideWaitRangesTakeTheWaitsClass) {
  Builder b;
  b.span("ProfilerStep#0", Category::kStep, kMain, 0, 1000);
  b.span("comm.all_reduce", Category::kComm, kMain, 100, 300);
  b.api("cudaEventRecord", kMain, 105, 110);
  b.api("cudaStreamQuery", kMain, 120, 130);
  b.api("cudaStreamSynchronize", kMain, 140, 290);
  b.span("h2d.upload", Category::kH2D, kMain, 400, 600);
  b.span("h2d.wait_compute", Category::kSync, kMain, 400, 450);
  b.api("cudaStreamSynchronize", kMain, 405, 445);
  Event& copy = b.api("cudaMemcpyAsync", kMain, 460, 560);
  copy.category = Category::kH2D;  // linked to its device copy
  copy.flags = kPageable;
  b.api("cudaStreamSynchronize", kMain, 560, 590);
  b.span("fwd", Category::kCompute, kMain, 600, 900);
  b.api("cudaLaunchKernel", kMain, 610, 615);
  b.span("loader.wait", Category::kData, kMain, 900, 950);
  b.api("cudaStreamSynchronize", kMain, 960, 990);  // outside any range but the step
  EXPECT_EQ(attribute_api_calls(&b.t), 4);
  EXPECT_EQ(named(b.t, "cudaEventRecord")->category, Category::kComm);
  EXPECT_EQ(named(b.t, "cudaStreamQuery")->category, Category::kComm);
  EXPECT_EQ(named(b.t, "cudaStreamSynchronize", 140)->category, Category::kComm);
  EXPECT_EQ(named(b.t, "cudaStreamSynchronize", 405)->category, Category::kSync);
  EXPECT_EQ(named(b.t, "cudaMemcpyAsync")->category, Category::kH2D);
  EXPECT_EQ(named(b.t, "cudaMemcpyAsync")->flags, kPageable);
  EXPECT_EQ(named(b.t, "cudaStreamSynchronize", 560)->category, Category::kH2D);
  EXPECT_EQ(named(b.t, "cudaLaunchKernel")->category, Category::kHost);
  EXPECT_EQ(named(b.t, "cudaStreamSynchronize", 960)->category, Category::kSync);
}

// A live GPU run, per step of 10 ms: the input path, then kernels, then the host waits for the
// step's end. Pageable: the host drains the stream, copies 64 MB through the driver's staging
// buffer while the device idles, then launches. Pinned: the copy runs on its own stream under
// the kernels.
Trace gpu_run(bool pageable) {
  constexpr int64_t kMs = 1'000'000;
  constexpr uint32_t kStream = 7, kCopyStream = 8;
  Builder b;
  b.t.source = "ft";
  b.t.metadata["config.h2d"] = pageable ? "pageable" : "pinned";
  b.t.metadata["run.warmup_excluded"] = "0";
  b.t.metadata["config.micro_batch"] = "64";
  b.t.metadata["config.seq_len"] = "1024";
  for (int s = 0; s < 4; ++s) {
    const int64_t t0 = s * 10 * kMs;
    Event& st =
        b.span("ProfilerStep#" + std::to_string(s), Category::kStep, kMain, t0, t0 + 10 * kMs);
    st.step = s;
    int64_t launch_at;
    if (pageable) {
      b.span("h2d.upload", Category::kH2D, kMain, t0, t0 + 5 * kMs);
      b.span("h2d.wait_compute", Category::kSync, kMain, t0, t0 + kMs / 2);
      b.api("cudaStreamSynchronize", kMain, t0 + kMs / 100, t0 + kMs / 2 - kMs / 100);
      const uint64_t c = b.corr++;
      Event& call = b.api("cudaMemcpyAsync", kMain, t0 + kMs / 2, t0 + 49 * kMs / 10, c);
      call.category = Category::kH2D;
      call.flags |= kPageable;
      Event& dev = b.span("Memcpy HtoD (Pageable -> Device)", Category::kH2D, kStream,
                          t0 + 6 * kMs / 10, t0 + 49 * kMs / 10, true, 0);
      dev.flags = kPageable;
      dev.id = c;
      dev.bytes = 64u << 20;
      b.api("cudaStreamSynchronize", kMain, t0 + 49 * kMs / 10, t0 + 5 * kMs);
      launch_at = t0 + 5 * kMs;
    } else {
      b.span("h2d.upload", Category::kH2D, kMain, t0, t0 + kMs / 20);
      const uint64_t c = b.corr++;
      Event& call = b.api("cudaMemcpyAsync", kMain, t0 + kMs / 100, t0 + kMs / 25, c);
      call.category = Category::kH2D;
      call.flags |= kPinned;
      Event& dev = b.span("Memcpy HtoD (Pinned -> Device)", Category::kH2D, kCopyStream,
                          t0 + kMs / 10, t0 + 15 * kMs / 10, true, 0);
      dev.flags = kPinned;
      dev.id = c;
      dev.bytes = 64u << 20;
      launch_at = t0 + kMs / 20;
    }
    b.span("fwd.launch", Category::kCompute, kMain, launch_at, launch_at + kMs);
    b.api("cudaLaunchKernel", kMain, launch_at + kMs / 10, launch_at + kMs / 10 + 5000);
    b.span("sm90_gemm", Category::kCompute, kStream, launch_at + kMs / 10 - kMs / 20,
           t0 + 99 * kMs / 10, true, 0);
    b.api("cudaStreamSynchronize", kMain, launch_at + kMs, t0 + 10 * kMs);
  }
  attribute_api_calls(&b.t);  // as Session::collect does
  return b.t;
}

TEST(CuptiLive, PageableCopiesAreTheTopFindingAndPinnedOnesAreNot) {
  for (bool pageable : {true, false}) {
    SCOPED_TRACE(pageable ? "pageable" : "pinned");
    const Trace t = gpu_run(pageable);
    const std::vector<StepBreakdown> steps = classify_steps(t);
    ASSERT_EQ(steps.size(), 4u);
    // The device split sums to the step (exact), and a pageable copy leaves the device idle.
    double idle_pcie = 0, busy = 0;
    for (const auto& [k, v] : steps[1].detail) {
      if (k == "device0.idle.pcie") idle_pcie = v;
      if (k == "device0.busy") busy = v;
    }
    if (pageable) {
      // [0.5, 0.6) host in the copy + [0.6, 4.9) the copy + [4.9, 5.0) host syncing on the copy
      EXPECT_NEAR(idle_pcie, 4.5, 1e-6);
    } else {
      EXPECT_LT(idle_pcie, 0.2);
      EXPECT_GT(busy, 9.0);
    }
    const RunInfo run = RunInfo::from_metadata(t.metadata);
    const std::vector<Finding> f = find_issues(t, steps, run, LossHealth{});
    bool pcie_time = false;
    for (const Finding& x : f) pcie_time |= x.cls == "pcie" && x.share > 0;
    if (pageable) {
      ASSERT_FALSE(f.empty());
      EXPECT_EQ(f[0].cls, "pcie") << f[0].title;
      EXPECT_GT(f[0].share, 0.4);
      ASSERT_FALSE(f[0].knobs.empty());
      EXPECT_EQ(f[0].knobs[0], "--h2d pinned");
      // The host's wait in cudaStreamSynchronize is device-busy time: no sync finding above it.
      for (const Finding& x : f) {
        if (x.cls == "sync") {
          EXPECT_LT(x.share, f[0].share);
        }
      }
    } else {
      EXPECT_FALSE(pcie_time);
      for (const Finding& x : f) EXPECT_NE(x.cls, "sync") << x.title;
    }
  }
}

}  // namespace
}  // namespace ft::profiler
