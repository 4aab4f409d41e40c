// kineto_iterations_test.cpp: iterations of traces without ProfilerStep spans, windows of one
// rank, rank numbers, and the per-rank diagnosis of a real PyTorch DDP run on gloo.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ft/core/error.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/critical_path.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"
#include "ft/reports/report.h"

namespace fs = std::filesystem;
using namespace ft::profiler;

namespace {

const fs::path kData = fs::path(FT_SOURCE_DIR) / "tests" / "data";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("ft_kiter_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A Kineto trace built event by event (times in µs).
struct KinetoText {
  std::string ev;
  int corr = 100;
  void add(const std::string& e) { ev += (ev.empty() ? "" : ",\n") + e; }
  void span(const char* cat, const std::string& name, int64_t ts, int64_t dur, int tid = 1) {
    add(R"({"ph":"X","cat":")" + std::string(cat) + R"(","name":")" + name + R"(","pid":1,"tid":)" +
        std::to_string(tid) + R"(,"ts":)" + std::to_string(ts) + R"(,"dur":)" +
        std::to_string(dur) + "}");
  }
  // A launch at `ts` and its kernel at `kts` on stream 7.
  void kernel(int64_t ts, int64_t kts, int64_t kdur) {
    const std::string c = std::to_string(++corr);
    add(R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":)" +
        std::to_string(ts) + R"(,"dur":5,"args":{"correlation":)" + c + "}}");
    add(R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":)" + std::to_string(kts) +
        R"(,"dur":)" + std::to_string(kdur) + R"(,"args":{"device":0,"stream":7,"correlation":)" +
        c + "}}");
  }
  std::string text() const { return R"({"schemaVersion":1,"traceEvents":[)" + ev + "]}"; }
  fs::path write(const fs::path& dir, const char* name = "trace.json") const {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << text();
    return p;
  }
};

}  // namespace

// A loop annotated by the program (record_function("train_step")) without a profiler schedule:
// one step per instance, the rule said in the report.
TEST(Iterations, ARepeatingAnnotationGivesOneStepPerInstance) {
  TempDir dir;
  KinetoText k;
  for (int i = 0; i < 5; ++i) {
    const int64_t base = 1000 + i * 20000;
    k.span("user_annotation", "train_step", base, 15000);
    k.span("cpu_op", "aten::mm", base + 100, 2000);
    k.kernel(base + 2200, base + 2300, 12000);
    k.span("cpu_op", "aten::mm", base + 2400, 2000);  // repeats within the step: not the loop
  }
  const Trace t = load_trace(k.write(dir.path));
  EXPECT_NE(t.metadata.at("run.iterations").find("5 iterations: the instances of 'train_step'"),
            std::string::npos)
      << t.metadata.at("run.iterations");
  const auto steps = classify_steps(t);
  ASSERT_EQ(steps.size(), 5u);
  const Diagnosis d = diagnose(t);
  EXPECT_NE(d.steps_rule.find("train_step"), std::string::npos);
  // Steps are the device's windows: from a kernel's start to the next one's (20 ms, 12 busy);
  // the steady ones are 1-3 (the warm-up and the last, cut-short window leave).
  EXPECT_NEAR(d.totals[static_cast<int>(WaitClass::kCompute)], 12.0 / 20.0, 1e-6);
}

// No annotation: the rarest evenly spaced operator (once per iteration) starts each window, which
// runs to its next call; the operators called several times per iteration are not the loop.
TEST(Iterations, AnOperatorCalledOncePerIterationStartsTheWindows) {
  TempDir dir;
  KinetoText k;
  for (int i = 0; i < 4; ++i) {
    const int64_t base = 1000 + i * 10000;
    k.span("cpu_op", "aten::linear", base, 500);
    k.span("cpu_op", "aten::linear", base + 600, 500);
    k.span("cpu_op", "aten::linear", base + 1200, 500);
    k.kernel(base + 1800, base + 1900, 6000);
    k.span("cpu_op", "Optimizer.step#SGD.step", base + 8000, 900);
  }
  const Trace t = load_trace(k.write(dir.path));
  const std::string rule = t.metadata.at("run.iterations");
  EXPECT_NE(rule.find("4 iterations: the instances of 'Optimizer.step#SGD.step'"),
            std::string::npos)
      << rule;
  EXPECT_NE(rule.find("each window running to its next instance"), std::string::npos) << rule;
  const auto steps = classify_steps(t);
  ASSERT_EQ(steps.size(), 4u);
}

// Nothing repeats: the whole trace is one window, and the rule says so.
TEST(Iterations, NothingRepeatingMakesTheWholeTraceOneWindow) {
  TempDir dir;
  KinetoText k;
  k.span("cpu_op", "aten::conv2d", 1000, 3000);
  k.kernel(4100, 4200, 5000);
  k.span("cpu_op", "aten::relu", 9300, 200);
  const Trace t = load_trace(k.write(dir.path));
  EXPECT_NE(t.metadata.at("run.iterations").find("the whole trace as one window"),
            std::string::npos);
  const auto steps = classify_steps(t);
  ASSERT_EQ(steps.size(), 1u);
  const Diagnosis d = diagnose(t);
  double sum = 0;
  for (double v : d.totals) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-9);
}

// HTA's alexnet benchmark trace (no ProfilerStep): its warm-up and measured forwards each hold one
// "[param|clear_cache]" call; the windows they start are the iterations, the warm-up one is left
// out, and the measured forward (HTA's annotation for its critical path) is the steady step.
TEST(Iterations, AlexnetBenchmarkTraceMeasuresItsMeasuredForward) {
  const fs::path p = kData / "hta" / "critical_path" / "alexnet";
  const Trace t = load_trace(p);
  EXPECT_NE(t.metadata.at("run.iterations").find("2 iterations"), std::string::npos)
      << t.metadata.at("run.iterations");
  const Diagnosis d = diagnose(t);
  ASSERT_EQ(d.steps.size(), 2u);
  const auto steady = steady_steps(d.steps, RunInfo::from_metadata(t.metadata));
  ASSERT_EQ(steady.size(), 1u);
  EXPECT_EQ(steady[0]->step, 1);
  // The measured forward's window starts 12.76 s after the warm-up's (its clear_cache call at
  // 1695835585784555 µs, the warm-up's at ...573027229; steps start at their first device
  // work) and lasts well under a second.
  EXPECT_LT(steady[0]->wall_ms, 1000.0);
  EXPECT_GT(steady[0]->start_ms - d.steps[0].start_ms, 11000.0);
}

// The repository's real traces all have steps now: ProfilerStep spans or found iterations.
TEST(Iterations, EveryRealTraceHasSteps) {
  int synthesized = 0;
  for (const auto& e : fs::recursive_directory_iterator(kData / "hta")) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || n == "hta_outputs.json" ||
        !(n.ends_with(".json") || n.ends_with(".json.gz")))
      continue;
    SCOPED_TRACE(e.path().string());
    const Trace t = load_trace(e.path());
    Track main;
    EXPECT_TRUE(find_training_track(t, &main));
    EXPECT_FALSE(t.metadata.at("run.iterations").empty());
    synthesized +=
        t.metadata.at("run.iterations").find("ProfilerStep#N spans") == std::string::npos;
    EXPECT_FALSE(classify_steps(t).empty());
  }
  EXPECT_GE(synthesized, 3);  // alexnet, simple_add, cuda_event_sync_multi_stream
}

// A real run: PyTorch 1.13 DDP on gloo, 2 ranks, profiler schedule with repeat=0 (three windows
// per rank, each its own legacy-format file with its own clock), rank 1 busy for 40 ms per step
// in record_function("extra_work") (tests/data/ddp_straggler.py).
TEST(KinetoRanks, WindowsOfOneWorkerAreOneRank) {
  const auto ranks = read_kineto_rank_records((kData / "kineto" / "ddp_gloo_straggler").string());
  ASSERT_EQ(ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(trace_rank(ranks[r]), static_cast<int>(r));
    EXPECT_EQ(ranks[r].metadata.at("windows"), "3");
    EXPECT_NE(ranks[r].metadata.at("rank_source").find("file names"), std::string::npos);
  }
  std::vector<Trace> prepared = prepare_kineto_ranks(
      read_kineto_rank_records((kData / "kineto" / "ddp_gloo_straggler").string()));
  const auto steps = classify_steps(prepared[0]);
  std::vector<int64_t> numbers;
  for (const auto& s : steps) numbers.push_back(s.step);
  EXPECT_EQ(numbers, (std::vector<int64_t>{1, 2, 3, 6, 7, 8, 11}));
  // Windows do not overlap once merged (the later ones start after the earlier ones end).
  for (size_t i = 1; i < steps.size(); ++i)
    EXPECT_GE(steps[i].start_ms, steps[i - 1].start_ms + steps[i - 1].wall_ms);
}

TEST(KinetoRanks, GlooStragglerIsNamedWithWhatItDoesMore) {
  const Diagnosis d =
      diagnose_trace_ranks(load_kineto_ranks(kData / "kineto" / "ddp_gloo_straggler"));
  ASSERT_EQ(d.ranks.size(), 2u);
  EXPECT_EQ(d.parallel.straggler, 1);
  ASSERT_FALSE(d.findings.empty());
  const Finding& top = d.findings[0];
  EXPECT_EQ(top.cls, "parallel");
  EXPECT_NE(top.title.find("Rank 1"), std::string::npos) << top.title;
  EXPECT_NE(top.explanation.find("'extra_work'"), std::string::npos) << top.explanation;
  // By construction rank 0 waits about rank 1's 40 ms of extra work per step (±35%).
  EXPECT_NEAR(d.ranks[0].exposed_wait_ms, 40.0, 14.0);
  EXPECT_LT(d.ranks[1].exposed_wait_ms, 0.1 * d.ranks[0].exposed_wait_ms);
  // Waiting for the late rank is the straggler's finding, not a bucket-size knob.
  for (const Finding& f : d.findings) {
    if (f.cls != "comm") continue;
    EXPECT_NE(f.title.find("beyond the wait for rank 1"), std::string::npos) << f.title;
  }
}

// Two files of one rank with the same steps are not windows: a clear error names both.
TEST(KinetoRanks, TwoFilesWithTheSameStepsOfOneRankAreRefused) {
  TempDir dir;
  const fs::path src = kData / "kineto" / "ddp_gloo_straggler";
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("vm_23573.", 0) == 0) fs::copy_file(e.path(), dir.path / n);
  }
  // The first window again, under another time stamp of the same worker.
  fs::copy_file(src / "vm_23573.1796284758971.pt.trace.json",
                dir.path / "vm_23573.1796284999999.pt.trace.json");
  try {
    read_kineto_rank_records(dir.path.string());
    ADD_FAILURE() << "no error";
  } catch (const ft::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("with the same steps"), std::string::npos) << e.what();
  }
}

// Labelled GPU scenarios in PyTorch 2.x's Kineto format (bench/gpu_scenarios.py writes them and
// expected.json, computed by construction): each scenario's top time finding is its cause, and
// that finding's predicted saving is the constructed one within 35%; healthy runs and a read-back
// that the busy device hides get no time finding.
TEST(GpuScenarios, TopFindingAndPredictedSavingMatchTheConstruction) {
  const fs::path root = kData / "kineto" / "scenarios";
  std::ifstream in(root / "expected.json");
  ASSERT_TRUE(in.good()) << "missing " << root / "expected.json";
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_GE(expected.size(), 10u);
  for (const auto& [name, e] : expected.items()) {
    SCOPED_TRACE(name);
    const Diagnosis d = diagnose_trace_ranks(load_kineto_ranks(root / name));
    const Finding* top = nullptr;
    for (const Finding& f : d.findings) {
      if (f.share > 0) {
        top = &f;
        break;
      }
    }
    if (e["top"].is_null()) {
      EXPECT_EQ(top, nullptr) << top->cls << ": " << top->title;
      continue;
    }
    ASSERT_NE(top, nullptr);
    EXPECT_EQ(top->cls, e["top"].get<std::string>()) << top->title;
    const double saving = e["saving_ms"].get<double>();
    const double step = e["step_ms"].get<double>();
    ASSERT_GE(top->predicted_step_ms, 0) << top->title;
    const double predicted_saving = step - top->predicted_step_ms;
    EXPECT_NEAR(predicted_saving, saving, 0.35 * saving) << top->prediction;
    if (e.contains("straggler")) {
      EXPECT_EQ(d.parallel.straggler, e["straggler"].get<int>());
    }
    if (e.contains("steps_rule")) {
      EXPECT_NE(d.steps_rule.find(e["steps_rule"].get<std::string>()), std::string::npos);
    }
  }
}

// report.json carries HTA's critical path of the first steady step (its instance among the
// ProfilerSteps), the same as the analysis run alone on that instance; a trace without
// ProfilerStep says why there is none; both survive the report.json round trip.
TEST(CriticalPathInReport, FirstSteadyStepOfTheDiagnosedRank) {
  const fs::path p = kData / "hta" / "ns_resolution_trace";
  const std::vector<Trace> ranks = load_kineto_ranks(p);
  Diagnosis d = diagnose_trace_ranks(ranks);
  add_critical_path(p, trace_rank(ranks.front()), &d);
  const CriticalPathSummary& cp = d.critical_path;
  ASSERT_TRUE(cp.computed);
  ASSERT_TRUE(cp.success) << cp.error;
  const auto steady = steady_steps(d.steps, RunInfo::from_metadata({{"run.warmup_excluded", "1"}}));
  ASSERT_FALSE(steady.empty());
  EXPECT_EQ(cp.step, steady.front()->step);
  CriticalPathOptions o;
  o.rank = trace_rank(ranks.front());
  o.instance_first = o.instance_last = cp.instance;
  const CriticalPathResult alone = critical_path(p.string(), o);
  ASSERT_TRUE(alone.success);
  EXPECT_EQ(cp.total_us, alone.total_us);
  int64_t by_type = 0;
  for (const auto& [k, v] : cp.by_type_us) by_type += v;
  EXPECT_EQ(by_type, cp.total_us);
  const Diagnosis back = ft::reports::parse_report_json(ft::reports::render_json(d));
  EXPECT_EQ(back.critical_path.total_us, cp.total_us);
  EXPECT_EQ(back.critical_path.by_bound_us, cp.by_bound_us);

  const fs::path none = kData / "hta" / "critical_path" / "alexnet";
  Diagnosis a = diagnose_trace_ranks(load_kineto_ranks(none));
  add_critical_path(none, 0, &a);
  EXPECT_FALSE(a.critical_path.success);
  EXPECT_NE(a.critical_path.error.find("no ProfilerStep"), std::string::npos);
}
