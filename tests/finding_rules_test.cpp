// finding_rules_test.cpp: every rule of the diagnosis table, alone: it fires on the input it is
// for, with its class and knob, and stays silent just below its threshold. The table lists each
// rule once and this file tests each one (RuleTable.EveryRuleHasItsTest).
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>

#include "ft/profiler/findings.h"
#include "ft/profiler/loss_health.h"

namespace {
using namespace ft::profiler;

// Rules this file tests; the table must hold exactly these.
const std::set<std::string> kTested = {"data",
                                       "memory_time",
                                       "comm",
                                       "pcie",
                                       "copies",
                                       "straggler",
                                       "sync",
                                       "host",
                                       "other",
                                       "precision",
                                       "tensor_core",
                                       "batch",
                                       "loss",
                                       "blas_coretype",
                                       "onednn_isa",
                                       "threads",
                                       "allocator_unmap",
                                       "reserved_overhang",
                                       "memory_capacity",
                                       "oom"};

// compute, data, pcie, comm, memory, host, sync, other (ms of a 100 ms step)
std::vector<StepBreakdown> steps_of(const std::array<double, kNumWaitClasses>& ms, int n = 4) {
  std::vector<StepBreakdown> out;
  for (int i = 0; i < n; ++i) {
    StepBreakdown s;
    s.step = i;
    s.ms = ms;
    s.wall_ms = std::accumulate(ms.begin(), ms.end(), 0.0);
    s.loss = 3.0;
    out.push_back(s);
  }
  return out;
}

RunInfo quiet_run() {
  RunInfo r;
  r.warmup_excluded = 0;
  r.logical_cpus = 2;
  r.loader_workers = 1;
  r.grad_accum = 1;
  r.micro_batch = 8;
  return r;
}

const LossHealth kHealthy = assess_loss({3, 3, 3, 3});

std::vector<Finding> run_rule(const std::string& name, const std::vector<StepBreakdown>& s,
                              const RunInfo& run = quiet_run(), const Trace& t = Trace{},
                              const LossHealth& loss = kHealthy) {
  return apply_rule(name, t, s, run, loss);
}

TEST(RuleTable, EveryRuleHasItsTest) {
  std::set<std::string> names;
  for (const RuleInfo& r : finding_rules()) {
    EXPECT_TRUE(names.insert(r.name).second) << "listed twice: " << r.name;
    EXPECT_FALSE(std::string(r.cls).empty()) << r.name;
    EXPECT_FALSE(std::string(r.fires_when).empty()) << r.name;
  }
  EXPECT_EQ(names, kTested);
  EXPECT_THROW(run_rule("no_such_rule", steps_of({100, 0, 0, 0, 0, 0, 0, 0})),
               std::invalid_argument);
}

// One time-share rule: fires above its threshold with its class and first knob, silent at it.
void expect_time_rule(const std::string& name, WaitClass c, double threshold,
                      const std::string& knob) {
  SCOPED_TRACE(name);
  std::array<double, kNumWaitClasses> above{}, at{};
  above[static_cast<int>(c)] = 100 * threshold + 5;
  above[0] = 100 - above[static_cast<int>(c)];
  at[static_cast<int>(c)] = 100 * threshold;
  at[0] = 100 - at[static_cast<int>(c)];
  const auto f = run_rule(name, steps_of(above));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, wait_class_name(c));
  EXPECT_NEAR(f[0].share, threshold + 0.05, 1e-9);
  if (!knob.empty()) {
    ASSERT_FALSE(f[0].knobs.empty());
    EXPECT_EQ(f[0].knobs[0].rfind(knob, 0), 0u) << f[0].knobs[0];
  }
  EXPECT_TRUE(run_rule(name, steps_of(at)).empty());
}

TEST(Rule, Data) { expect_time_rule("data", WaitClass::kData, 0.05, "--loader-workers"); }
TEST(Rule, MemoryTime) {
  expect_time_rule("memory_time", WaitClass::kMemory, 0.05, "--allocator-caching true");
  // A run on 4 KiB pages without caching: caching first (no faults at all), then huge pages
  // (512x fewer faults); with caching on, huge pages alone.
  RunInfo run = quiet_run();
  run.allocator_caching = false;
  run.allocator_huge_pages = false;
  const auto steps = steps_of({70, 0, 0, 0, 30, 0, 0, 0});
  auto f = run_rule("memory_time", steps, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs,
            (std::vector<std::string>{"--allocator-caching true", "--allocator-huge-pages true"}));
  EXPECT_NE(f[0].evidence.detail.find("caching off, huge pages off"), std::string::npos)
      << f[0].evidence.detail;
  run.allocator_caching = true;
  f = run_rule("memory_time", steps, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"--allocator-huge-pages true"});
}
TEST(Rule, Comm) { expect_time_rule("comm", WaitClass::kComm, 0.10, "--grad-accum 2"); }
TEST(Rule, Pcie) { expect_time_rule("pcie", WaitClass::kPcie, 0.10, "--prefetch 2"); }
TEST(Rule, Sync) { expect_time_rule("sync", WaitClass::kSync, 0.05, ""); }
TEST(Rule, Host) { expect_time_rule("host", WaitClass::kHost, 0.10, "--micro-batch 16"); }
TEST(Rule, Other) { expect_time_rule("other", WaitClass::kOther, 0.15, ""); }

TEST(Rule, DataOnAPyTorchTraceNamesTheDataLoader) {
  Trace t;
  t.source = "kineto";
  const auto f = run_rule("data", steps_of({70, 30, 0, 0, 0, 0, 0, 0}), quiet_run(), t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs[0].rfind("DataLoader(num_workers=", 0), 0u) << f[0].knobs[0];
}

// On a device's timeline the host finding says what the host did while the device idled: CPU
// operators (CPU-bound) or launch calls (launch-bound).
TEST(Rule, HostOnADeviceTimelineSaysWhatTheHostDid) {
  auto steps = steps_of({70, 0, 0, 0, 0, 30, 0, 0});
  for (auto& s : steps)
    s.detail = {{"device.busy.compute", 70}, {"host.compute", 90}, {"host.host", 10}};
  auto f = run_rule("host", steps);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].explanation.find("CPU-bound"), std::string::npos) << f[0].explanation;
  EXPECT_NE(f[0].evidence.detail.find("CPU operators 90.00 ms/step"), std::string::npos);
  for (auto& s : steps)
    s.detail = {{"device.busy.compute", 70}, {"host.compute", 5}, {"host.host", 60}};
  f = run_rule("host", steps);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].explanation.find("between launches"), std::string::npos) << f[0].explanation;
}

// A PyTorch trace gets the program's own knobs, never ft-train flags; the sync finding names the
// op stack whose read-back drained the device's queue.
TEST(Rule, HostCommAndSyncOnAPyTorchTraceNameTorchKnobs) {
  Trace t;
  t.source = "kineto";
  const auto host = run_rule("host", steps_of({70, 0, 0, 0, 0, 30, 0, 0}), quiet_run(), t);
  ASSERT_EQ(host.size(), 1u);
  EXPECT_EQ(host[0].knobs[0].rfind("torch.compile(mode=\"reduce-overhead\")", 0), 0u);
  const auto comm = run_rule("comm", steps_of({70, 0, 0, 30, 0, 0, 0, 0}), quiet_run(), t);
  ASSERT_EQ(comm.size(), 1u);
  EXPECT_EQ(comm[0].knobs[0].rfind("DistributedDataParallel(bucket_cap_mb=", 0), 0u);
  auto steps = steps_of({70, 0, 0, 0, 0, 0, 30, 0});
  for (auto& s : steps) s.detail["sync.by.## loss ## > aten::item > cudaMemcpyAsync"] = 20;
  const auto sync = run_rule("sync", steps, quiet_run(), t);
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0].knobs[0].rfind("remove .item()", 0), 0u);
  EXPECT_NE(sync[0].evidence.detail.find("most after ## loss ## > aten::item > cudaMemcpyAsync"),
            std::string::npos)
      << sync[0].evidence.detail;
  const auto memory = run_rule("memory_time", steps_of({70, 0, 0, 0, 30, 0, 0, 0}), quiet_run(), t);
  ASSERT_EQ(memory.size(), 1u);
  EXPECT_NE(memory[0].knobs[1].find("expandable_segments"), std::string::npos);
  for (const auto* f : {&host, &comm, &sync, &memory})
    for (const std::string& k : (*f)[0].knobs) EXPECT_NE(k.rfind("--", 0), 0u) << k;
}

TEST(Rule, Copies) {
  Trace t;
  Event e;
  e.track = {1, 1, false};
  e.name = t.names.intern("memcpy");
  e.category = Category::kH2D;
  e.dur_ns = 1000;
  e.bytes = 4096;
  e.flags = kSynchronous | kPinned;  // small synchronous H2D: fine (Nsight)
  e.step = 1;
  t.events.push_back(e);
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_TRUE(run_rule("copies", s, quiet_run(), t).empty());
  t.events[0].flags = kPageable;  // async from pageable: flagged
  auto f = run_rule("copies", s, quiet_run(), t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, "pcie");
  EXPECT_EQ(f[0].severity, Severity::kWarning);
  EXPECT_EQ(f[0].title, "1 asynchronous copies from pageable memory");
  // Outside every step (setup, e.g. the model's weights): said, but as costing no step time.
  t.events[0].step = -1;
  f = run_rule("copies", s, quiet_run(), t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  EXPECT_EQ(f[0].title, "1 asynchronous copies from pageable memory outside the steps (setup)");
  EXPECT_EQ(f[0].evidence.detail, "1 copies outside the steps, 4096 bytes (no step time)");
}

TEST(Rule, Straggler) {
  Trace t;
  t.metadata = {{"run.straggler_rank", "1"}, {"ranks", "2"}, {"run.straggler_wait_ns", "40000000"}};
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});  // 400 ms of steps, 40 ms waited: 10%
  auto f = run_rule("straggler", s, quiet_run(), t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, "parallel");
  EXPECT_NEAR(f[0].share, 0.10, 1e-9);
  EXPECT_NE(f[0].title.find("Rank 1"), std::string::npos) << f[0].title;
  t.metadata["run.straggler_wait_ns"] = "20000000";  // 5%: at comm_share / 2, silent
  EXPECT_TRUE(run_rule("straggler", s, quiet_run(), t).empty());
}

// GPU steps whose fp32 GEMMs run on the SIMT units: at 30% of the step the finding recovers
// 30% x (1 - 1/4); a TF32 kernel does not count; at 9% it is silent.
TEST(Rule, TensorCore) {
  Trace t;
  auto kernel = [&](const char* name, int64_t step, double ms) {
    Event e;
    e.track = {0, 7, true};
    e.name = t.names.intern(name);
    e.category = Category::kCompute;
    e.step = step;
    e.dur_ns = static_cast<int64_t>(ms * 1e6);
    t.events.push_back(e);
  };
  for (int s = 0; s < 4; ++s) {
    kernel("ampere_sgemm_128x64_nn", s, 30);
    kernel("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_cublas", s, 20);
  }
  const auto steps = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  auto f = run_rule("tensor_core", steps, quiet_run(), t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, "precision");
  EXPECT_NEAR(f[0].share, 0.30 * 0.75, 1e-9);
  EXPECT_NE(f[0].knobs[0].find("allow_tf32"), std::string::npos);
  // A Volta GEMM: its tensor cores take fp16 only, so the knob is fp16 autocast.
  for (Event& e : t.events) {
    if (t.names.at(e.name).find("sgemm") != std::string::npos)
      e.name = t.names.intern("volta_sgemm_128x64_nn");
  }
  f = run_rule("tensor_core", steps, quiet_run(), t);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].knobs[0].find("torch.float16"), std::string::npos) << f[0].knobs[0];
  for (Event& e : t.events) {
    if (t.names.at(e.name).find("sgemm") != std::string::npos) e.dur_ns = 9'000'000;
  }
  EXPECT_TRUE(run_rule("tensor_core", steps, quiet_run(), t).empty());
}

TEST(Rule, Precision) {
  RunInfo run = quiet_run();
  run.precision = "fp32";
  auto f = run_rule("precision", steps_of({50, 50, 0, 0, 0, 0, 0, 0}), run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0].share, 0.25, 1e-9);  // 50% compute x (1 - 1/2)
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"--precision bf16"});
  EXPECT_TRUE(run_rule("precision", steps_of({49, 51, 0, 0, 0, 0, 0, 0}), run).empty());
  run.precision = "bf16";
  EXPECT_TRUE(run_rule("precision", steps_of({100, 0, 0, 0, 0, 0, 0, 0}), run).empty());
  // A CPU that only emulates bf16: fp32 compute-bound is not told to use bf16, and a bf16 run
  // is told to use fp32.
  run.gemm_library =
      "oneDNN fp32/fp16, oneDNN 2.6.3 (max ISA avx2) bf16 emulated (fp32 GEMM on bf16 operands)";
  f = run_rule("precision", steps_of({100, 0, 0, 0, 0, 0, 0, 0}), run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"--precision fp32"});
  run.precision = "fp32";
  EXPECT_TRUE(run_rule("precision", steps_of({100, 0, 0, 0, 0, 0, 0, 0}), run).empty());
}

// Only the GEMMs speed up in bf16: the traced GEMM time ("compute.gemm") at the run's measured
// speed-up, else the rule's 2x; all compute when no GEMM span is traced.
TEST(Rule, PrecisionSpeedsUpTheGemmsOnly) {
  RunInfo run = quiet_run();
  run.precision = "fp32";
  auto steps = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  for (StepBreakdown& s : steps) s.detail["compute.gemm"] = 80;
  auto f = run_rule("precision", steps, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0].share, 0.8 * 0.5, 1e-9);  // 80 ms of GEMMs x (1 - 1/2)
  run.gemm_bf16_speedup = 1.6;
  f = run_rule("precision", steps, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0].share, 0.8 * (1 - 1 / 1.6), 1e-9);
  EXPECT_NE(f[0].evidence.detail.find("measured on this run's shapes"), std::string::npos)
      << f[0].evidence.detail;
  f = run_rule("precision", steps_of({100, 0, 0, 0, 0, 0, 0, 0}), run);  // no GEMM spans
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0].share, 1 - 1 / 1.6, 1e-9);
  run.gemm_bf16_speedup = 0.9;  // the run's GEMMs ran slower in bf16: no advice to switch
  EXPECT_TRUE(run_rule("precision", steps, run).empty());
}

// The data finding predicts what its first knob achieves: N workers produce the step's batches
// in work / N beside the rest of the step, so the step becomes max(rest, work / N).
TEST(Rule, DataPredictsTheWorkersThroughput) {
  RunInfo run = quiet_run();
  run.loader_workers = 0;  // in-line: the data time is the production work
  run.threads = 1;
  run.logical_cpus = 2;  // one core to spare: one worker, slower than the rest of the step
  auto f = run_rule("data", steps_of({45, 55, 0, 0, 0, 0, 0, 0}), run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"--loader-workers 1"});  // no queue in-line
  EXPECT_NEAR(f[0].share, 0.45, 1e-9);  // 100 -> max(45, 55 / 1) = 55 ms
  run.logical_cpus = 8;                 // three workers: 55 / 3 < 45, all of the data time
  f = run_rule("data", steps_of({45, 55, 0, 0, 0, 0, 0, 0}), run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"--loader-workers 3"});
  EXPECT_NEAR(f[0].share, 0.55, 1e-9);
  // Two workers already, producing 60 ms of work per step: four of them (twice), whose queue
  // doubles too; they hide the 30 ms wait behind the 70 ms rest.
  run.loader_workers = 2;
  run.prefetch = 4;
  run.data_produce_ms = 60;
  f = run_rule("data", steps_of({70, 30, 0, 0, 0, 0, 0, 0}), run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs, (std::vector<std::string>{"--loader-workers 4", "--prefetch 8"}));
  EXPECT_NEAR(f[0].share, 0.30, 1e-9);
  // The hand-off: 10 ms of production against a 30 ms wait; in-line makes the step 70 + 10.
  run.data_produce_ms = 10;
  f = run_rule("data", steps_of({70, 30, 0, 0, 0, 0, 0, 0}), run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs.at(0), "--loader-workers 0");
  EXPECT_NEAR(f[0].share, 0.20, 1e-9);
}

// The batch rule reads MFU as a fraction of the peak measured on the running machine: no
// machine's absolute figure enters it.
TEST(Rule, Batch) {
  RunInfo run = quiet_run();
  run.micro_batch = 2;
  run.seq_len = 32;
  run.grad_accum = 4;
  run.mfu = 0.2;
  run.mem_peak = 1e6;
  run.memory_capacity = 1e9;
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  auto f = run_rule("batch", s, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, "batch");
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"--micro-batch 4 --grad-accum 2"});
  EXPECT_NEAR(f[0].share, 0.5 * (1 - 0.2 / 0.45), 1e-9);
  run.mfu = 0.45;  // at the bar: silent
  EXPECT_TRUE(run_rule("batch", s, run).empty());
  run.mfu = 0.2;
  run.mem_peak = 0.6e9;  // no 2x headroom
  EXPECT_TRUE(run_rule("batch", s, run).empty());
  run.mem_peak = 1e6;
  run.micro_batch = 32;  // 1024 tokens: filled
  EXPECT_TRUE(run_rule("batch", s, run).empty());
  // The optimizer's part of the compute (60 of 100 ms) does not shrink with the micro-batch.
  run.micro_batch = 2;
  auto with_optimizer = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  for (StepBreakdown& st : with_optimizer) st.detail["compute.optimizer"] = 60;
  f = run_rule("batch", with_optimizer, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0].share, 0.5 * 0.4 * (1 - 0.2 / 0.45), 1e-9);
}

TEST(Rule, Loss) {
  RunInfo run = quiet_run();
  run.lr = 0.01;
  run.warmup = 0;
  run.steps = 40;
  const std::vector<double> diverging = {5.5, 4.0, 3.0, 2.8, 3.5, 4.5, 5.0, 5.6, 5.8, 6.0};
  const auto f =
      run_rule("loss", steps_of({100, 0, 0, 0, 0, 0, 0, 0}), run, Trace{}, assess_loss(diverging));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].knobs.at(0), "--warmup 10");
  EXPECT_TRUE(run_rule("loss", steps_of({100, 0, 0, 0, 0, 0, 0, 0}), run).empty());
}

TEST(Rule, BlasCoretype) {
  RunInfo run = quiet_run();
  run.cpu_vector_bits = 512;
  run.env_vars["OPENBLAS_CORETYPE"] = "Haswell";
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  auto f = run_rule("blas_coretype", s, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, "environment");
  EXPECT_EQ(f[0].knobs, std::vector<std::string>{"OPENBLAS_CORETYPE=SkylakeX"});
  run.cpu_vector_bits = 256;  // Haswell kernels on a 256-bit CPU: fine
  EXPECT_TRUE(run_rule("blas_coretype", s, run).empty());
}

TEST(Rule, OnednnIsa) {
  RunInfo run = quiet_run();
  run.gemm_library = "oneDNN 2.6.3 (max ISA avx2)";
  run.cpu_vector_bits = 512;
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(run_rule("onednn_isa", s, run).size(), 1u);
  run.cpu_vector_bits = 256;
  EXPECT_TRUE(run_rule("onednn_isa", s, run).empty());
}

TEST(Rule, Threads) {
  RunInfo run = quiet_run();
  run.threads = 2;
  run.load_average = 1.0;  // one core busy already
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  auto f = run_rule("threads", s, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs.at(0), "--threads 1");
  run.load_average = 0.0;
  EXPECT_TRUE(run_rule("threads", s, run).empty());
}

TEST(Rule, AllocatorUnmap) {
  RunInfo run = quiet_run();
  run.steps = 10;
  run.segment_unmaps = 10;
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(run_rule("allocator_unmap", s, run).size(), 1u);
  run.segment_unmaps = 9;
  EXPECT_TRUE(run_rule("allocator_unmap", s, run).empty());
}

TEST(Rule, ReservedOverhang) {
  RunInfo run = quiet_run();
  run.mem_peak = 100;
  run.mem_reserved_peak = 200;
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(run_rule("reserved_overhang", s, run).size(), 1u);
  run.mem_reserved_peak = 199;
  EXPECT_TRUE(run_rule("reserved_overhang", s, run).empty());
}

TEST(Rule, MemoryCapacity) {
  RunInfo run = quiet_run();
  run.memory_capacity = 1000;
  run.mem_reserved_peak = 950;
  const auto s = steps_of({100, 0, 0, 0, 0, 0, 0, 0});
  auto f = run_rule("memory_capacity", s, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs.at(0), "--checkpoint block");
  run.mem_reserved_peak = 900;
  EXPECT_TRUE(run_rule("memory_capacity", s, run).empty());
}

// An out-of-memory stop: a critical memory finding with the allocator's message, ranked first
// even above a larger time finding; silent on a run that finished.
TEST(Rule, Oom) {
  RunInfo run = quiet_run();
  const auto s = steps_of({50, 40, 0, 0, 10, 0, 0, 0});
  EXPECT_TRUE(run_rule("oom", s, run).empty());
  run.oom = "out of memory: 'act' requested 1.0 MiB; limit 8.0 MiB, reserved 8.0 MiB";
  run.oom_step = 3;
  run.memory_limit = 8 * 1048576.0;
  auto f = run_rule("oom", s, run);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cls, "memory");
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(f[0].title, "The run ran out of memory at step 3");
  EXPECT_EQ(f[0].evidence.detail, run.oom);
  EXPECT_EQ(f[0].knobs.at(0), "--memory-limit 12M");
  EXPECT_EQ(f[0].knobs.at(1), "--checkpoint block");
  EXPECT_EQ(f[0].knobs.at(2), "--micro-batch 4 --grad-accum 2");
  const auto all = find_issues(Trace{}, s, run, kHealthy, FindingRules{});
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].title, "The run ran out of memory at step 3");
  EXPECT_GT(all.size(), 1u) << "the data finding (40%) is still there, after it";
}

}  // namespace
