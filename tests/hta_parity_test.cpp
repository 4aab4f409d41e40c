// hta_parity_test.cpp: ft's HTA-compatible analyses against HTA v0.6.1's own outputs on every
// trace in tests/data/hta (copied from ../shared/traces/hta) that has an entry in hta_outputs.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "ft/core/atomic_file.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kRoot = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "hta";

// Percentages: within 0.1 percentage points (the issue's tolerance).
constexpr double kPctTolerance = 0.1;
// Means and standard deviations HTA reports unrounded: relative 1e-9 (summation order).
constexpr double kRelTolerance = 1e-9;

void expect_number(const json& want, const json& got, double tol, bool relative,
                   const std::string& where) {
  if (want.is_null()) {
    EXPECT_TRUE(got.is_null()) << where << ": want null, got " << got;
    return;
  }
  ASSERT_TRUE(got.is_number()) << where << ": want " << want << ", got " << got;
  const double w = want.get<double>(), g = got.get<double>();
  const double bound = relative ? tol * std::max(1.0, std::fabs(w)) : tol;
  EXPECT_LE(std::fabs(w - g), bound) << where << ": want " << w << ", got " << g;
}

void expect_exact(const json& want, const json& got, const std::string& where) {
  EXPECT_EQ(want, got) << where;
}

void compare_entry(const std::string& key, const json& want, const json& got) {
  expect_exact(want["ranks"], got["ranks"], key + " ranks");
  expect_exact(want["events_after_load_filter"], got["events_after_load_filter"],
               key + " events_after_load_filter");
  expect_exact(want["kernel_breakdown_rows"], got["kernel_breakdown_rows"],
               key + " kernel_breakdown_rows");

  ASSERT_EQ(want["temporal_breakdown"].size(), got["temporal_breakdown"].size()) << key;
  for (size_t i = 0; i < want["temporal_breakdown"].size(); ++i) {
    const json& w = want["temporal_breakdown"][i];
    const json& g = got["temporal_breakdown"][i];
    for (const char* f :
         {"rank", "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"}) {
      expect_exact(w[f], g[f], key + " temporal_breakdown " + f);
    }
    for (const char* f : {"idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"}) {
      expect_number(w[f], g[f], kPctTolerance, false, key + " temporal_breakdown " + f);
    }
  }

  // Idle time: the same (stream, category) rows in the same order, times exact.
  ASSERT_EQ(want["idle_time_breakdown"].size(), got["idle_time_breakdown"].size()) << key;
  for (size_t i = 0; i < want["idle_time_breakdown"].size(); ++i) {
    const json& w = want["idle_time_breakdown"][i];
    const json& g = got["idle_time_breakdown"][i];
    const std::string where =
        key + " idle stream " + w["stream"].dump() + " " + w["idle_category"].get<std::string>();
    expect_exact(w["rank"], g["rank"], where);
    expect_exact(w["stream"], g["stream"], where);
    expect_exact(w["idle_category"], g["idle_category"], where);
    expect_exact(w["idle_time"], g["idle_time"], where + " idle_time");
    // A ratio (0..1) rounded to 2 decimals: 0.1 percentage points = 0.001.
    expect_number(w["idle_time_ratio"], g["idle_time_ratio"], kPctTolerance / 100, false,
                  where + " ratio");
  }

  ASSERT_EQ(want["comm_comp_overlap"].size(), got["comm_comp_overlap"].size()) << key;
  for (size_t i = 0; i < want["comm_comp_overlap"].size(); ++i) {
    expect_exact(want["comm_comp_overlap"][i]["rank"], got["comm_comp_overlap"][i]["rank"], key);
    expect_number(want["comm_comp_overlap"][i]["comp_comm_overlap_pctg"],
                  got["comm_comp_overlap"][i]["comp_comm_overlap_pctg"], kPctTolerance, false,
                  key + " comp_comm_overlap_pctg");
  }

  // Kernel types: same set with exact sums; HTA orders by sum (ties in any order).
  std::map<std::string, json> want_types, got_types;
  for (const json& r : want["kernel_type_breakdown"]) want_types[r["kernel_type"]] = r;
  for (const json& r : got["kernel_type_breakdown"]) got_types[r["kernel_type"]] = r;
  ASSERT_EQ(want_types.size(), got_types.size()) << key << " kernel types";
  for (const auto& [type, w] : want_types) {
    ASSERT_TRUE(got_types.count(type)) << key << " missing kernel type " << type;
    expect_exact(w["sum"], got_types[type]["sum"], key + " kernel type sum " + type);
    expect_number(w["percentage"], got_types[type]["percentage"], kPctTolerance, false,
                  key + " kernel type percentage " + type);
  }

  // Queue length: counts, min, max and quartiles exact; mean and std to 1e-9 relative.
  ASSERT_EQ(want["queue_length_summary"].size(), got["queue_length_summary"].size()) << key;
  for (const auto& [stream, w] : want["queue_length_summary"].items()) {
    ASSERT_TRUE(got["queue_length_summary"].contains(stream)) << key << " " << stream;
    const json& g = got["queue_length_summary"][stream];
    for (const char* f : {"count", "min", "25%", "50%", "75%", "max"}) {
      expect_exact(w[f], g[f], key + " queue " + stream + " " + f);
    }
    for (const char* f : {"mean", "std"}) {
      expect_number(w[f], g[f], kRelTolerance, true, key + " queue " + stream + " " + f);
    }
  }

  // Launch statistics: counts exact, means to 1e-9 relative.
  ASSERT_EQ(want["cuda_kernel_launch_stats"].size(), got["cuda_kernel_launch_stats"].size());
  for (const auto& [rank, w] : want["cuda_kernel_launch_stats"].items()) {
    ASSERT_TRUE(got["cuda_kernel_launch_stats"].contains(rank)) << key << " rank " << rank;
    const json& g = got["cuda_kernel_launch_stats"][rank];
    for (const char* f : {"count", "n_gpu_shorter_than_cpu_with_cpu_le_50us",
                          "n_runtime_outliers_gt_50us", "n_launch_delay_outliers_gt_100us"}) {
      expect_exact(w[f], g[f], key + " launch " + f);
    }
    for (const char* f : {"cpu_duration_mean", "gpu_duration_mean", "launch_delay_mean"}) {
      expect_number(w[f], g[f], kRelTolerance, true, key + " launch " + f);
    }
  }
}

}  // namespace

TEST(HtaParity, EveryTraceWithAnHtaOutput) {
  ASSERT_TRUE(fs::is_directory(kRoot))
      << "the repository's HTA traces are missing: expected " << kRoot.string();
  const json expected = json::parse(ft::read_file(kRoot / "hta_outputs.json"));
  size_t compared = 0;
  for (const auto& [key, want] : expected.items()) {
    if (key.rfind('_', 0) == 0) continue;  // "_note"
    SCOPED_TRACE(key);
    const fs::path dir = kRoot / key;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    const json got = ft::profiler::hta_analyses_of(dir.string());
    EXPECT_EQ(ft::profiler::hta_entry_key(dir.string(), kRoot.string()), key);
    compare_entry(key, want, got);
    ++compared;
  }
  EXPECT_EQ(compared, 8u);
}

// Launches through the driver (cuLaunchKernel, cuLaunchKernelEx: Triton, compiled code) count for
// the queue length as HTA's get_runtime_launch_events_mask counts them: two launched kernels
// queue up to 2 and drain back to 0 on their stream.
TEST(HtaParity, DriverLaunchesQueueUp) {
  const fs::path dir = fs::temp_directory_path() / ("ft_culaunch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string ev;
  int corr = 10;
  for (const char* call : {"cuLaunchKernel", "cuLaunchKernelEx"}) {
    ++corr;
    const int64_t ts = 100 + 10 * corr;
    ev += std::string(ev.empty() ? "" : ",") + R"({"ph":"X","cat":"cuda_driver","name":")" + call +
          R"(","pid":1,"tid":1,"ts":)" + std::to_string(ts) + R"(,"dur":5,"args":{"correlation":)" +
          std::to_string(corr) + "}}";
    ev += R"(,{"ph":"X","cat":"kernel","name":"triton_poi_fused_add_0","pid":0,"tid":7,"ts":)" +
          std::to_string(ts + 100) + R"(,"dur":50,"args":{"device":0,"stream":7,"correlation":)" +
          std::to_string(corr) + "}}";
  }
  ft::write_file_atomic(dir / "t.json", R"({"schemaVersion":1,"traceEvents":[)" + ev + "]}");
  const json got = ft::profiler::hta_analyses_of((dir / "t.json").string());
  fs::remove_all(dir);
  ASSERT_TRUE(got["queue_length_summary"].contains("rank0_stream7")) << got.dump();
  const json& q = got["queue_length_summary"]["rank0_stream7"];
  EXPECT_EQ(q["count"].get<double>(), 4.0);
  EXPECT_EQ(q["max"].get<double>(), 2.0);
  EXPECT_EQ(q["min"].get<double>(), 0.0);
}

// HTA's kernel types from the name's start: MTIA's job, packet, PE and subgraph executions and
// anything with "dma" in it are not compute; a kernel with "nccl" inside its name (not at the
// start, not ncclKernel) is.
TEST(HtaParity, KernelTypesFollowHtasPatterns) {
  const fs::path dir = fs::temp_directory_path() / ("ft_ktypes_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string ev;
  int64_t ts = 100;
  for (const char* name : {"pe_exe_0", "job_exe_1", "packet_2", "cpum_exe_subgraph_3",
                           "collective_subgraph_execution_4", "my_dma_copy", "fused_nccl_like"}) {
    ev += std::string(ev.empty() ? "" : ",") +
          R"({"ph":"X","cat":"kernel","pid":0,"tid":7,"name":")" + name + R"(","ts":)" +
          std::to_string(ts) + R"(,"dur":10,"args":{"device":0,"stream":7}})";
    ts += 20;
  }
  ft::write_file_atomic(dir / "t.json", R"({"schemaVersion":1,"traceEvents":[)" + ev + "]}");
  const json got = ft::profiler::hta_analyses_of((dir / "t.json").string());
  fs::remove_all(dir);
  std::map<std::string, int64_t> sums;
  for (const json& r : got["kernel_type_breakdown"]) sums[r["kernel_type"]] = r["sum"];
  // Only fused_nccl_like is compute; the others are OTHER, which the breakdown leaves out.
  EXPECT_EQ(sums["COMPUTATION"], 10) << got["kernel_type_breakdown"].dump();
  EXPECT_EQ(sums.size(), 1u) << got["kernel_type_breakdown"].dump();
}

// HTA's get_idle_time_breakdown(show_idle_interval_stats=True): per stream and idle category, the
// count, mean, std, min, quartiles and max of the idle intervals, rounded as HTA rounds them, on
// four traces (tests/data/hta_idle_interval_stats.json, from bench/hta_idle_stats.py running HTA).
TEST(HtaParity, IdleIntervalStats) {
  std::ifstream in(fs::path(FT_SOURCE_DIR) / "tests/data/hta_idle_interval_stats.json");
  ASSERT_TRUE(in.good());
  const json want_all = json::parse(in);
  ASSERT_EQ(want_all.size(), 4u);
  for (const auto& [key, want] : want_all.items()) {
    SCOPED_TRACE(key);
    const json got = ft::profiler::hta_analyses_of((kRoot / key).string())["idle_interval_stats"];
    ASSERT_EQ(got.size(), want.size()) << got.dump();
    std::map<std::pair<int64_t, std::string>, const json*> by;
    for (const json& r : got) by[{r["stream"].get<int64_t>(), r["idle_category"]}] = &r;
    for (const json& w : want) {
      const auto it = by.find({w["stream"].get<int64_t>(), w["idle_category"]});
      ASSERT_NE(it, by.end()) << w.dump();
      for (const char* k : {"count", "mean", "std", "min", "25%", "50%", "75%", "max"}) {
        if (w[k].is_null()) {
          EXPECT_TRUE((*it->second)[k].is_null()) << w.dump() << " " << k;
        } else {
          EXPECT_NEAR(w[k].get<double>(), (*it->second)[k].get<double>(),
                      1e-9 * std::max(1.0, std::fabs(w[k].get<double>())))
              << w.dump() << " " << k;
        }
      }
    }
  }
}
