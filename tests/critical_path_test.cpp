// critical_path_test.cpp: HTA critical-path parity on the reference traces, and a hand-made trace
// whose critical path is known by construction.
#include "ft/profiler/critical_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace {

using ft::profiler::CriticalPathOptions;
using nlohmann::json;

const std::string kData = std::string(FT_SOURCE_DIR) + "/tests/data";

const json& reference() {
  static const json ref = [] {
    std::ifstream in(kData + "/hta_critical_path.json");
    return json::parse(in);
  }();
  return ref;
}

CriticalPathOptions options_of(const json& args) {
  CriticalPathOptions o;
  o.rank = args.at("rank").get<int>();
  o.annotation = args.at("annotation").get<std::string>();
  const json& id = args.at("instance_id");
  if (id.is_array()) {
    o.instance_first = id.at(0).get<int64_t>();
    o.instance_last = id.at(1).get<int64_t>();
  } else if (id.is_number()) {
    o.instance_first = o.instance_last = id.get<int64_t>();
  }
  return o;
}

void expect_near_pct(double want, double got, const std::string& what) {
  EXPECT_LE(std::fabs(want - got), std::max(1.0, std::fabs(want) * 0.01)) << what;
}

// Success, totals, per-type breakdown, edge counts by type and the summary, as HTA computed.
void expect_parity(const json& want, const json& got, const std::string& key) {
  ASSERT_EQ(want.at("success"), got.at("success")) << key << ": " << got.dump().substr(0, 300);
  if (!want.at("success").get<bool>()) return;
  expect_near_pct(want.at("cp_total_duration_us").get<double>(),
                  got.at("cp_total_duration_us").get<double>(), key + " total");
  for (const auto& [type, v] : want.at("graph_edges_by_type").items()) {
    ASSERT_TRUE(got.at("graph_edges_by_type").contains(type)) << key << " " << type;
    EXPECT_EQ(v.at("count"), got.at("graph_edges_by_type").at(type).at("count"))
        << key << " edges " << type;
  }
  EXPECT_EQ(want.at("graph_edges_by_type").size(), got.at("graph_edges_by_type").size()) << key;
  for (const auto& [type, v] : want.at("breakdown_by_type").items()) {
    const json& g = got.at("breakdown_by_type");
    const double sum = g.contains(type) ? g.at(type).at("duration_sum").get<double>() : -1;
    expect_near_pct(v.at("duration_sum").get<double>(), sum, key + " breakdown " + type);
  }
  if (!want.contains("summary_records") || !got.contains("summary_records")) return;
  std::map<std::string, double> pct;
  for (const json& r : got.at("summary_records"))
    pct[r.at("bound_by")] = r.at("pct_of_cp_duration");
  for (const json& r : want.at("summary_records")) {
    const std::string b = r.at("bound_by");
    ASSERT_TRUE(pct.count(b)) << key << " summary " << b;
    EXPECT_NEAR(r.at("pct_of_cp_duration").get<double>(), pct[b], 1.0) << key << " summary " << b;
  }
}

TEST(CriticalPathHtaParity, EveryReferenceTrace) {
  const json& cp = reference().at("critical_path");
  ASSERT_FALSE(cp.empty());
  for (const auto& [key, want] : cp.items()) {
    SCOPED_TRACE(key);
    const CriticalPathOptions o = options_of(want.at("args"));
    const json got = ft::profiler::critical_path_analysis(kData + "/hta/" + key, o);
    expect_parity(want, got, key);
  }
}

TEST(CriticalPathHtaParity, ZeroWeightLaunchEdges) {
  const json& cp = reference().at("critical_path");
  for (const auto& [key, want] : cp.items()) {
    if (!want.contains("with_zero_weight_launch_edges")) continue;
    SCOPED_TRACE(key);
    CriticalPathOptions o = options_of(want.at("args"));
    o.add_zero_weight_launch_edges = true;
    const json got = ft::profiler::critical_path_analysis(kData + "/hta/" + key, o);
    expect_parity(want.at("with_zero_weight_launch_edges"), got, key + " (zero-weight launch)");
  }
}

// A cpu_op launches a kernel and the thread then waits in cudaDeviceSynchronize: the path runs
// op start -> launch start -> (launch delay) kernel start -> kernel end. The zero-weight sync
// edge to the end of cudaDeviceSynchronize ties, and the first heaviest node (kernel end) wins.
TEST(CriticalPath, LaunchThenDeviceSynchronize) {
  auto span = [](const char* name, const char* cat, int tid, double ts, double dur, json args) {
    return json{{"ph", "X"},  {"name", name}, {"cat", cat}, {"pid", tid == 7 ? 0 : 1},
                {"tid", tid}, {"ts", ts},     {"dur", dur}, {"args", args}};
  };
  const json trace = {
      {"distributedInfo", {{"rank", 0}}},
      {"traceEvents",
       {span("ProfilerStep#1", "user_annotation", 1, 0, 100, json::object()),
        span("aten::add", "cpu_op", 1, 10, 30, json::object()),
        span("cudaLaunchKernel", "cuda_runtime", 1, 15, 10, {{"correlation", 1}}),
        span("add_kernel", "kernel", 7, 30, 50, {{"stream", 7}, {"correlation", 1}}),
        span("cudaDeviceSynchronize", "cuda_runtime", 1, 50, 40, {{"correlation", 2}}),
        span("Context Sync", "cuda_sync", 7, 85, 5, {{"stream", 7}, {"correlation", 2}})}}};
  CriticalPathOptions o;
  const auto r = ft::profiler::critical_path_from_text(trace.dump(), o);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_EQ(r.total_us, 70);
  ASSERT_EQ(r.edges.size(), 3u);
  EXPECT_EQ(r.edges[0].type, "operator");
  EXPECT_EQ(r.edges[0].weight, 5);
  EXPECT_EQ(r.edges[0].bound_by, "cpu_bound");
  EXPECT_EQ(r.edges[0].attributed_name, "aten::add");
  EXPECT_EQ(r.edges[1].type, "kernel_launch_delay");
  EXPECT_EQ(r.edges[1].weight, 15);
  EXPECT_EQ(r.edges[2].type, "operator");
  EXPECT_EQ(r.edges[2].weight, 50);
  EXPECT_EQ(r.edges[2].bound_by, "gpu_compute_bound");
  EXPECT_EQ(r.edges[2].attributed_name, "add_kernel");
  EXPECT_EQ(r.edges[2].dst_ts, 80);
  EXPECT_EQ(r.json.at("graph_edges_by_type").at("sync_dependency").at("count"), 1);
  EXPECT_EQ(r.json.at("breakdown_by_bound_by").at("gpu_kernel_launch_overhead").at("duration_sum"),
            15);
}

TEST(CriticalPath, MissingAnnotationAndInstanceFail) {
  const std::string dir = kData + "/hta/critical_path/cuda_event_sync";
  CriticalPathOptions o;
  o.annotation = "no such annotation";
  EXPECT_FALSE(ft::profiler::critical_path(dir, o).success);
  o.annotation = "ProfilerStep";
  o.instance_first = o.instance_last = 5;
  const auto r = ft::profiler::critical_path(dir, o);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("instance"), std::string::npos);
}

}  // namespace

// HTA's get_gpu_user_annotation_breakdown on ns_resolution_trace, with GPU annotations (the
// default) and with CPU ones (use_gpu_annotation=False): every record (name, sum, max, min, mean,
// sample std, rank) in HTA's order; ft-hta's one-parse entry point gives the same.
TEST(AnnotationBreakdownHtaParity, GpuAndCpuAnnotations) {
  const json& ref = reference().at("gpu_user_annotation_breakdown");
  const std::string trace = kData + "/hta/ns_resolution_trace";
  const json both = ft::profiler::hta_json_analyses(trace, CriticalPathOptions{});
  ASSERT_EQ(both.at("gpu_user_annotation_breakdown").size(), 2u);
  for (const bool gpu : {true, false}) {
    SCOPED_TRACE(gpu ? "gpu_user_annotation" : "user_annotation");
    const json& want =
        ref.at(gpu ? "ns_resolution_trace" : "ns_resolution_trace_cpu_annotations").at("records");
    const json got = ft::profiler::gpu_user_annotation_breakdown(trace, gpu);
    EXPECT_EQ(got.at("args").at("use_gpu_annotation"), gpu);
    EXPECT_EQ(got, both.at("gpu_user_annotation_breakdown").at(gpu ? 0 : 1));
    ASSERT_EQ(want.size(), got.at("records").size()) << got.dump().substr(0, 400);
    for (size_t i = 0; i < want.size(); ++i) {
      const json& w = want[i];
      const json& g = got.at("records")[i];
      EXPECT_EQ(w.at("name"), g.at("name")) << i;
      EXPECT_EQ(w.at("rank"), g.at("rank")) << i;
      for (const char* k : {"sum (us)", "max (us)", "min (us)"})
        EXPECT_EQ(w.at(k).get<int64_t>(), g.at(k).get<int64_t>()) << w.at("name") << " " << k;
      for (const char* k : {"mean (us)", "stddev"})
        EXPECT_NEAR(w.at(k).get<double>(), g.at(k).get<double>(),
                    1e-9 * std::max(1.0, std::fabs(w.at(k).get<double>())))
            << w.at("name") << " " << k;
    }
  }
}

// A trace without the category: HTA returns None, ft null records.
TEST(AnnotationBreakdownHtaParity, AbsentCategoryIsNull) {
  const json got =
      ft::profiler::gpu_user_annotation_breakdown(kData + "/hta/critical_path/alexnet", true);
  EXPECT_TRUE(got.at("records").is_null()) << got.dump().substr(0, 300);
}

// HTA's get_frequent_cuda_kernel_sequences(operator_name='aten::linear', rank=3) on
// trace_diff/control: the one pattern (aten::linear, then its three kernels by start), its count
// and its summed GPU kernel and CPU op durations, exactly.
TEST(KernelSequencesHtaParity, TraceDiffControl) {
  const json& want =
      reference().at("frequent_cuda_kernel_sequences").at("trace_diff/control").at("records");
  const json got =
      ft::profiler::hta_json_analyses(kData + "/hta/trace_diff/control", CriticalPathOptions{})
          .at("frequent_cuda_kernel_sequences");
  ASSERT_EQ(got.at("ranks").size(), 1u);
  const json& rank3 = got.at("ranks").at("3");
  ASSERT_EQ(want.size(), rank3.size());
  for (size_t i = 0; i < want.size(); ++i) {
    for (const char* k : {"pattern", "count", "GPU kernel duration (us)", "CPU op duration (us)"})
      EXPECT_EQ(want[i].at(k), rank3[i].at(k)) << k;
  }
}

// A trace built so the answer is known, with a sub-µs span HTA's call stack raises on
// ("Unexpected case"; it does so on ns_resolution_trace and nccl_parser_config): the span is an
// instant. Three "blk" ops, two launching k1, k2, k3 and one launching k1, k3, k3, nested under
// a "model" span; a zero-length and a sub-µs span at one instant beside them.
TEST(KernelSequences, ByConstructionWithASubMicrosecondSpan) {
  std::string ev;
  int corr = 0;
  auto add = [&](const std::string& e) { ev += (ev.empty() ? "" : ",") + e; };
  auto span = [&](const std::string& cat, const std::string& name, int tid, double ts, double dur,
                  const std::string& args) {
    add("{\"ph\":\"X\",\"cat\":\"" + cat + "\",\"name\":\"" + name +
        "\",\"pid\":1,\"tid\":" + std::to_string(tid) + ",\"ts\":" + std::to_string(ts) +
        ",\"dur\":" + std::to_string(dur) + ",\"args\":" + args + "}");
  };
  span("cpu_op", "model", 1, 0, 1000, "{}");
  const std::vector<std::vector<std::string>> blocks = {
      {"k1", "k2", "k3"}, {"k1", "k2", "k3"}, {"k1", "k3", "k3"}};
  for (size_t b = 0; b < blocks.size(); ++b) {
    const double t0 = 10 + 300.0 * b;
    span("cpu_op", "blk", 1, t0, 100, "{}");
    for (size_t k = 0; k < 3; ++k) {
      const std::string c = "{\"correlation\":" + std::to_string(++corr) + "}";
      span("cuda_runtime", "cudaLaunchKernel", 1, t0 + 10 + 20 * k, 5, c);
      span("kernel", blocks[b][k], 7, t0 + 200 + 20 * k, 10,
           "{\"stream\":7,\"correlation\":" + std::to_string(corr) + "}");
    }
  }
  span("cpu_op", "zero", 1, 950.0, 0, "{}");
  span("cpu_op", "sub_us", 1, 950.2, 0.5, "{}");  // ceil(950.2) = 951 > floor(950.7): dur -1
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ft_seq_" + std::to_string(::getpid()) + ".json"))
          .string();
  std::ofstream(path) << "{\"traceEvents\":[" + ev + "]}";
  auto sequences = [&](size_t min_len) {
    return ft::profiler::hta_json_analyses(path, CriticalPathOptions{}, {"blk", min_len})
        .at("frequent_cuda_kernel_sequences")
        .at("ranks")
        .at("0");
  };
  const json got = sequences(3);
  const json none = sequences(4);
  std::filesystem::remove(path);
  ASSERT_EQ(got.size(), 2u) << got.dump();
  EXPECT_EQ(got[0].at("pattern"), "blk|k1|k2|k3");
  EXPECT_EQ(got[0].at("count"), 2);
  EXPECT_EQ(got[0].at("GPU kernel duration (us)"), 60);
  EXPECT_EQ(got[0].at("CPU op duration (us)"), 200);
  EXPECT_EQ(got[1].at("pattern"), "blk|k1|k3|k3");
  EXPECT_EQ(got[1].at("count"), 1);
  EXPECT_TRUE(none.empty()) << none.dump();  // no "blk" launches four kernels
}

// HTA's get_cupti_counter_data_with_operators on a range-profiler trace (tests/data/kineto/
// cupti_counters.json; HTA's rows from bench/hta_cupti_counters.py): each kernel's name, ts, dur,
// operator stack, top and bottom operator and every counter, equal. Without range-profiler
// kernels there is nothing; a launch without its kernel is an error, not a wrong pairing.
TEST(CuptiCountersHtaParity, OperatorStacksAndCounters) {
  std::ifstream in(kData + "/hta_cupti_counters.json");
  const json want = json::parse(in);
  const json all =
      ft::profiler::hta_json_analyses(kData + "/kineto/cupti_counters.json", CriticalPathOptions{});
  const json& got = all.at("cupti_counter_data_with_operators").at("ranks").at("0");
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(got.size(), want.size()) << got.dump();
  for (size_t i = 0; i < want.size(); ++i) {
    for (const auto& [k, v] : want[i].items()) {
      ASSERT_TRUE(got[i].contains(k)) << i << " " << k;
      if (v.is_number()) {
        EXPECT_DOUBLE_EQ(v.get<double>(), got[i].at(k).get<double>()) << i << " " << k;
      } else {
        EXPECT_EQ(v, got[i].at(k)) << i << " " << k;
      }
    }
  }
  EXPECT_TRUE(
      ft::profiler::hta_json_analyses(kData + "/hta/critical_path/alexnet", CriticalPathOptions{})
          .at("cupti_counter_data_with_operators")
          .at("ranks")
          .empty());
  std::ifstream src(kData + "/kineto/cupti_counters.json");
  json trace = json::parse(src);
  json launch = trace["traceEvents"][0];
  launch["cat"] = "cuda_runtime";
  launch["name"] = "cudaLaunchKernel";
  trace["traceEvents"].push_back(launch);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ft_cupti_" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::ofstream(path) << trace.dump();
  const json bad = ft::profiler::hta_json_analyses(path, CriticalPathOptions{})
                       .at("cupti_counter_data_with_operators")
                       .at("ranks")
                       .at("0");
  std::filesystem::remove(path);
  EXPECT_EQ(bad.at("success"), false);
  EXPECT_NE(bad.at("error").get<std::string>().find("5 kernel launches and 4"), std::string::npos)
      << bad.dump();
}

// HTA's get_aten_op_kernels_and_delay (tests/data/hta_aten_op_delay.json, from
// bench/hta_aten_op_delay.py running HTA): every (ATen op, kernel sequence) row with its count
// and mean delays, equal, on alexnet (10 rows), ns_resolution_trace (64) and trace_diff/control
// (153). On amd_trace HTA raises (no CUDA launch to group: KeyError); ft answers with no rows.
TEST(AtenOpDelayHtaParity, EveryRow) {
  std::ifstream in(kData + "/hta_aten_op_delay.json");
  const json ref = json::parse(in);
  ASSERT_EQ(ref.size(), 4u);
  for (const auto& [key, want] : ref.items()) {
    SCOPED_TRACE(key);
    const json got = ft::profiler::hta_json_analyses(kData + "/hta/" + key, CriticalPathOptions{})
                         .at("aten_op_kernels_and_delay")
                         .at("ranks");
    if (want.contains("error")) {
      for (const auto& [rank, rows] : got.items()) EXPECT_TRUE(rows.empty()) << rank;
      continue;
    }
    for (const auto& [rank, rows] : want.items()) {
      const json& g = got.at(rank);
      ASSERT_EQ(rows.size(), g.size()) << rank;
      std::map<std::pair<std::string, std::string>, const json*> by;
      for (const json& r : g) by[{r.at("aten_op_name"), r.at("kernel_sequence")}] = &r;
      for (const json& w : rows) {
        const auto it = by.find({w.at("aten_op_name"), w.at("kernel_sequence")});
        ASSERT_NE(it, by.end()) << w.dump().substr(0, 300);
        for (const char* k : {"occurrence_count", "avg_aten_op_launch_delay", "avg_runtime_delay"})
          EXPECT_EQ(w.at(k).get<double>(), it->second->at(k).get<double>()) << k;
      }
    }
  }
}
