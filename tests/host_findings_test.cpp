// host_findings_test.cpp: what the host finding says on real accelerator traces (HTA's test data):
// slow runtime calls are per-submission cost, not many short kernels; CUDA graphs are offered
// only where the launches are CUDA/HIP calls.
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
