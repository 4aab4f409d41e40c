// timeline_test.cpp: Diagnosis::timeline on a PyTorch-style trace whose spans are known by
// construction: the window, the lanes, the rows, the classes and the runs of short kernels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"

namespace fs = std::filesystem;
using namespace ft::profiler;

namespace {

// One complete event ("X") of a Kineto trace, times in µs.
std::string fmt_event(const char* cat, const std::string& name, int pid, int tid, double ts,
                      double dur, const std::string& args) {
  return "{\"ph\":\"X\",\"cat\":\"" + std::string(cat) + "\",\"name\":\"" + name +
         "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"ts\":" + std::to_string(ts) + ",\"dur\":" + std::to_string(dur) + ",\"args\":" + args +
         "}";
}

// Five 10 ms steps. In each: aten::linear (0.5-3.5 ms) launching "gemm" (4 ms on stream 7 from
// 1 ms); 200 launches of a 1 µs kernel "tiny" every 2 µs from 4 ms (stream 7, 5-5.4 ms);
// aten::item (6-9 ms) whose cudaMemcpyAsync DtoH waits 2.9 ms for an 8-byte read-back.
std::string trace_json() {
  std::string ev;
  int corr = 0;
  auto add = [&](const std::string& e) { ev += (ev.empty() ? "" : ",\n") + e; };
  for (int s = 0; s < 5; ++s) {
    const double t = 1000.0 + 10000.0 * s;
    add(fmt_event("user_annotation", "ProfilerStep#" + std::to_string(s + 1), 1, 1, t, 10000,
                  "{}"));
    add(fmt_event("cpu_op", "aten::linear", 1, 1, t + 500, 3000, "{}"));
    std::string c = std::to_string(++corr);
    add(fmt_event("cuda_runtime", "cudaLaunchKernel", 1, 1, t + 600, 20,
                  "{\"correlation\":" + c + "}"));
    add(fmt_event("kernel", "gemm", 0, 7, t + 1000, 4000,
                  "{\"device\":0,\"stream\":7,\"correlation\":" + c + "}"));
    for (int k = 0; k < 200; ++k) {
      c = std::to_string(++corr);
      add(fmt_event("cuda_runtime", "cudaLaunchKernel", 1, 1, t + 4000 + 2 * k, 1,
                    "{\"correlation\":" + c + "}"));
      add(fmt_event("kernel", "tiny", 0, 7, t + 5000 + 2 * k, 1,
                    "{\"device\":0,\"stream\":7,\"correlation\":" + c + "}"));
    }
    add(fmt_event("cpu_op", "aten::item", 1, 1, t + 6000, 3000, "{}"));
    c = std::to_string(++corr);
    add(fmt_event("cuda_runtime", "cudaMemcpyAsync", 1, 1, t + 6050, 2900,
                  "{\"correlation\":" + c + "}"));
    add(fmt_event("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 0, 7, t + 8940, 2,
                  "{\"device\":0,\"stream\":7,\"bytes\":8,\"correlation\":" + c + "}"));
  }
  return R"({"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[)" + ev +
         "]}";
}

}  // namespace

TEST(Timeline, ShowsTheMedianStepAndTheNextAsTheClassifierSeesThem) {
  const fs::path dir = fs::temp_directory_path() / ("ft_timeline_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "rank0.json") << trace_json();
  const Diagnosis d = diagnose_trace_ranks(load_kineto_ranks(dir / "rank0.json"));
  fs::remove_all(dir);
  const Timeline& t = d.timeline;
  ASSERT_EQ(t.steps.size(), 2u);
  EXPECT_EQ(t.steps[1], t.steps[0] + 1);
  EXPECT_NEAR(t.end_ms - t.start_ms, 20.0, 0.5);  // two 10 ms steps
  ASSERT_EQ(t.lanes.size(), 2u);
  EXPECT_EQ(t.lanes[0].rfind("training thread: ", 0), 0u) << t.lanes[0];
  size_t gemm = 0, runs = 0, linear = 0, readback = 0, launch_runs = 0;
  for (const TimelineSpan& s : t.spans) {
    const std::string& n = t.names.at(s.name);
    const auto cls = static_cast<WaitClass>(s.cls);
    if (n == "gemm") {
      ++gemm;
      EXPECT_EQ(s.lane, 1);
      EXPECT_EQ(cls, WaitClass::kCompute);
      EXPECT_NEAR(s.dur_ms, 4.0, 1e-9);
    } else if (n == "200 short spans" && s.lane == 1) {
      ++runs;  // 200 kernels of 1 µs, 1 µs apart: under 1/2000 of the window each
      EXPECT_NEAR(s.dur_ms, 0.399, 1e-9);
    } else if (n == "200 short spans" && s.lane == 0) {
      ++launch_runs;
      EXPECT_EQ(s.row, 0);  // the launches are not inside an operator here
      EXPECT_EQ(cls, WaitClass::kHost);
    } else if (n == "aten::linear") {
      ++linear;
      EXPECT_EQ(s.row, 0);
      EXPECT_EQ(cls, WaitClass::kHost);  // a CPU operator on a device trace is host work
    } else if (n == "cudaMemcpyAsync") {
      ++readback;
      EXPECT_EQ(s.row, 1);
      EXPECT_EQ(cls, WaitClass::kSync);  // a blocking read-back
      EXPECT_NEAR(s.dur_ms, 2.9, 1e-9);
    }
  }
  EXPECT_EQ(gemm, 2u);
  EXPECT_EQ(runs, 2u);
  EXPECT_EQ(launch_runs, 2u);
  EXPECT_GE(linear, 2u);  // the window (device-defined steps) may clip a third
  EXPECT_EQ(readback, 2u);
  EXPECT_EQ(t.hidden, 0);
}
