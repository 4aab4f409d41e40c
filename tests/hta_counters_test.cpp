// hta_counters_test.cpp: HTA's kernel table, queue-length, memory-bandwidth and memory-timeline
// analyses, against HTA run on the real traces (tests/data/hta_counters.json,
// bench/hta_counters.py), on built inputs and on a trace whose answers are known by construction.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ft/core/error.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kRoot = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "hta";
// Means, deviations and bandwidth sums: relative 1e-9 (summation order differs from numpy's).
constexpr double kRel = 1e-9;

void expect_near(const json& want, const json& got, const std::string& where) {
  if (want.is_string()) {
    EXPECT_EQ(want, got) << where;
    return;
  }
  ASSERT_TRUE(got.is_number()) << where << ": want " << want << ", got " << got;
  const double w = want.get<double>(), g = got.get<double>();
  EXPECT_LE(std::fabs(w - g), kRel * std::max(1.0, std::fabs(w)))
      << where << ": want " << w << ", got " << g;
}

// The digest bench/hta_counters.py keeps of one column of a time series.
void expect_column(const json& want, const json& got, const std::string& where) {
  ASSERT_EQ(want["n"].get<size_t>(), got.size()) << where;
  if (want.contains("counts")) {
    std::map<std::string, size_t> counts;
    for (const json& v : got) ++counts[v.get<std::string>()];
    for (const auto& [name, n] : want["counts"].items()) {
      EXPECT_EQ(n.get<size_t>(), counts[name]) << where << " " << name;
    }
  } else {
    double sum = 0, isum = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      sum += got[i].get<double>();
      isum += static_cast<double>(i) * got[i].get<double>();
    }
    expect_near(want["sum"], sum, where + " sum");
    expect_near(want["isum"], isum, where + " index-weighted sum");
  }
  if (want.contains("values")) {
    for (size_t i = 0; i < got.size(); ++i) {
      expect_near(want["values"][i], got[i], where + "[" + std::to_string(i) + "]");
    }
  }
}

json analyses_of(const std::string& key, int64_t max_queue_length = 1024) {
  ft::profiler::HtaOptions o;
  o.max_queue_length = max_queue_length;
  return ft::profiler::hta_analyses_of((kRoot / key).string(), o);
}

const json& reference() {
  static const json ref = [] {
    std::ifstream in(fs::path(FT_SOURCE_DIR) / "tests/data/hta_counters.json");
    return json::parse(in);
  }();
  return ref;
}

}  // namespace

// Every row and column of HTA's get_gpu_kernel_breakdown(include_memory_kernels=True) table.
TEST(HtaCounters, KernelTableMatchesHta) {
  ASSERT_EQ(reference().size(), 7u);
  for (const auto& [key, want] : reference().items()) {
    SCOPED_TRACE(key);
    const json got = analyses_of(key)["kernel_breakdown"];
    ASSERT_EQ(want["kernel_breakdown"].size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      for (const char* c : {"name", "kernel_type", "rank", "sum (us)", "max (us)", "min (us)",
                            "mean (us)", "stddev"}) {
        expect_near(want["kernel_breakdown"][i][c], got[i][c], std::to_string(i) + " " + c);
      }
    }
  }
}

// HTA's queue-length and memory-bandwidth time series (every point, through the digest), the
// bandwidth summary and the time blocked on a full queue, at CUDA's 1024 and at 4 (which the
// traces reach). HTA keeps one stream per rank for the blocked time (its dict is keyed by rank);
// ft keeps every stream, and HTA's row is ft's last.
TEST(HtaCounters, QueueAndBandwidthMatchHta) {
  for (const auto& [key, want] : reference().items()) {
    SCOPED_TRACE(key);
    const json got = analyses_of(key);
    for (const char* series : {"queue_length_time_series", "memory_bw_time_series"}) {
      ASSERT_EQ(want[series].size(), got[series].size()) << series;
      for (const auto& [rank, cols] : want[series].items()) {
        for (const auto& [col, digest] : cols.items()) {
          expect_column(digest, got[series][rank][col],
                        std::string(series) + " " + rank + " " + col);
        }
      }
    }
    ASSERT_EQ(want["memory_bw_summary"].size(), got["memory_bw_summary"].size());
    for (const json& w : want["memory_bw_summary"]) {
      const json* g = nullptr;
      for (const json& r : got["memory_bw_summary"]) {
        if (r["name"] == w["name/"] && r["rank"].get<double>() == w["rank/"].get<double>()) g = &r;
      }
      ASSERT_NE(g, nullptr) << w.dump();
      for (const char* st : {"count", "mean", "std", "min", "25%", "50%", "75%", "max"}) {
        expect_near(w[std::string("memory_bw_gbps/") + st], (*g)[st], w.dump() + " " + st);
      }
    }
    EXPECT_TRUE(want["time_blocked_on_full_queue"].empty());
    EXPECT_TRUE(got["time_blocked_on_full_queue"].empty()) << got["time_blocked_on_full_queue"];
    const json blocked = analyses_of(key, 4)["time_blocked_on_full_queue"];
    for (const json& w : want["time_blocked_on_full_queue_4"]) {
      ASSERT_FALSE(blocked.empty());
      const json& g = blocked.back();
      for (const char* c : {"rank", "stream", "duration_at_max_queue_length",
                            "relative_duration_at_max_queue_length"}) {
        expect_near(w[c], g[c], c);
      }
    }
  }
}

// A launch queue and two copies whose answers follow from the trace: five launches at 0..4 µs on
// stream 7 whose kernels run back to back from 10 µs for 10 µs each; two HtoD copies of 100 and
// 50 GB/s overlapping for 5 µs.
TEST(HtaCounters, ByConstruction) {
  std::string ev;
  auto add = [&](const std::string& e) { ev += (ev.empty() ? "" : ",\n") + e; };
  for (int i = 0; i < 5; ++i) {
    const int c = 100 + i;
    add(R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":2,"ts":)" +
        std::to_string(i) + R"(,"dur":1,"args":{"correlation":)" + std::to_string(c) + "}}");
    add(R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":)" +
        std::to_string(10 + 10 * i) + R"(,"dur":10,"args":{"stream":7,"correlation":)" +
        std::to_string(c) + "}}");
  }
  add(R"J({"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":2,"ts":5,"dur":1,"args":{"correlation":200}})J");
  add(R"J({"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":8,"ts":60,"dur":10,"args":{"stream":8,"correlation":200,"bytes":1000000,"memory bandwidth (GB/s)":100}})J");
  add(R"J({"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":2,"ts":6,"dur":1,"args":{"correlation":201}})J");
  add(R"J({"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pinned -> Device)","pid":0,"tid":8,"ts":65,"dur":10,"args":{"stream":8,"correlation":201,"bytes":500000,"memory bandwidth (GB/s)":50}})J");
  std::vector<ft::profiler::KinetoTrace> ranks;
  ranks.push_back(ft::profiler::read_kineto_records_from_memory(R"({"traceEvents":[)" + ev + "]}",
                                                                "by_construction"));
  ft::profiler::HtaOptions o;
  o.max_queue_length = 4;
  const json got = ft::profiler::hta_analyses(std::move(ranks), o);
  // Queue on stream 7: +1 at 0,1,2,3,4 (reaching 5 at 4 µs), -1 as each kernel starts (10, 20,
  // ...). It is >= 4 from 3 µs to 20 µs: 17 µs of the trace's 65 µs (HTA: last start - first).
  const json& q = got["queue_length_time_series"]["0"];
  EXPECT_EQ(q["queue_length"], json({1, 2, 3, 4, 5, 4, 3, 2, 1, 0, 1, 2, 1, 0}));
  ASSERT_EQ(got["time_blocked_on_full_queue"].size(), 1u);
  const json& b = got["time_blocked_on_full_queue"][0];
  EXPECT_EQ(b["stream"], 7);
  EXPECT_EQ(b["duration_at_max_queue_length"], 17);
  EXPECT_NEAR(b["relative_duration_at_max_queue_length"].get<double>(), 17.0 / 65.0, 1e-12);
  // Bandwidth: 100 from 60, 150 from 65, 50 from 70, 0 from 75.
  const json& m = got["memory_bw_time_series"]["0"];
  EXPECT_EQ(m["ts"], json({60, 65, 70, 75}));
  EXPECT_EQ(m["memory_bw_gbps"], json({100.0, 150.0, 50.0, 0.0}));
  ASSERT_EQ(got["memory_bw_summary"].size(), 1u);
  EXPECT_EQ(got["memory_bw_summary"][0]["name"], "Memcpy HtoD");
  EXPECT_EQ(got["memory_bw_summary"][0]["count"], 3.0);
  EXPECT_DOUBLE_EQ(got["memory_bw_summary"][0]["mean"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(got["memory_bw_summary"][0]["max"].get<double>(), 150.0);
  // Kernel table: one kernel "k", 5 x 10 µs; and the two copies under MEMORY.
  const json& k = got["kernel_breakdown"];
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0]["kernel_type"], "COMPUTATION");
  EXPECT_EQ(k[0]["sum (us)"], 50.0);
  EXPECT_EQ(k[0]["stddev"], 0.0);
}

// HTA's MemoryAnalysis on a raw PyTorch memory timeline built here (tests/data/kineto/
// memory_timeline.raw.json.gz; HTA's result from bench/hta_memory_timeline.py): every time and
// every category's bytes equal, allocations from before profiling at the first time; the peak is
// the largest total. A malformed file is a FormatError that names the entry.
TEST(HtaMemoryTimeline, MatchesHtaAndRejectsMalformedFiles) {
  const fs::path data = fs::path(FT_SOURCE_DIR) / "tests/data";
  std::ifstream in(data / "hta_memory_timeline.json");
  const json want = json::parse(in);
  const json got =
      ft::profiler::hta_memory_timeline((data / "kineto/memory_timeline.raw.json.gz").string());
  EXPECT_EQ(got["times"], want["times"]);
  EXPECT_EQ(got["sizes"], want["sizes"]);
  ASSERT_EQ(got["categories"].size(), 8u);
  EXPECT_EQ(got["categories"][1], "Optimizer state");
  int64_t peak = 0;
  for (const json& s : want["sizes"]) {
    int64_t total = 0;
    for (const json& b : s) total += b.get<int64_t>();
    peak = std::max(peak, total);
  }
  EXPECT_EQ(got["peak"]["bytes"], peak);
  const fs::path bad = fs::temp_directory_path() / ("ft_memtl_" + std::to_string(::getpid()));
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"[[1, 0, 10, 0], [2, 0, 10, 9]]", "entry 1: category 9 is not 0..7"},
           {"[[1, 0, 10]]", "entry 0: expected [time, action, bytes, category]"},
           {"[[1, 0, 1.5, 0]]", "entry 0: expected an integer"},
           {"{\"traceEvents\": []}", "not a memory timeline"}}) {
    std::ofstream(bad) << text;
    try {
      (void)ft::profiler::hta_memory_timeline(bad.string());
      ADD_FAILURE() << "no error for " << text;
    } catch (const ft::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  fs::remove(bad);
}
