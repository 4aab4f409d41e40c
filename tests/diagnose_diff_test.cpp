// diagnose_diff_test.cpp: ft-diagnose diff: two PyTorch traces (HTA's trace_compare pair), two
// ft runs that differ by one knob, the median-ratio interval and the slower-than gate.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/profiler/run_diff.h"
#include "ft/reports/diff_report.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kData = std::string(FT_SOURCE_DIR) + "/tests/data";

ft::testing::CliResult diagnose(const std::string& args) {
  return ft::testing::run_cli("ft-diagnose", args);
}

// A diagnosis of `n` steps of `ms` each, all compute.
ft::profiler::Diagnosis steps_of(int n, double ms, const std::string& threads) {
  ft::profiler::Diagnosis d;
  for (int i = 0; i < n; ++i) {
    ft::profiler::StepBreakdown s;
    s.step = i;
    s.start_ms = i * ms;
    s.wall_ms = ms + 0.01 * (i % 3);
    s.ms[0] = s.wall_ms;
    d.steps.push_back(s);
  }
  d.config["threads"] = threads;
  return d;
}

}  // namespace

// HTA's trace_compare pair: the TraceDiff of their steady step (ProfilerStep#1010) names the
// operators that appeared (All2All_Pooled_Req, AddmmBackward0, CatBackward0) and vanished
// (nccl:all_reduce), and the kernel that vanished; one step each is too few for a verdict.
TEST(DiagnoseDiff, TwoPytorchTracesShowTheirOperatorChanges) {
  const fs::path out = ft::test::scratch_dir("ft_diff_pt");
  const auto r = diagnose("diff " + kData + "/hta/trace_compare/base " + kData +
                          "/hta/trace_compare/test --out " + out.string() + " --fail-if-slower 0");
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(ft::read_file(out / "diff.json"));
  EXPECT_EQ(j["trace_diff"]["iterations"], json::array({1010, 1010}));
  std::map<std::string, std::string> change;
  for (const json& row : j["trace_diff"]["records"])
    change[row["short_name"]] = row["counts_change_categories"];
  EXPECT_EQ(change["All2All_Pooled_Req"], "+");
  EXPECT_EQ(change["AddmmBackward0"], "+");
  EXPECT_EQ(change["nccl:all_reduce"], "-");
  EXPECT_EQ(change["cudaLaunchKernel"], "=");
  ASSERT_EQ(j["kernels_vanished"].size(), 1u);
  EXPECT_NE(j["kernels_vanished"][0].get<std::string>().find("vectorized_elementwise_kernel"),
            std::string::npos);
  EXPECT_NE(j["verdict"].get<std::string>().find("too few steady steps"), std::string::npos);
  const std::string html = ft::read_file(out / "diff.html");
  EXPECT_EQ(html.find("<4,"), std::string::npos) << "kernel names escaped";
  EXPECT_NE(ft::read_file(out / "diff.md").find("All2All\\_Pooled\\_Req"), std::string::npos);
  fs::remove_all(out);
}

// Two ft runs that differ by one knob: the knob is named, the classes and findings compared; a
// run against itself is never slower, whatever the gate.
TEST(DiagnoseDiff, TwoFtRunsNameTheKnobThatDiffers) {
  const fs::path a = ft::test::scratch_dir("ft_diff_a"), b = ft::test::scratch_dir("ft_diff_b");
  const std::string tiny =
      " --layers 1 --heads 2 --channels 32 --seq-len 32 --micro-batch 4 --val-batches 1 --steps 6";
  ASSERT_EQ(diagnose("run --out " + a.string() + tiny + " --threads 1").status, 0);
  ASSERT_EQ(diagnose("run --out " + b.string() + tiny + " --threads 2").status, 0);
  const auto r = diagnose("diff " + a.string() + " " + b.string() + " --out " + b.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("knob threads: 1 -> 2"), std::string::npos) << r.out;
  const json j = json::parse(ft::read_file(b / "diff.json"));
  EXPECT_EQ(j["knobs"].size(), 1u) << j["knobs"].dump();
  EXPECT_EQ(j["a"]["step"]["steps"], 4);  // 6 steps, 2 of warm-up
  EXPECT_TRUE(j["classes_ms_per_step"].contains("compute"));
  const auto same = diagnose("diff " + a.string() + " " + a.string() + " --fail-if-slower 0");
  EXPECT_EQ(same.status, 0) << same.out;
  EXPECT_NE(diagnose("diff " + a.string()).status, 0);  // one run: an error, not 0
  fs::remove_all(a);
  fs::remove_all(b);
}

// The gate trips on a slowdown beyond the interval only, and never on too few steps.
TEST(DiagnoseDiff, SlowerBeyondTheInterval) {
  const ft::profiler::RunInfo run;  // 2 warm-up steps
  const auto d = ft::profiler::diff_runs(steps_of(8, 10, "1"), run, steps_of(8, 20, "2"), run);
  EXPECT_NEAR(d.ratio, 2.0, 0.01);
  EXPECT_GT(d.ratio_lo, 1.9);
  EXPECT_TRUE(ft::profiler::slower_beyond(d, 50));
  EXPECT_FALSE(ft::profiler::slower_beyond(d, 150));
  ASSERT_EQ(d.knobs.size(), 1u);
  EXPECT_EQ(d.knobs[0].first, "threads");
  const auto few = ft::profiler::diff_runs(steps_of(4, 10, "1"), run, steps_of(4, 20, "1"), run);
  EXPECT_FALSE(ft::profiler::slower_beyond(few, 0));  // 2 steady steps each
  EXPECT_NE(ft::reports::render_diff_markdown(few).find("too few steady steps"), std::string::npos);
}
