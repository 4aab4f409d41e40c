// findings_test.cpp: loss-health rules, finding rules and ranking, RunInfo from metadata, CI gates.
#include "ft/profiler/findings.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ft/core/error.h"
#include "ft/profiler/loss_health.h"

namespace {

using namespace ft::profiler;

// A smooth decaying curve with small deterministic noise, like a healthy short run.
std::vector<double> healthy(int n) {
  std::vector<double> l;
  for (int i = 0; i < n; ++i)
    l.push_back(2.0 + 3.5 * std::exp(-i / 8.0) + 0.01 * std::sin(i * 1.7));
  return l;
}

TEST(LossHealth, HealthyCurve) {
  const LossHealth h = assess_loss(healthy(40));
  EXPECT_EQ(h.verdict, "healthy");
  EXPECT_FALSE(h.has_nan);
  EXPECT_FALSE(h.diverged);
  EXPECT_EQ(h.spikes, 0);
  EXPECT_LT(h.oscillation, 0.01) << "a steady descent is not oscillation";
}

TEST(LossHealth, NanWins) {
  auto l = healthy(20);
  l[12] = std::nan("");
  EXPECT_EQ(assess_loss(l).verdict, "nan");
  EXPECT_TRUE(assess_loss(l).has_nan);
  l[12] = INFINITY;
  EXPECT_EQ(assess_loss(l).verdict, "nan");
}

TEST(LossHealth, SpikeCountedAgainstTrend) {
  auto l = healthy(40);
  l[25] += 1.0;  // one jump well above the trend, then back
  const LossHealth h = assess_loss(l);
  EXPECT_EQ(h.spikes, 1);
  EXPECT_EQ(h.verdict, "spiky");
}

TEST(LossHealth, DivergenceWhenFinalAboveBestOrStart) {
  std::vector<double> l = {5.5, 4.0, 3.0, 2.8, 3.5, 4.5, 5.0, 5.6, 5.8, 6.0};
  const LossHealth h = assess_loss(l);
  EXPECT_TRUE(h.diverged);
  EXPECT_EQ(h.verdict, "diverging");
}

TEST(LossHealth, OscillationIsNormalisedSpreadOfDifferences) {
  std::vector<double> l;
  for (int i = 0; i < 30; ++i) l.push_back(4.0 - 0.01 * i + (i % 2 ? -0.6 : 0.6));
  const LossHealth h = assess_loss(l);
  // Differences alternate +-1.2; their centred 5-mean is about +-0.24, so the detrended
  // differences are about +-0.96 (less at the ends) over a median loss of ~3.855.
  EXPECT_GT(h.oscillation, 0.2);
  EXPECT_LT(h.oscillation, 0.96 / 3.855 + 0.01);
  EXPECT_EQ(h.spikes, 0) << "alternation is oscillation, not spikes";
  EXPECT_EQ(h.verdict, "oscillating");
}

TEST(LossHealth, ShortSeriesIsNotJudged) {
  EXPECT_EQ(assess_loss({5.0, 9.0}).verdict, "healthy");
  EXPECT_EQ(assess_loss({}).verdict, "unknown");  // no loss recorded
}

StepBreakdown step(int64_t i, double wall, std::array<double, kNumWaitClasses> ms) {
  StepBreakdown s;
  s.step = i;
  s.wall_ms = wall;
  s.ms = ms;
  s.loss = 3.0;
  return s;
}

TEST(Findings, RankedByRecoverableShareWithEvidenceAndKnobs) {
  Trace t;
  RunInfo run;
  run.warmup_excluded = 1;
  run.precision = "fp32";
  run.logical_cpus = 2;
  run.loader_workers = 0;
  std::vector<StepBreakdown> steps;
  // compute, data, pcie, comm, memory, host, sync, other
  steps.push_back(step(0, 100, {0, 0, 0, 0, 100, 0, 0, 0}));  // excluded warm-up step
  for (int i = 1; i <= 4; ++i) steps.push_back(step(i, 100, {60, 30, 0, 0, 8, 0, 0, 2}));
  const auto f = find_issues(t, steps, run, assess_loss({3, 3, 3, 3}));
  ASSERT_GE(f.size(), 3u);
  EXPECT_EQ(f[0].cls, "data");
  EXPECT_NEAR(f[0].share, 0.30, 1e-12);
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].evidence.steps, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(f[0].knobs.at(0), "--loader-workers 2");
  EXPECT_EQ(f[1].cls, "precision");
  EXPECT_NEAR(f[1].share, 0.30, 1e-12);  // 60% compute x (1 - 1/2)
  EXPECT_EQ(f[1].knobs.at(0), "--precision bf16");
  EXPECT_EQ(f[2].cls, "memory");
  EXPECT_NEAR(f[2].share, 0.08, 1e-12) << "the warm-up step's 100% memory is excluded";
}

TEST(Findings, AWaitLongerThanTheWorkersTakeToProduceTheBatchNamesInLineLoading) {
  // 1 worker; the training thread waits 6 ms of a 100 ms step. Batches that take the worker
  // 0.5 ms to produce: the wait is the hand-off, so --loader-workers 0 comes first. Batches
  // that take it 20 ms (real work) or an unrecorded production time: more workers, as before.
  for (double produce : {0.5, 20.0, -1.0}) {
    Trace t;
    RunInfo run;
    run.warmup_excluded = 1;
    run.logical_cpus = 2;
    run.loader_workers = 1;
    run.data_produce_ms = produce;
    std::vector<StepBreakdown> steps;
    for (int i = 0; i <= 4; ++i) steps.push_back(step(i, 100, {94, 6, 0, 0, 0, 0, 0, 0}));
    const auto f = find_issues(t, steps, run, assess_loss({3, 3, 3, 3, 3}));
    ASSERT_FALSE(f.empty());
    ASSERT_EQ(f[0].cls, "data");
    const bool handoff = produce >= 0 && produce < 6;
    EXPECT_EQ(f[0].knobs.at(0) == "--loader-workers 0", handoff) << produce;
    EXPECT_EQ(f[0].knobs.at(handoff ? 1 : 0), "--loader-workers 2") << produce;
    EXPECT_EQ(f[0].explanation.find("hand-off") != std::string::npos, handoff) << produce;
    EXPECT_EQ(f[0].evidence.detail.find("to produce") != std::string::npos, produce >= 0);
  }
}

TEST(Findings, UnstableLossRanksFirstAndNamesWarmupLrClip) {
  Trace t;
  RunInfo run;
  run.precision = "fp32";
  run.warmup = 0;
  run.lr = 0.03;
  run.clip = 0;
  run.steps = 20;
  std::vector<StepBreakdown> steps;
  for (int i = 0; i < 6; ++i) steps.push_back(step(i, 100, {95, 0, 0, 0, 0, 0, 0, 5}));
  const LossHealth h = assess_loss({5.5, 4.0, 3.0, 2.8, 3.5, 4.5, 5.0, 5.6, 5.8, 6.0});
  const auto f = find_issues(t, steps, run, h);
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f[0].cls, "loss");
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].knobs, (std::vector<std::string>{"--warmup 10", "--lr 0.001", "--clip 1.0"}));
  EXPECT_EQ(f[1].cls, "precision");
}

TEST(Findings, UnderfilledBatchNeedsSmallBatchLowMfuAndHeadroom) {
  Trace t;
  RunInfo run;
  run.precision = "bf16";
  run.micro_batch = 2;
  run.seq_len = 32;
  run.grad_accum = 4;
  run.mfu = 0.01;
  run.mem_peak = 10e6;
  run.memory_capacity = 1e9;
  std::vector<StepBreakdown> steps;
  for (int i = 0; i < 4; ++i) steps.push_back(step(i, 10, {9, 0, 0, 0, 0, 0, 0, 1}));
  auto f = find_issues(t, steps, run, assess_loss({}));
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].cls, "batch");
  EXPECT_EQ(f[0].knobs.at(0), "--micro-batch 4 --grad-accum 2");
  run.mem_peak = 600e6;  // doubling would not fit
  f = find_issues(t, steps, run, assess_loss({}));
  for (const auto& x : f) EXPECT_NE(x.cls, "batch");
  run.mem_peak = 10e6;
  run.mfu = 0.5;  // small, but the GEMMs already run well: no finding
  f = find_issues(t, steps, run, assess_loss({}));
  for (const auto& x : f) EXPECT_NE(x.cls, "batch");
  run.mfu = 0.01;
  run.micro_batch = 64;  // 2048 tokens: not under-filled
  f = find_issues(t, steps, run, assess_loss({}));
  for (const auto& x : f) EXPECT_NE(x.cls, "batch");
}

TEST(Findings, EnvironmentCoretypeThreadsAndAllocator) {
  Trace t;
  RunInfo run;
  run.cpu_vector_bits = 512;
  run.env_vars["OPENBLAS_CORETYPE"] = "Haswell";
  run.gemm_library = "OpenBLAS 0.3.21";
  run.threads = 2;
  run.logical_cpus = 2;
  run.load_average = 1.2;
  run.allocator_caching = false;
  run.steps = 10;
  run.segment_unmaps = 40;
  std::vector<StepBreakdown> steps = {step(0, 10, {10, 0, 0, 0, 0, 0, 0, 0})};
  const auto f = find_issues(t, steps, run, assess_loss({}));
  int env = 0;
  bool core = false, threads = false, alloc = false;
  for (const auto& x : f) {
    if (x.cls != "environment") continue;
    ++env;
    core |= x.title.find("256-bit kernels on a 512-bit CPU") != std::string::npos &&
            x.severity == Severity::kWarning;
    threads |= x.knobs.at(0) == "--threads 1";
    alloc |= x.knobs.at(0) == "--allocator-caching true";
  }
  EXPECT_EQ(env, 3);
  EXPECT_TRUE(core);
  EXPECT_TRUE(threads);
  EXPECT_TRUE(alloc);
}

TEST(Findings, NsightCopyRules) {
  Trace t;
  auto copy = [&](Category c, uint64_t bytes, uint8_t flags) {
    Event e;
    e.track = {1, 1, false};
    e.name = t.names.intern("memcpy");
    e.category = c;
    e.dur_ns = 1000;
    e.bytes = bytes;
    e.flags = flags;
    e.step = 0;  // inside the step
    t.events.push_back(e);
  };
  copy(Category::kH2D, 1 << 20, kPageable);               // async from pageable: flagged
  copy(Category::kH2D, 1 << 20, kPinned);                 // pinned async: fine
  copy(Category::kD2H, 1 << 20, kSynchronous | kPinned);  // sync > 64 KB: flagged
  copy(Category::kH2D, 4096, kSynchronous | kPinned);     // sync <= 64 KB: fine
  const auto f =
      find_issues(t, {step(0, 10, {10, 0, 0, 0, 0, 0, 0, 0})}, RunInfo{}, assess_loss({}));
  int pageable = 0, sync = 0;
  for (const auto& x : f) {
    if (x.cls != "pcie") continue;
    pageable += x.title == "1 asynchronous copies from pageable memory";
    sync += x.title == "1 synchronous copies (D2H, or H2D over 64 KB)";
    EXPECT_EQ(x.evidence.detail, "1 copies, 1048576 bytes, 0.001 ms");
  }
  EXPECT_EQ(pageable, 1);
  EXPECT_EQ(sync, 1);
}

TEST(Findings, RunInfoFromMetadata) {
  const RunInfo r = RunInfo::from_metadata({{"config.precision", "bf16"},
                                            {"config.micro_batch", "8"},
                                            {"config.allocator_caching", "false"},
                                            {"config.allocator_huge_pages", "false"},
                                            {"config.lr", "0.001"},
                                            {"run.mfu", "0.25"},
                                            {"env.var.OPENBLAS_CORETYPE", "Haswell"},
                                            {"env.vector_bits", "512"},
                                            {"config.seq_len", "not a number"}});
  EXPECT_EQ(r.precision, "bf16");
  EXPECT_EQ(r.micro_batch, 8);
  EXPECT_FALSE(r.allocator_caching);
  EXPECT_FALSE(r.allocator_huge_pages);
  EXPECT_TRUE(RunInfo::from_metadata({}).allocator_huge_pages) << "the engine's default";
  EXPECT_DOUBLE_EQ(r.lr, 0.001);
  EXPECT_DOUBLE_EQ(r.mfu, 0.25);
  EXPECT_EQ(r.env_vars.at("OPENBLAS_CORETYPE"), "Haswell");
  EXPECT_EQ(r.cpu_vector_bits, 512);
  EXPECT_EQ(r.seq_len, 0) << "unparsable values keep the default";
}

TEST(Gates, ParseAndCheck) {
  EXPECT_EQ(parse_gate("data>20%").cls, "data");
  EXPECT_DOUBLE_EQ(parse_gate("data>20%").pct, 20);
  EXPECT_DOUBLE_EQ(parse_gate("memory>5").pct, 5);
  EXPECT_THROW(parse_gate("data20"), ft::ConfigError);
  EXPECT_THROW(parse_gate("bogus>5"), ft::ConfigError);
  EXPECT_THROW(parse_gate("data>abc"), ft::ConfigError);
  EXPECT_THROW(parse_gate("data>150%"), ft::ConfigError);
  Diagnosis d;
  d.totals[static_cast<int>(WaitClass::kData)] = 0.25;
  Finding loss;
  loss.cls = "loss";
  loss.severity = Severity::kWarning;
  Finding prec;
  prec.cls = "precision";
  prec.share = 0.3;
  d.findings = {loss, prec};
  EXPECT_EQ(check_gates(d, {parse_gate("data>20%")}).size(), 1u);
  EXPECT_TRUE(check_gates(d, {parse_gate("data>30%")}).empty());
  EXPECT_EQ(check_gates(d, {parse_gate("precision>10%")}).size(), 1u);
  EXPECT_TRUE(check_gates(d, {parse_gate("precision>40%")}).empty());
  EXPECT_EQ(check_gates(d, {parse_gate("loss>0")}).size(), 1u);
  EXPECT_TRUE(check_gates(d, {parse_gate("batch>0")}).empty());
}

}  // namespace

// Stub steps leave the steady state: a step under a tenth of the median, or one without device
// work in a run whose other steps have some; with only warm-up steps real, those are used.
TEST(SteadySteps, StubStepsAreExcludedByTheStatedRule) {
  auto step = [](int64_t n, double wall, double busy) {
    StepBreakdown s;
    s.step = n;
    s.wall_ms = wall;
    if (busy >= 0) s.detail["device.busy.compute"] = busy;
    return s;
  };
  RunInfo run;
  run.warmup_excluded = 0;
  const std::vector<StepBreakdown> host = {step(0, 100, -1), step(1, 90, -1), step(2, 110, -1),
                                           step(3, 5, -1)};
  auto numbers = [](const std::vector<const StepBreakdown*>& v) {
    std::vector<int64_t> out;
    for (const StepBreakdown* s : v) out.push_back(s->step);
    return out;
  };
  EXPECT_EQ(numbers(steady_steps(host, run)), (std::vector<int64_t>{0, 1, 2}));
  // Device windows: the last one (no next step to end it) leaves too.
  const std::vector<StepBreakdown> gpu = {step(0, 100, 60), step(1, 100, 0), step(2, 100, 70),
                                          step(3, 40, 30)};
  EXPECT_EQ(numbers(steady_steps(gpu, run)), (std::vector<int64_t>{0, 2}));
  // amd_trace's shape: a real first step and a 49 µs closing stub; the warm-up rule alone would
  // leave only the stub.
  run.warmup_excluded = 1;
  const std::vector<StepBreakdown> amd = {step(0, 8.9, 0.1), step(1, 0.049, 0)};
  EXPECT_EQ(numbers(steady_steps(amd, run)), (std::vector<int64_t>{0}));
  // Uniform steps: the warm-up and the last device window go.
  const std::vector<StepBreakdown> even = {step(0, 10, 5), step(1, 10, 5), step(2, 10, 5),
                                           step(3, 10, 5)};
  EXPECT_EQ(numbers(steady_steps(even, run)), (std::vector<int64_t>{1, 2}));
  // Host steps keep their last one.
  const std::vector<StepBreakdown> cpu = {step(0, 10, -1), step(1, 10, -1), step(2, 10, -1)};
  EXPECT_EQ(numbers(steady_steps(cpu, run)), (std::vector<int64_t>{1, 2}));
}

namespace {

StepBreakdown step_of(double wall, std::initializer_list<std::pair<WaitClass, double>> parts) {
  StepBreakdown s;
  s.wall_ms = wall;
  double rest = wall;
  for (const auto& [c, ms] : parts) {
    s.ms[static_cast<int>(c)] = ms;
    rest -= ms;
  }
  s.ms[static_cast<int>(WaitClass::kCompute)] += rest;
  return s;
}

Finding finding(const char* cls, double share) {
  Finding f;
  f.cls = cls;
  f.share = share;
  return f;
}

}  // namespace

// What-if per finding: a wait class's time is removed, a copy or collective hides at most
// behind the step's compute, unknown causes get no prediction, and the savings of the wait
// classes together never exceed the step's waiting time.
TEST(Predict, EachFindingRemovesItsCauseWithinTheStep) {
  // 100 ms steps: compute 30, data 20, pcie 10, comm 40.
  const StepBreakdown a =
      step_of(100, {{WaitClass::kData, 20}, {WaitClass::kPcie, 10}, {WaitClass::kComm, 40}});
  const StepBreakdown b = a;
  const std::vector<const StepBreakdown*> steady = {&a, &b};
  std::vector<Finding> fs = {finding("data", 0.2), finding("pcie", 0.1), finding("comm", 0.4),
                             finding("other", 0.3), finding("loss", 0)};
  predict_findings(steady, &fs);
  EXPECT_DOUBLE_EQ(fs[0].predicted_step_ms, 80.0);
  EXPECT_DOUBLE_EQ(fs[1].predicted_step_ms, 90.0);
  EXPECT_DOUBLE_EQ(fs[2].predicted_step_ms, 70.0);  // 40 ms of comm hide behind 30 of compute
  EXPECT_NE(fs[2].prediction.find("overlap the step's compute"), std::string::npos);
  EXPECT_EQ(fs[3].predicted_step_ms, -1);  // unknown cause
  EXPECT_EQ(fs[4].predicted_step_ms, -1);  // a risk, not time
  double saved = 0;
  for (const Finding& f : fs)
    if (f.predicted_step_ms >= 0) saved += 100 - f.predicted_step_ms;
  EXPECT_LE(saved, 100 - 30 + 1e-9);  // at most the waiting (device idle) time
  // A comm finding that keeps only its transfer part (a straggler takes the wait) saves that.
  std::vector<Finding> part = {finding("comm", 0.05)};
  predict_findings(steady, &part);
  EXPECT_DOUBLE_EQ(part[0].predicted_step_ms, 95.0);
}
