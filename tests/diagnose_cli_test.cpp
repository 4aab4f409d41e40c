// diagnose_cli_test.cpp: ft-diagnose end to end: run (prof's trace, reports'
// report.{json,md,html}), re-analysis, gates, bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/profiler/trace_reader.h"
#include "ft/reports/report.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace {

// Under AddressSanitizer the sanitizer's own shadow-memory page faults dominate ft's page-fault
// accounting (measured: 42 faults per step and "memory" 99.6% of a tiny CPU step), so the
// time-share assertions below only hold in uninstrumented builds.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif

namespace fs = std::filesystem;
using nlohmann::json;

using Result = ft::testing::CliResult;

Result diagnose(const std::string& args) { return ft::testing::run_cli("ft-diagnose", args); }

fs::path temp_dir(const std::string& name) { return ft::test::scratch_dir("ft_diag_cli_" + name); }

json report(const fs::path& dir) { return json::parse(ft::read_file(dir / "report.json")); }

const std::string kTiny =
    " --layers 1 --heads 2 --channels 32 --seq-len 32 --micro-batch 4 --threads 1 --val-batches 1 ";

// One profiled run shared by the tests below (a few hundred ms).
const fs::path& run_dir() {
  static const fs::path d = [] {
    fs::path dir = temp_dir("run");
    // Larger than kTiny (steps of a few ms, not 0.3-0.7 ms): the run's compute share is
    // checked, and sub-millisecond steps let one preemption under a parallel ctest dominate
    // (compute 0.25 of step time in one -j3 run on an idle machine).
    const Result r = diagnose("run --out " + dir.string() +
                              " --layers 2 --heads 2 --channels 64 --seq-len 64 --micro-batch 8"
                              " --threads 1 --val-batches 1 --steps 5");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("step 5/5"), std::string::npos) << "progress bar";
    EXPECT_NE(r.out.find("top findings"), std::string::npos) << r.out;
    return dir;
  }();
  return d;
}

TEST(DiagnoseCli, RunWritesTraceAndReportWithStepsSummingToWall) {
  const fs::path& d = run_dir();
  ASSERT_TRUE(fs::exists(d / "trace.json"));
  // The trace is prof's format: it re-reads, with the step spans, counters and run metadata the
  // classifier needs.
  const ft::profiler::Trace t = ft::profiler::read_trace_json(d / "trace.json");
  int steps = 0, mfu = 0, faults = 0, system = 0;
  for (const auto& e : t.events) {
    const std::string& n = t.names.at(e.name);
    steps += e.category == ft::profiler::Category::kStep;
    mfu += n == "mfu";
    faults += n == "page_faults.minor";
    system += n == "cpu.system_ns";
  }
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(mfu, 5);
  EXPECT_EQ(faults, 5);
  EXPECT_EQ(system, 5);
  for (const char* k : {"config.layers", "env.cpu_model", "env.gemm_library", "env.blas_core_type",
                        "env.threads", "env.compiler", "run.mem_peak", "page_fault_ns"}) {
    EXPECT_TRUE(t.metadata.count(k)) << k;
  }
  // All three reports, and report.json reads back with reports' reader.
  const ft::profiler::Diagnosis back = ft::reports::read_report_json(d / "report.json");
  EXPECT_EQ(back.steps.size(), 5u);
  EXPECT_EQ(back.environment.at("cpu_model"), t.metadata.at("env.cpu_model"));
  const std::string md = ft::read_file(d / "report.md");
  EXPECT_NE(md.find("compute"), std::string::npos);
  const std::string html = ft::read_file(d / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("gemm_library"), std::string::npos) << "environment table";
  EXPECT_EQ(html.find("src=\"http"), std::string::npos) << "self-contained";
  const json r = report(d);
  ASSERT_EQ(r.at("steps").size(), 5u);
  for (const json& s : r.at("steps")) {
    double sum = 0;
    for (const char* c : {"compute", "data", "pcie", "comm", "memory", "host", "sync", "other"}) {
      sum += s.at("breakdown").at(c).get<double>();
    }
    // report.json rounds each ms value to 1 us (the partition itself is exact in ns, tested in
    // classifier_test), so 8 rounded classes differ from the rounded wall by at most 4.5 us.
    EXPECT_NEAR(sum, s.at("wall_ms").get<double>(), 0.0045);
    EXPECT_GT(s.at("wall_ms").get<double>(), 0);
    EXPECT_TRUE(std::isfinite(s.at("loss").get<double>()));
  }
  double total = 0;
  for (const auto& [k, v] : r.at("totals").items()) total += v.get<double>();
  EXPECT_NEAR(total, 1.0, 4e-6);  // shares are rounded to 1e-6 each
  if (!kUnderAsan) {
    EXPECT_GT(r.at("totals").at("compute").get<double>(), 0.5) << "a CPU run is mostly compute";
  }
  for (const json& f : r.at("findings")) {
    for (const char* k : {"class", "share", "severity", "title", "evidence", "knobs"}) {
      EXPECT_TRUE(f.contains(k)) << k;
    }
  }
  for (const char* k : {"peak", "reserved", "fragmentation", "alloc_retries", "ooms"}) {
    EXPECT_TRUE(r.at("memory").contains(k)) << k;
  }
  EXPECT_GT(r.at("memory").at("peak").get<double>(), 0);
  EXPECT_GT(r.at("tokens_per_s").get<double>(), 0);
  EXPECT_GT(r.at("mfu").get<double>(), 0);
  EXPECT_EQ(r.at("loss_health").at("verdict"), "healthy");
  EXPECT_EQ(r.at("config").at("layers"), "2");
}

TEST(DiagnoseCli, ReanalysisReproducesTheReport) {
  const fs::path out = temp_dir("re");
  const Result r = diagnose(run_dir().string() + " --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* f : {"report.json", "report.md", "report.html"}) {
    EXPECT_TRUE(fs::exists(out / f)) << f;
  }
  EXPECT_FALSE(fs::exists(out / "trace.json")) << "re-analysis does not copy the trace";
  // ft-diagnose run analyses the trace it wrote, so re-analysis gives the same report.
  EXPECT_EQ(ft::read_file(run_dir() / "report.json"), ft::read_file(out / "report.json"));
  const json a = report(run_dir()), b = report(out);
  for (const auto& [k, v] : a.at("totals").items()) {
    EXPECT_NEAR(v.get<double>(), b.at("totals").at(k).get<double>(), 1e-9) << k;
  }
  ASSERT_EQ(a.at("steps").size(), b.at("steps").size());
  EXPECT_NEAR(a["steps"][3]["wall_ms"].get<double>(), b["steps"][3]["wall_ms"].get<double>(), 1e-6);
  EXPECT_EQ(a.at("findings").size(), b.at("findings").size());
  // A trace file works as well as a directory.
  EXPECT_EQ(diagnose((run_dir() / "trace.json").string() + " --out " + out.string()).status, 0);
}

TEST(DiagnoseCli, GatesSetTheExitStatus) {
  if (kUnderAsan) GTEST_SKIP() << "gate thresholds assume uninstrumented time shares";
  Result r = diagnose(run_dir().string() + " --out " + temp_dir("g1").string() +
                      " --fail-if 'compute>1%'");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_NE(r.out.find("gate tripped: compute>1%"), std::string::npos) << r.out;
  r = diagnose(run_dir().string() + " --out " + temp_dir("g2").string() +
               " --fail-if 'data>99%' --fail-if 'memory>99'");
  EXPECT_EQ(r.status, 0) << r.out;
  r = diagnose("run --out " + temp_dir("g3").string() + kTiny + "--steps 3 --fail-if 'compute>1%'");
  EXPECT_EQ(r.status, 4) << "gates apply to `run` too: " << r.out;
}

TEST(DiagnoseCli, ProfileWindowKeepsOnlyThoseSteps) {
  const fs::path d = temp_dir("window");
  const Result r = diagnose("run --out " + d.string() + kTiny + "--steps 5 --profile-steps 2-3");
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = report(d);
  ASSERT_EQ(j.at("steps").size(), 2u);
  EXPECT_EQ(j["steps"][0]["step"], 2);
  EXPECT_EQ(j["steps"][1]["step"], 3);
}

// `ft-diagnose run --help` shows this command's usage and the ft-train options it takes, and exits
// 0 (it once failed with "needs --out DIR").
TEST(DiagnoseCli, RunHelpListsTheTrainOptions) {
  const Result r = diagnose("run --help");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("ft-diagnose run --out DIR"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--micro-batch"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("needs --out"), std::string::npos) << r.out;
}

TEST(DiagnoseCli, BadInputIsAClearError) {
  const fs::path d = temp_dir("bad");
  Result r = diagnose(d.string() + " --fail-if data20");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("expected CLASS>PCT"), std::string::npos) << r.out;
  r = diagnose(d.string() + " --fail-if 'speed>5'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown class 'speed'"), std::string::npos) << r.out;
  r = diagnose(d.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("no trace at"), std::string::npos) << r.out;
  ft::write_file_atomic(d / "trace.json", "{\"traceEvents\": [ {\"ph\": \"X\", ");
  r = diagnose(d.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("not valid JSON at byte"), std::string::npos) << r.out;
  ft::write_file_atomic(d / "trace.json",
                        R"({"traceEvents": [{"ph": "X", "name": "x", "ts": 0}]})");
  r = diagnose(d.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("traceEvents[0] ('X') has no 'dur'"), std::string::npos) << r.out;
  ft::write_file_atomic(
      d / "trace.json",
      R"({"traceEvents": [{"ph": "X", "cat": "compute", "name": "x", "ts": 0, "dur": 5}]})");
  r = diagnose(d.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("no training steps"), std::string::npos) << r.out;
  r = diagnose("run --out " + d.string() + kTiny + "--steps 3 --profile-steps 3-1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--profile-steps '3-1'"), std::string::npos) << r.out;
  r = diagnose("run" + kTiny + "--steps 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("needs --out"), std::string::npos) << r.out;
  r = diagnose("run --out " + d.string() + kTiny + "--steps 3 --trace x.json");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("not --trace"), std::string::npos) << r.out;
  r = diagnose("run --out " + d.string() + kTiny + "--steps 3 --profile-steps 5-6");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("starts at step 5 but the run has 3 steps"), std::string::npos) << r.out;
  r = diagnose("run --out " + d.string() + " --layers 0");
  EXPECT_EQ(r.status, 2) << r.out;
  r = diagnose(d.string() + " --critical-path");  // an ft run directory
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--critical-path needs a PyTorch profiler (Kineto) trace"),
            std::string::npos)
      << r.out;
}

// `ft-diagnose run` is ft-diagnose-run, exec'd from beside ft-diagnose: the trace analyser itself
// loads none of the trainer's libraries (oneDNN, MPI, CUPTI: 8 MiB of RSS and ~8 ms of start-up).
TEST(DiagnoseCli, RunIsItsOwnBinaryAndAMissingOneIsAClearError) {
  const Result r = ft::testing::run_shell("FT_DIAGNOSE_RUN=/nonexistent/ft-diagnose-run " +
                                          std::string(FT_BINARY_DIR) + "/ft-diagnose run --out " +
                                          temp_dir("norun").string() + kTiny + "--steps 1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot run /nonexistent/ft-diagnose-run"), std::string::npos) << r.out;
  const Result ldd = ft::testing::run_shell("ldd " + std::string(FT_BINARY_DIR) + "/ft-diagnose");
  ASSERT_EQ(ldd.status, 0) << ldd.out;  // ldd is glibc's (libc-bin, an essential package)
  EXPECT_NE(ldd.out.find("libc.so"), std::string::npos) << ldd.out;
  for (const char* lib : {"libdnnl", "libmpi", "libcupti", "libopenblas"}) {
    EXPECT_EQ(ldd.out.find(lib), std::string::npos) << lib << " in\n" << ldd.out;
  }
}

// --critical-path adds HTA's critical path of the first steady step of a PyTorch trace to the
// reports; without it, none (it holds the whole JSON in memory).
TEST(DiagnoseCli, CriticalPathIsOptIn) {
  const fs::path trace = fs::path(FT_SOURCE_DIR) / "tests/data/hta/amd_trace";
  const fs::path d = fs::temp_directory_path() / ("ft_cp_cli_" + std::to_string(::getpid()));
  Result r = diagnose(trace.string() + " --out " + (d / "a").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ft::read_file(d / "a" / "report.md").find("Critical path"), std::string::npos);
  r = diagnose(trace.string() + " --critical-path --out " + (d / "b").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string md = ft::read_file(d / "b" / "report.md");
  EXPECT_NE(md.find("## Critical path (HTA's analysis)"), std::string::npos) << md;
  EXPECT_NE(ft::read_file(d / "b" / "report.json").find("\"cp_total_duration_us\""),
            std::string::npos);
  fs::remove_all(d);
}

// `--hta-json FILE` writes every HTA analysis ft-hta writes, keyed by the trace: the HTA-frame
// ones and those over HTA's rows (critical path, annotation breakdown, kernel sequences, CUPTI
// counters), the same as ft-hta's output for them.
TEST(DiagnoseCli, HtaJsonHoldsEveryAnalysis) {
  const fs::path trace = fs::path(FT_SOURCE_DIR) / "tests/data/hta/critical_path/alexnet";
  const fs::path d = temp_dir("hta_json");
  const Result r = diagnose(trace.string() + " --out " + (d / "out").string() + " --hta-json " +
                            (d / "hta.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const json doc = json::parse(ft::read_file(d / "hta.json"));
  ASSERT_EQ(doc.size(), 1u);
  const json& e = doc.begin().value();
  for (const char* k : {"temporal_breakdown", "idle_time_breakdown", "idle_interval_stats",
                        "kernel_breakdown", "queue_length_time_series", "memory_bw_summary",
                        "critical_path", "gpu_user_annotation_breakdown",
                        "frequent_cuda_kernel_sequences", "cupti_counter_data_with_operators"})
    EXPECT_TRUE(e.contains(k)) << k;
  const Result h = ft::testing::run_cli(
      "ft-hta", trace.string() + " --hta-json " + (d / "ft_hta.json").string());
  ASSERT_EQ(h.status, 0) << h.out;
  const json ft_hta = json::parse(ft::read_file(d / "ft_hta.json"));
  const json& f = ft_hta.begin().value();
  for (const char* k : {"critical_path", "frequent_cuda_kernel_sequences", "kernel_breakdown"})
    EXPECT_EQ(e.at(k), f.at(k)) << k;
}

// HTA's analyses run beside the diagnosis, but their outcome is as if they ran first: a trace
// both refuse fails with HTA's reader's error, nothing written; a trace HTA reads but ft cannot
// diagnose (no steps) fails after the HTA file is written.
TEST(DiagnoseCli, HtaJsonErrorsComeFirst) {
  const fs::path d = temp_dir("hta_json_errors");
  const fs::path bad = d / "bad.json", no_steps = d / "no_steps.json";
  ft::write_file_atomic(bad, R"({"traceEvents": [{"ph": "X", "ts": 1,,}]})");
  ft::write_file_atomic(no_steps, R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k",
    "pid": 0, "tid": 7, "ts": 2, "dur": 1, "args": {"stream": 7, "correlation": 3}}]})");
  // The trace's error, whether its HTA file and its report were written.
  auto check = [&](const fs::path& trace, const std::string& name, const std::string& error,
                   bool hta_written) {
    const Result r = diagnose(trace.string() + " --out " + (d / name).string() + " --hta-json " +
                              (d / (name + ".json")).string());
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(error), std::string::npos) << r.out;
    EXPECT_EQ(fs::exists(d / (name + ".json")), hta_written) << name;
    EXPECT_FALSE(fs::exists(d / name / "report.json")) << name;
  };
  check(bad, "a", "bad.json: byte 37: expected a string key", false);
  check(no_steps, "b", "no training steps", true);
  fs::remove_all(d);
}

}  // namespace

// A run that runs out of memory still writes its trace and a report whose top finding is the
// OOM, with the allocator's state, and exits 3 (ft-train's out-of-memory status).
TEST(DiagnoseCli, AnOutOfMemoryRunWritesItsTraceAndReportWithTheOomFirst) {
  const fs::path d = temp_dir("oom");
  const Result r = diagnose("run --out " + d.string() +
                            " --layers 1 --heads 4 --channels 32 --seq-len 256 --micro-batch 4"
                            " --threads 1 --val-batches 1 --steps 4 --attention naive"
                            " --memory-limit 6M");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("the run stopped: out of memory"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(d / "trace.json"));
  const json j = report(d);
  ASSERT_FALSE(j.at("findings").empty()) << j.dump(1);
  const json& top = j["findings"][0];
  EXPECT_EQ(top["class"], "memory");
  EXPECT_EQ(top["severity"], "critical");
  EXPECT_EQ(top["title"].get<std::string>().rfind("The run ran out of memory at step", 0), 0u)
      << top.dump(1);
  // The allocator's state at the failure: the request, the budget, what it held.
  const std::string detail = top["evidence"]["detail"];
  for (const char* k : {"requested", "limit 6", "reserved", "allocated", "largest free block"})
    EXPECT_NE(detail.find(k), std::string::npos) << k << " in " << detail;
  // The knobs that make it fit, each with the memory model's peak for this run; the run
  // completed no step, so no step time is promised.
  bool priced_checkpoint = false, priced_split = false;
  for (const auto& k : top["knobs"]) {
    const std::string knob = k.get<std::string>();
    if (knob.rfind("--checkpoint block (predicted peak ", 0) == 0) priced_checkpoint = true;
    if (knob.rfind("--micro-batch 2 --grad-accum 2 (predicted peak ", 0) == 0) priced_split = true;
    if (knob.find("predicted peak") != std::string::npos) {
      EXPECT_NE(knob.find("step time is not predicted"), std::string::npos) << knob;
    }
  }
  EXPECT_TRUE(priced_checkpoint) << top["knobs"].dump();
  EXPECT_TRUE(priced_split) << top["knobs"].dump();
  // Re-analysing the run directory gives the same top finding.
  const Result again = diagnose(d.string() + " --out " + temp_dir("oom_again").string());
  EXPECT_NE(again.out.find("The run ran out of memory"), std::string::npos) << again.out;
}
