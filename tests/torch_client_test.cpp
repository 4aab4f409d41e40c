// torch_client_test.cpp: a real PyTorch client (Debian python3-torch 1.13, legacy autograd trace)
// diagnosed by ft-diagnose: a slow Dataset.__getitem__ must be the top finding, a fast one not.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "ft/profiler/findings.h"
#include "ft/profiler/load_trace.h"

namespace fs = std::filesystem;
using namespace ft::profiler;

namespace {

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, with python3-torch

struct Proc {
  FILE* pipe = nullptr;
  std::string out;
  int status = -1;
};

Proc start(const std::string& cmd) {
  Proc p;
  p.pipe = popen((cmd + " 2>&1").c_str(), "r");
  return p;
}

void finish(Proc* p) {
  if (!p->pipe) return;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p->pipe)) p->out.append(buf, n);
  const int st = pclose(p->pipe);
  p->pipe = nullptr;
  p->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Proc run(const std::string& cmd) {
  Proc p = start(cmd);
  finish(&p);
  return p;
}

class TorchClient : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ft_torch_client_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const Proc check = run(std::string(kPython) + " -c 'import torch; print(torch.__version__)'");
    torch_ok_ = check.status == 0;
    torch_msg_ = check.out;
    if (!torch_ok_) return;
    const std::string script = std::string(FT_SOURCE_DIR) + "/tests/data/torch_client.py";
    // Both runs at once: each is mostly Python start-up and its own single training thread pair.
    // The fast run's batches are 8x larger: its DataLoader's fixed Python cost per step (0.4 ms
    // under a parallel ctest on 2 cores, 6.6% of a batch-32 step) stays well under 5% of it.
    Proc slow = start(std::string(kPython) + " " + script + " " + (dir_ / "slow.json").string() +
                      " --dataset slow");
    Proc fast = start(std::string(kPython) + " " + script + " " + (dir_ / "fast.json").string() +
                      " --dataset fast --batch 256");
    finish(&slow);
    finish(&fast);
    slow_ = slow;
    fast_ = fast;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    ASSERT_TRUE(torch_ok_) << kPython << " cannot import torch (install python3-torch: "
                           << "scripts/deps.sh core):\n"
                           << torch_msg_;
    ASSERT_EQ(slow_.status, 0) << slow_.out;
    ASSERT_EQ(fast_.status, 0) << fast_.out;
  }

  static Proc diagnose_cli(const std::string& name) {
    const fs::path out = dir_ / (name + "_report");
    return run(std::string(FT_BINARY_DIR) + "/ft-diagnose " + (dir_ / (name + ".json")).string() +
               " --out " + out.string());
  }

  static inline fs::path dir_;
  static inline bool torch_ok_ = false;
  static inline std::string torch_msg_;
  static inline Proc slow_, fast_;
};

TEST_F(TorchClient, SlowDatasetIsTheTopBottleneck) {
  const Trace t = load_trace(dir_ / "slow.json");
  EXPECT_EQ(t.metadata.at("source_format"), "autograd-legacy");
  const Diagnosis d = diagnose(t);
  ASSERT_GE(d.steps.size(), 10u);
  for (const StepBreakdown& s : d.steps) {
    double sum = 0;
    for (double v : s.ms) sum += v;
    EXPECT_NEAR(sum, s.wall_ms, 1e-6);
  }
  ASSERT_FALSE(d.findings.empty());
  const Finding& top = d.findings[0];
  EXPECT_EQ(top.cls, "data") << top.title;
  EXPECT_GT(top.share, 0.25) << top.title;  // __getitem__ is about half the step unloaded
  EXPECT_NEAR(top.share, d.totals[static_cast<int>(WaitClass::kData)], 1e-9);
  ASSERT_FALSE(top.evidence.examples.empty());
  EXPECT_NE(top.evidence.examples[0].find("enumerate(DataLoader)"), std::string::npos)
      << top.evidence.examples[0];
  // The trace records no core count: the workers named are those that hide the wait (data over
  // the rest of the step, plus one), not a cap of one core. Data over a quarter of the step: 2+.
  ASSERT_FALSE(top.knobs.empty());
  const std::string& knob = top.knobs[0];
  ASSERT_EQ(knob.rfind("DataLoader(num_workers=", 0), 0u) << knob;
  EXPECT_GE(std::stoi(knob.substr(std::string("DataLoader(num_workers=").size())), 2) << knob;
  EXPECT_NE(top.evidence.detail.find("does not record its cores"), std::string::npos)
      << top.evidence.detail;

  const Proc cli = diagnose_cli("slow");
  ASSERT_EQ(cli.status, 0) << cli.out;
  const size_t first = cli.out.find("  1. [");
  ASSERT_NE(first, std::string::npos) << cli.out;
  const std::string line = cli.out.substr(first, cli.out.find('\n', first) - first);
  EXPECT_NE(line.find("data: The training thread waits for data ("), std::string::npos) << line;
  EXPECT_NE(line.find("% of step time)"), std::string::npos) << line;
  EXPECT_TRUE(fs::exists(dir_ / "slow_report" / "report.json"));
}

TEST_F(TorchClient, FastDatasetHasNoDataFinding) {
  const Diagnosis d = diagnose(load_trace(dir_ / "fast.json"));
  ASSERT_GE(d.steps.size(), 10u);
  for (const Finding& f : d.findings) EXPECT_NE(f.cls, "data") << f.title;
  EXPECT_LT(d.totals[static_cast<int>(WaitClass::kData)], 0.05);
  EXPECT_GT(d.totals[static_cast<int>(WaitClass::kCompute)], 0.5);

  const Proc cli = diagnose_cli("fast");
  ASSERT_EQ(cli.status, 0) << cli.out;
  EXPECT_EQ(cli.out.find("waits for data"), std::string::npos) << cli.out;
}

}  // namespace
