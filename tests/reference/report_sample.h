// report_sample.h: fixed synthetic diagnoses for the report tests (goldens, escaping, browser).
#pragma once

#include <cmath>
#include <string>

#include "ft/profiler/diagnosis.h"

namespace ft::testing {

// A 12-step data-bound run with two findings, a loss spike, a NaN-free curve and a memory
// timeline. Every number is a closed-form function of the step, so the goldens are stable.
inline profiler::Diagnosis sample_diagnosis(int num_steps = 12) {
  using profiler::WaitClass;
  profiler::Diagnosis d;
  d.source = "ft-train run (synthetic sample)";
  d.warnings = {"2 spans have a negative duration (first: 'aten::mul_')"};
  double t = 0;
  std::array<double, profiler::kNumWaitClasses> class_ms{};
  double total = 0;
  for (int i = 0; i < num_steps; ++i) {
    profiler::StepBreakdown s;
    s.step = i;
    s.start_ms = t;
    s.ms[int(WaitClass::kCompute)] = 80.0 + 0.5 * (i % 3);
    s.ms[int(WaitClass::kData)] = 30.0 + 2.0 * (i % 4) + (i == 7 ? 40.0 : 0.0);
    s.ms[int(WaitClass::kPcie)] = 0.0;
    s.ms[int(WaitClass::kComm)] = 1.25;
    s.ms[int(WaitClass::kMemory)] = i == 0 ? 12.5 : 0.75;
    s.ms[int(WaitClass::kHost)] = 2.0;
    s.ms[int(WaitClass::kSync)] = 0.125;
    s.ms[int(WaitClass::kOther)] = 0.375;
    for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
      s.wall_ms += s.ms[c];
      class_ms[c] += s.ms[c];
    }
    total += s.wall_ms;
    s.detail["loader.wait"] = s.ms[int(WaitClass::kData)] * 0.75;
    s.detail["page_faults_ms"] = s.ms[int(WaitClass::kMemory)];
    s.loss = 5.5 * std::exp(-0.08 * i) + (i == 5 ? 1.5 : 0.0);
    s.lr = 6e-4 * std::min(1.0, (i + 1) / 4.0);
    s.grad_norm = 1.0 + 0.1 * i;
    s.mem_allocated = (200.0 + 4.0 * (i % 2)) * 1024 * 1024;
    s.mem_reserved = 256.0 * 1024 * 1024;
    s.tokens_per_s = 4096.0 / (s.wall_ms / 1000.0);
    d.memory_timeline.emplace_back(t, 64.0 * 1024 * 1024);
    d.memory_timeline.emplace_back(t + s.wall_ms / 2, s.mem_allocated);
    t += s.wall_ms;
    d.steps.push_back(s);
  }
  for (int c = 0; c < profiler::kNumWaitClasses; ++c) d.totals[c] = class_ms[c] / total;
  d.mfu = 0.3125;
  d.tokens_per_s = 4096.0 * num_steps / (total / 1000.0);

  profiler::Finding data;
  data.cls = "data";
  data.share = d.totals[int(WaitClass::kData)];
  data.severity = profiler::Severity::kCritical;
  data.title = "Training waits for the data loader (loader_wait | preprocessing)";
  data.explanation =
      "The training thread waits for batches: the loader does its *tokenising* in-line. "
      "More loader workers prepare batches while the step computes.";
  data.evidence.steps = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  data.evidence.share = data.share;
  data.evidence.examples = {"loader.wait 70.0 ms at step 7 (thread main)",
                            "data.next [tokenise_batch] 12.0 ms at step 3"};
  data.evidence.detail = "mean data wait 34.3 ms per step; threshold 5% of step (TensorBoard)";
  data.knobs = {"--loader-workers 4", "--prefetch 2"};
  data.predicted_step_ms = 61.25;
  data.prediction = "the loader hands over each batch at once (<enough> workers)";
  d.findings.push_back(data);

  profiler::Finding loss;
  loss.cls = "loss";
  loss.severity = profiler::Severity::kWarning;
  loss.title = "Loss spike at step 5";
  loss.explanation = "The loss jumped above its trend once; warmup is short for this LR.";
  loss.evidence.steps = {5};
  loss.evidence.detail = "spike 1.50 above trend (rule: > 3 x median |diff|)";
  loss.knobs = {"--warmup 20", "--lr 3e-4"};
  d.findings.push_back(loss);

  d.critical_path.computed = d.critical_path.success = true;
  d.critical_path.annotation = "ProfilerStep";
  d.critical_path.instance = 2;
  d.critical_path.step = 3;
  d.critical_path.total_us = 7448;
  d.critical_path.by_type_us = {{"operator", 6000}, {"kernel_launch_delay", 1448}};
  d.critical_path.by_bound_us = {{"cpu_bound", 7448}, {"<gpu & bound>", 0}};

  d.memory.peak = 204.0 * 1024 * 1024;
  d.memory.reserved = 256.0 * 1024 * 1024;
  d.memory.fragmentation = 0.203125;
  d.memory.alloc_retries = 1;
  d.memory.ooms = 0;
  d.memory.page_faults = 5120;
  d.loss_health.spikes = 1;
  d.loss_health.oscillation = 0.4375;
  d.loss_health.verdict = "spiky";
  d.config = {{"--micro-batch", "4"},
              {"--seq-len", "256"},
              {"--loader-workers", "0"},
              {"--precision", "fp32"},
              {"--data", "/data/my_corpus|v2.txt"}};
  d.environment = {{"cpu", "Intel(R) Xeon(R) Processor (2 logical CPUs, AVX-512)"},
                   {"blas", "oneDNN 2.6 (brg:avx512_core)"},
                   {"OPENBLAS_CORETYPE", "Haswell"},
                   {"threads", "2 of 2 cores"},
                   {"ft", "0.1.0"}};
  return d;
}

// The sample as a 2-rank data-parallel run with a straggler (multi-rank reports: per-rank table
// and cross-rank summary); closed-form numbers as above.
inline profiler::Diagnosis sample_ranks_diagnosis() {
  profiler::Diagnosis d = sample_diagnosis(6);
  d.source = "2 ranks (ft-train run (synthetic sample)); steps and totals are rank 0's";
  auto& p = d.parallel;
  p.ranks = 2;
  p.dp = 2;
  p.micro_batches = 1;
  p.collectives = 12;
  p.transfer_ms = 1.58;
  p.sync_ms = 1.26;
  p.straggler = 1;
  p.straggler_late_ms = 2.5;
  p.straggler_late_frac = 0.5;
  p.clock = "one host: every rank reads the same CLOCK_MONOTONIC, no offsets";
  for (int r = 0; r < 2; ++r) {
    profiler::RankBreakdown b;
    b.rank = r;
    b.dp_rank = r;
    b.host = r ? "node<1>" : "node0";
    b.steps = 4;
    b.step_ms = 10.0;
    b.totals = {0.4 + 0.25 * r, 0, 0, r ? 0.158 : 0.41, 0, 0.002 * r, 0, 0.19 - 0.002 * r};
    b.exposed_comm_ms = r ? 1.58 : 4.1;
    b.exposed_wait_ms = r ? 0 : 2.52;
    b.collective_ms = b.exposed_comm_ms;
    b.collective_sync_ms = b.exposed_wait_ms;
    b.collectives = 12;
    b.late = r ? 6 : 0;
    b.late_ms = r ? 2.5 : 0;
    d.ranks.push_back(b);
  }
  profiler::Finding s;
  s.cls = "parallel";
  s.share = 0.252;
  s.severity = profiler::Severity::kCritical;
  s.title = "Straggler: rank 1 arrives late by 2.50 ms at 50% of collectives";
  s.explanation = "A collective completes only when its last rank joins.";
  s.evidence.share = 0.252;
  s.evidence.detail = "rank 1 (host node<1>) reached 6 of 12 comparable collectives last";
  s.knobs = {"check rank 1's host (node<1>) for other load"};
  d.findings.insert(d.findings.begin(), s);
  return d;
}

// The sample with hostile names in every place a trace or the command line can reach.
inline profiler::Diagnosis hostile_diagnosis(int num_steps = 6) {
  profiler::Diagnosis d = sample_diagnosis(num_steps);
  const std::string xss = "<script>alert(1)</script>";
  const std::string img = "\"><img src=x onerror=alert(1)>";
  d.source = xss + " & " + img;
  auto& f = d.findings[0];
  f.title = "span " + xss;
  f.cls = img;
  f.explanation = "kernel " + img + " </script><script>alert(2)</script>";
  f.evidence.examples = {xss + " 12.0 ms at step 3", img, "line\u2028separator\u2029end"};
  f.evidence.detail = "</SCRIPT><svg onload=alert(3)>";
  f.knobs = {"--data '" + xss + "'", "`--x`"};
  d.steps[2].detail[xss] = 1.0;
  d.config["--data"] = img;
  d.environment[xss] = img;
  d.loss_health.verdict = "<b>bold</b>";
  d.warnings = {"1 spans have a negative duration (first: '" + xss + "')"};
  // A timeline whose lane and span names are hostile too.
  d.timeline.steps = {2, 3};
  d.timeline.start_ms = d.steps[2].start_ms;
  d.timeline.end_ms = d.steps[3].start_ms + d.steps[3].wall_ms;
  d.timeline.lanes = {"training thread: " + xss, img};
  d.timeline.names = {xss, img};
  d.timeline.spans = {{0, 0, 0, 0, 0.0, 10.0}, {0, 1, 6, 1, 2.0, 3.0}, {1, 0, 0, 1, 5.0, 20.0}};
  return d;
}

}  // namespace ft::testing

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ft::testing {

// Compares `actual` with tests/data/golden/<name>. FT_UPDATE_GOLDEN=1 rewrites the golden instead;
// on a mismatch the actual text is written next to the build tree and the first differing line
// is reported.
inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::filesystem::path golden =
      std::filesystem::path(FT_SOURCE_DIR) / "tests/data/golden" / name;
  const char* update = std::getenv("FT_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(golden, std::ios::binary) << actual;
    std::cout << "updated golden " << golden << "\n";
    return;
  }
  std::ifstream in(golden, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden " << golden << " (create it with FT_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string expected = ss.str();
  if (expected == actual) return;
  const std::filesystem::path out = std::filesystem::path(FT_BINARY_DIR) / (name + ".actual");
  std::ofstream(out, std::ios::binary) << actual;
  std::istringstream a(actual), e(expected);
  std::string la, le;
  int line = 0;
  while (true) {
    ++line;
    const bool ga = static_cast<bool>(std::getline(a, la));
    const bool ge = static_cast<bool>(std::getline(e, le));
    if (!ga && !ge) break;
    if (!ga || !ge || la != le) {
      ADD_FAILURE() << name << " differs from the golden at line " << line << ":\n  golden: " << le
                    << "\n  actual: " << la << "\nactual written to " << out
                    << "; if the change is intended rerun with FT_UPDATE_GOLDEN=1";
      return;
    }
  }
  ADD_FAILURE() << name << " differs from the golden (line endings?); actual in " << out;
}

}  // namespace ft::testing
