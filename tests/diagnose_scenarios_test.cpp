// diagnose_scenarios_test.cpp: real ft-diagnose runs with real knobs; the top finding names the
// cause, and its knob fixes it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/reports/report.h"
#include "test_precision.h"
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

std::string run_command(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// Runs `ft-diagnose run` with the given ft-train flags; returns report.json.
json diagnose_run(const std::string& name, const std::string& flags) {
  const fs::path d =
      fs::temp_directory_path() / ("ft_diag_scn_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  ft::test::remove_at_exit(d);
  int status = 0;
  const std::string out = run_command(
      std::string(FT_BINARY_DIR) + "/ft-diagnose run --out " + d.string() + " --threads 1 " + flags,
      &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_TRUE(fs::exists(d / "trace.json"));
  EXPECT_TRUE(fs::exists(d / "report.md"));
  EXPECT_TRUE(fs::exists(d / "report.html"));
  const auto back = ft::reports::read_report_json(d / "report.json");  // throws if malformed
  EXPECT_FALSE(back.steps.empty());
  return json::parse(ft::read_file(d / "report.json"));
}

const json& top(const json& r) {
  EXPECT_FALSE(r.at("findings").empty()) << r.dump(1);
  return r.at("findings").at(0);
}

bool has_knob(const json& f, const std::string& prefix) {
  for (const auto& k : f.at("knobs")) {
    if (k.get<std::string>().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Mean wall time of the steps after the first `skip`.
double mean_step_ms(const json& r, size_t skip = 2) {
  double sum = 0;
  size_t n = 0;
  for (size_t i = skip; i < r.at("steps").size(); ++i, ++n)
    sum += r["steps"][i]["wall_ms"].get<double>();
  return n ? sum / n : 0;
}

double steady_faults(const json& r, size_t skip = 2) {
  double sum = 0;
  for (size_t i = skip; i < r.at("steps").size(); ++i) {
    sum += r["steps"][i]["detail"].value("page_faults.count", 0.0);
  }
  return sum;
}

std::string knob_flags(const json& f) {
  std::string s;
  for (const auto& k : f.at("knobs")) {
    s.push_back(' ');
    s.append(k.get<std::string>());
  }
  return s;
}

// (a) Data-bound: heavy in-line preprocessing, no loader workers. The preprocessing is sized from
// this machine's own step: a run without it gives the step's compute, a run with a known cost
// gives the training thread's data time per unit of cost (the data class: the preprocessing the
// in-line loader does, in the same chunks at the same steps for a given seed), and the scenario's
// preprocessing is then 0.6x the compute. In-line the step is compute + preprocessing (1.6x);
// with the one worker the data finding names per free core, the worker needs 0.6 of each step to
// produce a batch, so it keeps ahead with 40% slack and the training thread barely waits. At 1.0x
// (no slack) the wait kept ~half its share under CI load (2 x 0.276 against 0.550 in a fresh-clone
// run on Zen 4, a failure of the "halved" check). The test asks for a step ratio < 0.9 (0.625 by
// construction) and that the training thread's data wait at least halves.
TEST(DiagnoseScenario, DataBoundTopFindingIsDataAndWorkersCutStepTime) {
  if (kUnderAsan) GTEST_SKIP() << "time shares are dominated by ASan's shadow-memory faults";
  const std::string model =
      " --layers 2 --heads 2 --channels 64 --seq-len 64 --micro-batch 8 --steps 24" +
      ft::test::fast_precision_flag();
  const double compute_ms = mean_step_ms(diagnose_run("data_base", model + " --loader-workers 0"));
  constexpr int kProbeCost = 2000;
  const json probe = diagnose_run(
      "data_probe", model + " --loader-workers 0 --preprocess-cost " + std::to_string(kProbeCost));
  const double probe_data_ms = probe.at("totals").at("data").get<double>() * mean_step_ms(probe);
  const double unit_ms = std::max(probe_data_ms, 1e-3) / kProbeCost;
  const long cost = std::clamp(std::lround(0.6 * compute_ms / unit_ms), 200L, 400000L);
  const std::string preprocess = " --preprocess-cost " + std::to_string(cost);
  const json slow = diagnose_run("data", model + " --loader-workers 0" + preprocess);
  const json& f = top(slow);
  EXPECT_EQ(f.at("class"), "data") << slow.at("findings").dump(1);
  ASSERT_TRUE(has_knob(f, "--loader-workers"));
  std::string workers;
  for (const auto& k : f.at("knobs")) {
    if (k.get<std::string>().rfind("--loader-workers", 0) == 0) workers = k.get<std::string>();
  }
  const json fast = diagnose_run("data_fixed", model + preprocess + " " + workers);
  // One worker produces about as fast as the step computes, so a little wait remains (data share
  // 0.54 -> 0.12 in the slowest of 12 runs on Zen 3): at least halved.
  EXPECT_LT(2 * fast.at("totals").at("data").get<double>(),
            slow.at("totals").at("data").get<double>());
  // ctest runs this test alone (RUN_SERIAL).
  const double ratio = mean_step_ms(fast) / mean_step_ms(slow);
  std::printf(
      "data scenario: compute %.1f ms, preprocess-cost %ld, step %.1f -> %.1f ms (%.2f), data "
      "share %.3f -> %.3f\n",
      compute_ms, cost, mean_step_ms(slow), mean_step_ms(fast), ratio,
      slow.at("totals").at("data").get<double>(), fast.at("totals").at("data").get<double>());
  EXPECT_LT(ratio, 0.9) << "applying " << workers << " measurably cuts step time (compute "
                        << compute_ms << " ms, preprocess-cost " << cost << ", slow data share "
                        << slow.at("totals").at("data") << ")";
}

// (b) Memory: caching disabled under a tight limit on 4 KiB pages (--allocator-huge-pages
// false), so every step maps fresh segments and faults each 4 KiB of them in, as a malloc that
// hands large blocks back to the OS does. Many small heads with naive attention store (B, NH,
// T, T) scores: many bytes per flop. On the Zen 3 VM (fp32, one thread) the classifier put memory
// at 31% of the step and caching cut the step by 31-33% (12-step runs, 2026-12-04). With huge
// pages the same run faults 2 MiB at a time and memory is only 5-7% of the step: too close to the
// rule's 5% bar to label the scenario.
TEST(DiagnoseScenario, MemoryTopFindingIsMemoryAndCachingRemovesTheFaults) {
  if (kUnderAsan) GTEST_SKIP() << "time shares are dominated by ASan's shadow-memory faults";
  const std::string model =
      " --layers 2 --heads 16 --channels 16 --seq-len 128 --micro-batch 8 --attention naive"
      " --steps 6 --memory-limit 128M --allocator-huge-pages false" +
      ft::test::fast_precision_flag();
  const json bad = diagnose_run("memory", model + " --allocator-caching false");
  const json& f = top(bad);
  EXPECT_EQ(f.at("class"), "memory") << bad.at("findings").dump(1);
  const double share = f.at("share").get<double>();
  EXPECT_GT(share, 0.05);
  EXPECT_GT(steady_faults(bad), 0);
  ASSERT_TRUE(has_knob(f, "--allocator-caching true")) << f.dump(1);
  EXPECT_TRUE(has_knob(f, "--allocator-huge-pages true")) << f.dump(1);
  const json good = diagnose_run("memory_fixed", model + " --allocator-caching true");
  // With caching the engine maps nothing after warm-up (0 faults in 28 of 28 runs here), but
  // the count is process-wide: under CI load one stray fault (stack growth, a kernel NUMA or
  // compaction hint) was seen once in a steady step. Caching must remove nearly all of them.
  EXPECT_LE(steady_faults(good), 1.0) << "with caching, steady steps touch no fresh pages";
  EXPECT_LE(steady_faults(good) * 20, steady_faults(bad));
  EXPECT_LT(good.at("totals").at("memory").get<double>(), 0.01);
  for (const auto& g : good.at("findings")) {
    EXPECT_FALSE(g.at("class") == "memory" && g.at("share").get<double>() > 0) << g.dump(1);
  }
  // The truth, side by side: the fix saves time, and about what the memory share said (within
  // 2x either way; ctest runs this test alone, RUN_SERIAL).
  const double saved = 1 - mean_step_ms(good) / mean_step_ms(bad);
  std::printf("memory scenario: step %.1f -> %.1f ms, saved %.3f, memory share %.3f\n",
              mean_step_ms(bad), mean_step_ms(good), saved, share);
  EXPECT_GT(saved, 0.1);
  EXPECT_LT(share, 2 * saved);
  EXPECT_GT(share, saved / 2);
}

// (c) Compute-bound fp32: bf16 is the fix.
TEST(DiagnoseScenario, ComputeBoundFp32TopFindingIsPrecision) {
  if (!ft::test::bf16_native())
    GTEST_SKIP()
        << "this CPU has no bf16 GEMMs (bf16 is emulated): fp32 is already the fast precision";
  const json r = diagnose_run(
      "compute", " --layers 2 --heads 2 --channels 128 --seq-len 64 --micro-batch 16 --steps 6");
  const json& f = top(r);
  EXPECT_EQ(f.at("class"), "precision") << r.at("findings").dump(1);
  EXPECT_TRUE(has_knob(f, "--precision bf16"));
  EXPECT_GT(r.at("totals").at("compute").get<double>(), 0.5);
}

// (d) Under-filled: one 32-token sequence per micro-batch, lots of memory headroom.
TEST(DiagnoseScenario, UnderfilledTopFindingIsBatch) {
  if (kUnderAsan) GTEST_SKIP() << "time shares are dominated by ASan's shadow-memory faults";
  // In-line loading (--loader-workers 0): with a loader thread, one 1.7 ms hand-off wait (its
  // worker descheduled by another process) in a 2.3 ms step made data the top finding once.
  const std::string flags =
      " --layers 2 --heads 2 --channels 64 --seq-len 32 --micro-batch 1"
      " --grad-accum 4 --steps 6 --loader-workers 0" +
      ft::test::fast_precision_flag();
  // ctest runs this test alone (RUN_SERIAL); the batch rule reads MFU against the peak measured
  // on this machine, so no CPU kind's figure decides it. One run.
  const json r = diagnose_run("batch", flags);
  const json& f = top(r);
  EXPECT_EQ(f.at("class"), "batch") << r.at("findings").dump(1);
  EXPECT_TRUE(has_knob(f, "--micro-batch 2 --grad-accum 2")) << f.dump(1);
}

// (e) Unstable loss: no warmup, LR far too high, no clipping; the suggested knobs steady it.
TEST(DiagnoseScenario, UnstableLossTopFindingIsLossAndTheFixSteadiesIt) {
  const std::string model =
      " --layers 2 --heads 2 --channels 64 --seq-len 64 --micro-batch 16 --steps 30" +
      ft::test::fast_precision_flag();
  const json bad = diagnose_run("loss", model + " --warmup 0 --lr 0.1 --clip 0");
  const json& f = top(bad);
  EXPECT_EQ(f.at("class"), "loss") << bad.at("findings").dump(1);
  EXPECT_NE(bad.at("loss_health").at("verdict"), "healthy");
  EXPECT_TRUE(has_knob(f, "--warmup"));
  EXPECT_TRUE(has_knob(f, "--lr"));
  EXPECT_TRUE(has_knob(f, "--clip"));
  const json good = diagnose_run("loss_fixed", model + knob_flags(f));
  EXPECT_EQ(good.at("loss_health").at("verdict"), "healthy") << good.at("loss_health").dump();
  EXPECT_LT(good.at("loss_health").at("oscillation").get<double>(),
            0.5 * bad.at("loss_health").at("oscillation").get<double>());
  EXPECT_EQ(good.at("loss_health").at("spikes"), 0);
  for (const auto& g : good.at("findings")) EXPECT_NE(g.at("class"), "loss");
}

}  // namespace
