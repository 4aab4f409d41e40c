// host_findings_test.cpp: what the host finding says on real accelerator traces (HTA's test data):
// untraced host time is not launch overhead; slow runtime calls are per-submission cost, not many
// short kernels; CUDA graphs are offered only where the launches are CUDA/HIP calls.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"

namespace fs = std::filesystem;
using namespace ft::profiler;

namespace {

const fs::path kRoot = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "hta";

const Finding& host_finding(const std::string& trace) {
  static Diagnosis d;
  d = diagnose_trace_ranks(load_kineto_ranks(kRoot / trace));
  for (const Finding& f : d.findings)
    if (f.cls == "host" && f.share > 0) return f;
  throw std::runtime_error("no host finding on " + trace);
}

const Finding* host_of(const Diagnosis& d) {
  for (const Finding& f : d.findings)
    if (f.cls == "host" && f.share > 0) return &f;
  return nullptr;
}

bool offers_graphs(const Finding& f) {
  for (const std::string& k : f.knobs)
    if (k.find("graphs") != std::string::npos) return true;
  return false;
}

}  // namespace

// MTIA: 3453 'runFunction - job_prep_and_submit_for_execution' calls of ~0.35 ms (median) each:
// the host's cost is per submission; CUDA graphs do not apply to MTIA's runtime.
TEST(HostFindings, SlowMtiaSubmitsAreNotShortKernels) {
  const Finding& f = host_finding("mtia_trace_single_rank");
  EXPECT_NE(f.explanation.find("runtime calls of"), std::string::npos) << f.explanation;
  EXPECT_NE(f.explanation.find("runFunction - job_prep_and_submit_for_execution"),
            std::string::npos);
  EXPECT_EQ(f.explanation.find("many short kernels,"), std::string::npos) << f.explanation;
  EXPECT_FALSE(offers_graphs(f));
}

// MI250 (ROCm): hipLaunchKernel calls of a few µs (median; one 6.5 ms outlier does not move it):
// launch overhead, for which HIP graphs (torch.cuda.graphs on ROCm) apply.
TEST(HostFindings, ShortHipLaunchesAreLaunchOverhead) {
  const Finding& f = host_finding("amd_trace");
  EXPECT_NE(f.explanation.find("many short kernels"), std::string::npos) << f.explanation;
  EXPECT_TRUE(offers_graphs(f));
}

// HTA's triton_example: one ProfilerStep of 13.3 s on a process of its own, the work (a
// torch.compile'd region launching one 1.8 µs Triton kernel) in the first 1.5 ms of it, on
// another. The device idles 100% of the step while the training thread runs nothing traced: the
// finding says so, names no launch remedy and predicts no step time; the step's untraced tail is
// an input warning. Traces whose host time is in traced operators keep "Host/launch overhead".
TEST(HostFindings, UntracedHostTimeIsNotLaunchOverhead) {
  const Diagnosis d = diagnose_trace_ranks(load_kineto_ranks(kRoot / "triton_example"));
  const Finding* host = host_of(d);
  ASSERT_NE(host, nullptr);
  EXPECT_NE(host->title.find("host time the trace does not show"), std::string::npos)
      << host->title;
  EXPECT_LT(host->predicted_step_ms, 0);
  for (const std::string& k : host->knobs) EXPECT_EQ(k.find("graphs"), std::string::npos) << k;
  std::string all;
  for (const std::string& w : d.warnings) all += w + "\n";
  EXPECT_NE(all.find("1 step spans end well after the last other event of the trace (most: "
                     "'ProfilerStep#1', 13334.956 ms"),
            std::string::npos)
      << all;
  const Diagnosis control =
      diagnose_trace_ranks(load_kineto_ranks(kRoot / "trace_diff" / "control"));
  const Finding* traced = host_of(control);
  ASSERT_NE(traced, nullptr);
  EXPECT_NE(traced->title.find("Host/launch overhead"), std::string::npos) << traced->title;
  EXPECT_GE(traced->predicted_step_ms, 0);
}
