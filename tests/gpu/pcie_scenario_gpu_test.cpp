// pcie_scenario_gpu_test.cpp: scenario (PCIe) on a GPU: ft-train --device cuda with synchronous
// copies from pageable memory of a large per-batch input, against pinned async copies.
// ft-diagnose must name PCIe as the top finding of the pageable run, with the pinned knob, and
// find no PCIe time in the pinned run, which must also be faster. Skips without a device or
// without the CUDA trainer (ft-train --device).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/trainer/data.h"
#include "gpu_test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ToolRun {
  int status;
  std::string out;
};

// Runs a built ft tool; $FT_BINARY_DIR (set by scripts/device-check.sh for carried binaries)
// overrides the build directory compiled in.
ToolRun run_tool(const std::string& tool, const std::string& args) {
  const char* env = std::getenv("FT_BINARY_DIR");
  const std::string dir = env && *env ? env : FT_BINARY_DIR;
  const std::string cmd = dir + "/" + tool + " " + args + " 2>&1";
  ToolRun r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("ft_pcie_" + name + "_" + std::to_string(::getpid()));
}

// Random byte-level tokens: the model's quality is irrelevant, its cost is not.
fs::path shard() {
  const fs::path p = scratch("data") += ".bin";
  std::vector<int32_t> tokens(1 << 21);
  uint64_t x = 88172645463325252ull;
  for (int32_t& t : tokens) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<int32_t>(x % 256);
  }
  ft::trainer::data::write_llmc_shard(p, tokens);
  return p;
}

json diagnose(const std::string& name, const std::string& flags) {
  const fs::path d = scratch(name);
  fs::remove_all(d);
  const auto r = run_tool("ft-diagnose", "run --out " + d.string() + flags);
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.status != 0) return json::object();
  return json::parse(ft::read_file(d / "report.json"));
}

double mean_step_ms(const json& r, size_t skip = 2) {
  double sum = 0;
  size_t n = 0;
  for (size_t i = skip; i < r.at("steps").size(); ++i, ++n)
    sum += r["steps"][i]["wall_ms"].get<double>();
  return n ? sum / n : 0;
}

bool has_knob(const json& f, const std::string& knob) {
  for (const auto& k : f.at("knobs")) {
    if (k.get<std::string>() == knob) return true;
  }
  return false;
}

TEST(PcieScenario, PageableCopiesAreDiagnosedAsPcieAndPinnedFixesThem) {
  FT_REQUIRE_GPU();
  const auto help = run_tool("ft-train", "--help");
  if (help.out.find("--device") == std::string::npos) {
    GTEST_SKIP() << "ft-train has no --device: the CUDA trainer is not built in";
  }
  // ~0.5 TFLOP per micro-batch (a few ms on an H200) against a 64 MiB side input per batch:
  // pinned, the copy (~2 ms at ~30 GB/s) hides under compute; pageable, it runs alone at a
  // fraction of that bandwidth after the host drained the stream.
  const std::string model =
      " --device cuda --layers 6 --heads 6 --channels 384 --vocab 256 --seq-len 512"
      " --micro-batch 16 --grad-accum 2 --steps 8 --precision bf16 --loader-workers 2"
      " --h2d-payload-mb 64 --data " +
      shard().string();
  const json slow = diagnose("pageable", model + " --h2d pageable");
  const json fast = diagnose("pinned", model + " --h2d pinned");
  ASSERT_FALSE(slow.empty());
  ASSERT_FALSE(fast.empty());
  ASSERT_FALSE(slow.at("findings").empty()) << slow.dump(1);
  const json& top = slow.at("findings").at(0);
  EXPECT_EQ(top.at("class"), "pcie") << slow.at("findings").dump(1);
  EXPECT_GT(top.at("share").get<double>(), 0.10);
  EXPECT_TRUE(has_knob(top, "--h2d pinned")) << top.dump(1);
  double pinned_pcie = 0;
  for (const auto& f : fast.at("findings")) {
    if (f.at("class") == "pcie") pinned_pcie = std::max(pinned_pcie, f.at("share").get<double>());
  }
  EXPECT_EQ(pinned_pcie, 0.0) << fast.at("findings").dump(1);
  const double slow_ms = mean_step_ms(slow), fast_ms = mean_step_ms(fast);
  EXPECT_LT(fast_ms, 0.9 * slow_ms) << "the pinned async path recovers the copy time";
  // One line for scripts/device-check.sh's table.
  std::printf(
      "PCIE_VERDICT pageable_top=%s pageable_share=%.3f pinned_pcie_share=%.3f "
      "step_ms_pageable=%.2f step_ms_pinned=%.2f\n",
      top.at("class").get<std::string>().c_str(), top.at("share").get<double>(), pinned_pcie,
      slow_ms, fast_ms);
}

}  // namespace
