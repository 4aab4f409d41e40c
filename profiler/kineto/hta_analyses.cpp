// hta_analyses.cpp: HTA's temporal, idle, overlap, kernel-type and launch analyses, per rank.
#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"
#include "hta_counters.h"
#include "hta_frame.h"

namespace ft::profiler {
namespace {

using kineto::HtaFrame;
using kineto::HtaKernelType;
using kineto::HtaRow;
using nlohmann::json;

struct Interval {
  int64_t ts, end;
};

// HTA's merge_kernel_intervals: sort by ts; a new group starts when ts > cummax(previous end).
std::vector<Interval> merge_intervals(std::vector<Interval> v) {
  std::stable_sort(v.begin(), v.end(),
                   [](const Interval& a, const Interval& b) { return a.ts < b.ts; });
  std::vector<Interval> out;
  int64_t cummax = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 0 || v[i].ts > cummax) {
      out.push_back(v[i]);
      cummax = v[i].end;
    } else {
      out.back().end = std::max(out.back().end, v[i].end);
      cummax = std::max(cummax, v[i].end);
    }
  }
  return out;
}

int64_t union_length(const std::vector<Interval>& m) {
  int64_t s = 0;
  for (const auto& i : m) s += i.end - i.ts;
  return s;
}

// pandas/numpy round(x, d): round half to even of x * 10^d.
double round_to(double x, int digits) {
  const double p = std::pow(10.0, digits);
  return std::nearbyint(x * p) / p;
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::vector<Interval> gpu_intervals(const HtaFrame& f, int type /* -1 = all */) {
  std::vector<Interval> v;
  for (const HtaRow& r : f.rows) {
    if (!r.gpu()) continue;
    if (type >= 0 && static_cast<int>(r.type) != type) continue;
    v.push_back({r.ts, r.end()});
  }
  return v;
}

json temporal(const HtaFrame& f) {
  const auto all = merge_intervals(gpu_intervals(f, -1));
  json row;
  row["rank"] = f.rank;
  if (all.empty()) {
    row["idle_time(us)"] = nullptr;
    return row;
  }
  const int64_t kernel_time = all.back().end - all.front().ts;
  const int64_t idle = kernel_time - union_length(all);
  const int64_t compute = union_length(
      merge_intervals(gpu_intervals(f, static_cast<int>(HtaKernelType::kComputation))));
  const int64_t non_compute = kernel_time - compute - idle;
  const double kt = static_cast<double>(kernel_time);
  row["idle_time(us)"] = static_cast<double>(idle);
  row["compute_time(us)"] = static_cast<double>(compute);
  row["non_compute_time(us)"] = static_cast<double>(non_compute);
  row["kernel_time(us)"] = kt;
  row["idle_time_pctg"] = num_or_null(round_to(100.0 * static_cast<double>(idle) / kt, 2));
  row["compute_time_pctg"] = num_or_null(round_to(100.0 * static_cast<double>(compute) / kt, 2));
  row["non_compute_time_pctg"] =
      num_or_null(round_to(100.0 * static_cast<double>(non_compute) / kt, 2));
  return row;
}

json overlap(const HtaFrame& f) {
  const auto comm =
      merge_intervals(gpu_intervals(f, static_cast<int>(HtaKernelType::kCommunication)));
  const auto comp =
      merge_intervals(gpu_intervals(f, static_cast<int>(HtaKernelType::kComputation)));
  json row;
  row["rank"] = f.rank;
  if (comm.empty()) {
    row["comp_comm_overlap_pctg"] = nullptr;
    return row;
  }
  std::vector<std::pair<int64_t, int>> ev;
  for (const auto& i : comm) ev.insert(ev.end(), {{i.ts, 1}, {i.end, -1}});
  for (const auto& i : comp) ev.insert(ev.end(), {{i.ts, 2}, {i.end, -2}});
  std::stable_sort(ev.begin(), ev.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  int run = 0;
  int64_t ov = 0;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    run += ev[i].second;
    if (run == 3) ov += ev[i + 1].first - ev[i].first;
  }
  row["comp_comm_overlap_pctg"] =
      round_to(100.0 * static_cast<double>(ov) / static_cast<double>(union_length(comm)), 2);
  return row;
}

// Kernel-type time: a sweep over the per-type unions with bit 1 << i per type in HTA's order.
void kernel_type_time(const HtaFrame& f, std::map<std::string, int64_t>* sums) {
  static const HtaKernelType kOrder[3] = {HtaKernelType::kComputation,
                                          HtaKernelType::kCommunication, HtaKernelType::kMemory};
  std::vector<std::pair<int64_t, int>> ev;
  for (int i = 0; i < 3; ++i) {
    const auto m = merge_intervals(gpu_intervals(f, static_cast<int>(kOrder[i])));
    // HTA melts each type's (ts, end) table: all starts, then all ends, then sorts by time.
    for (const auto& iv : m) ev.push_back({iv.ts, 1 << i});
    for (const auto& iv : m) ev.push_back({iv.end, -(1 << i)});
  }
  std::stable_sort(ev.begin(), ev.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  int run = 0;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    run += ev[i].second;
    if (run <= 0) continue;
    std::string name;
    for (int b = 0; b < 3; ++b) {
      if (run & (1 << b)) {
        if (!name.empty()) name += " overlapping ";
        name += kineto::hta_kernel_type_name(kOrder[b]);
      }
    }
    (*sums)[name] += ev[i + 1].first - ev[i].first;
  }
}

// pandas' describe() of one idle category's intervals, rounded to 2 decimals as HTA rounds the
// table: count, mean, std (sample), min, quartiles, max; null statistics for no interval (the
// first kernel's, which has none).
json describe(std::vector<int64_t> v) {
  json d;
  d["count"] = static_cast<double>(v.size());
  if (v.empty()) {
    for (const char* k : {"mean", "std", "min", "25%", "50%", "75%", "max"}) d[k] = nullptr;
    return d;
  }
  std::sort(v.begin(), v.end());
  double mean = 0;
  for (const int64_t x : v) mean += static_cast<double>(x);
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (const int64_t x : v) ss += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  d["mean"] = round_to(mean, 2);
  d["std"] = v.size() > 1 ? json(round_to(std::sqrt(ss / static_cast<double>(v.size() - 1)), 2))
                          : json(nullptr);
  d["min"] = static_cast<double>(v.front());
  d["25%"] = round_to(kineto::pandas_quantile(v, 0.25), 2);
  d["50%"] = round_to(kineto::pandas_quantile(v, 0.5), 2);
  d["75%"] = round_to(kineto::pandas_quantile(v, 0.75), 2);
  d["max"] = static_cast<double>(v.back());
  return d;
}

// HTA's get_idle_time_breakdown per stream; with `stats`, its show_idle_interval_stats table.
json idle_breakdown(const HtaFrame& f, const HtaOptions& o, json* stats = nullptr) {
  const kineto::CorrIndex runtime(f.rows, /*gpu=*/false);  // correlation -> launch call
  std::vector<int64_t> streams;
  std::unordered_set<int64_t> seen;
  for (const HtaRow& r : f.rows) {
    if (r.gpu() && !r.sync && seen.insert(r.stream).second) streams.push_back(r.stream);
  }
  static const char* kNames[3] = {"host_wait", "kernel_wait", "other"};
  json out = json::array();
  for (const int64_t s : streams) {
    std::vector<const HtaRow*> ks;
    for (const HtaRow& r : f.rows) {
      if (r.gpu() && !r.sync && r.stream == s) ks.push_back(&r);
    }
    std::stable_sort(ks.begin(), ks.end(),
                     [](const HtaRow* a, const HtaRow* b) { return a->ts < b->ts; });
    int64_t sum[3] = {0, 0, 0};
    bool present[3] = {false, false, true};  // the first kernel (no gap) falls in "other"
    std::vector<int64_t> gaps[3];
    for (size_t i = 1; i < ks.size(); ++i) {
      const int64_t prev_end = ks[i - 1]->end();
      const int64_t gap = ks[i]->ts - prev_end;
      const auto rt = runtime.find(ks[i]->corr);
      int c;
      if (ks[i]->corr != 0 && rt.first != rt.second && f.rows[rt.first->row].ts > prev_end) {
        c = 0;
      } else if (gap < o.consecutive_kernel_delay_us) {
        c = 1;
      } else {
        c = 2;
      }
      sum[c] += gap;
      present[c] = true;
      gaps[c].push_back(gap);
    }
    const double total = static_cast<double>(sum[0] + sum[1] + sum[2]);
    for (int c = 0; c < 3; ++c) {
      if (!present[c]) continue;
      json row;
      row["rank"] = f.rank;
      row["stream"] = s;
      row["idle_category"] = kNames[c];
      row["idle_time"] = static_cast<double>(sum[c]);
      row["idle_time_ratio"] = num_or_null(round_to(static_cast<double>(sum[c]) / total, 2));
      out.push_back(row);
      if (stats) {  // sorted by category name, as pandas' groupby
        json st = describe(gaps[c]);
        st["rank"] = f.rank;
        st["stream"] = s;
        st["idle_category"] = kNames[c];
        stats->push_back(std::move(st));
      }
    }
  }
  return out;
}

bool is_stats_launch(const std::string& n) {
  return n == "cudaLaunchKernel" || n == "cudaLaunchKernelExC" || n == "cudaMemcpyAsync" ||
         n == "cudaMemsetAsync" || n.rfind("runFunction", 0) == 0;
}

// HTA's get_runtime_launch_events_mask: the runtime's launches and the driver's (cuLaunchKernel,
// cuLaunchKernelEx: Triton and CUDA-graph-free compiled code launch through the driver).
bool is_queue_launch(const std::string& n) {
  return is_stats_launch(n) || n == "cuLaunchKernel" || n == "cuLaunchKernelEx" ||
         n == "hipLaunchKernel" || n == "hipExtModuleLaunchKernel" || n == "hipMemcpyWithStream" ||
         n == "hipMemcpyAsync" || n == "hipMemsetAsync" || n == "hipExtLaunchKernel" ||
         n == "hipModuleLaunchKernel";
}

// Per name id: bit 0 = launch call for the queue length, bit 1 = for launch statistics.
std::vector<uint8_t> launch_kinds(const StringTable& names) {
  std::vector<uint8_t> k(names.size(), 0);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names.at(static_cast<uint32_t>(i));
    k[i] = static_cast<uint8_t>((is_queue_launch(n) ? 1 : 0) | (is_stats_launch(n) ? 2 : 0));
  }
  return k;
}

json launch_stats(const HtaFrame& f, const std::vector<uint8_t>& kinds, const HtaOptions& o) {
  std::vector<uint64_t> corr;  // correlation ids of launch calls (any row with such a name)
  for (const HtaRow& r : f.rows) {
    if (r.corr != 0 && (kinds[r.name] & 2)) corr.push_back(r.corr);
  }
  std::sort(corr.begin(), corr.end());
  const kineto::CorrIndex cpu(f.rows, /*gpu=*/false);
  size_t n = 0, short_k = 0, rt_out = 0, ld_out = 0;
  double cpu_sum = 0, gpu_sum = 0, ld_sum = 0;
  for (const HtaRow& g : f.rows) {
    if (!g.gpu() || g.corr == 0 || !std::binary_search(corr.begin(), corr.end(), g.corr)) continue;
    const auto range = cpu.find(g.corr);
    for (auto it = range.first; it != range.second; ++it) {
      const HtaRow* c = &f.rows[it->row];
      const int64_t ld = std::max<int64_t>(0, g.ts - (c->ts + c->dur));
      ++n;
      cpu_sum += static_cast<double>(c->dur);
      gpu_sum += static_cast<double>(g.dur);
      ld_sum += static_cast<double>(ld);
      if (c->dur <= o.runtime_cutoff_us && g.dur < c->dur) ++short_k;
      if (c->dur > o.runtime_cutoff_us) ++rt_out;
      if (ld > o.launch_delay_cutoff_us) ++ld_out;
    }
  }
  json s;
  s["count"] = n;
  const double dn = static_cast<double>(n);
  s["cpu_duration_mean"] = n ? json(cpu_sum / dn) : json(nullptr);
  s["gpu_duration_mean"] = n ? json(gpu_sum / dn) : json(nullptr);
  s["launch_delay_mean"] = n ? json(ld_sum / dn) : json(nullptr);
  s["n_gpu_shorter_than_cpu_with_cpu_le_50us"] = short_k;
  s["n_runtime_outliers_gt_50us"] = rt_out;
  s["n_launch_delay_outliers_gt_100us"] = ld_out;
  return s;
}

}  // namespace

namespace {

// Analyses of every rank; `release` (may be null) frees a rank's records once its frame is built.
json analyses(const std::vector<KinetoTrace>& ranks, const HtaOptions& options,
              KinetoTrace* release) {
  json out;
  out["ranks"] = json::array();
  out["events_after_load_filter"] = json::object();
  out["temporal_breakdown"] = json::array();
  out["idle_time_breakdown"] = json::array();
  out["idle_interval_stats"] = json::array();
  out["comm_comp_overlap"] = json::array();
  out["queue_length_summary"] = json::object();
  out["queue_length_time_series"] = json::object();
  out["time_blocked_on_full_queue"] = json::array();
  out["memory_bw_time_series"] = json::object();
  out["memory_bw_summary"] = json::array();
  out["cuda_kernel_launch_stats"] = json::object();
  std::map<std::string, int64_t> type_sums;
  std::vector<json> kernels;
  int64_t min_ts = INT64_MAX;  // HTA aligns every rank's ts to the run's first event
  for (size_t ri = 0; ri < ranks.size(); ++ri) {
    const KinetoTrace& t = ranks[ri];
    const HtaFrame f = kineto::make_hta_frame(t, release ? &release[ri] : nullptr);
    const std::vector<uint8_t> kinds = launch_kinds(t.names);
    out["ranks"].push_back(f.rank);
    if (!f.rows.empty() || f.uncorrelated_cpu_rows > 0) min_ts = std::min(min_ts, f.ts_min);
    out["events_after_load_filter"][std::to_string(f.rank)] = f.events_after_load_filter();
    out["temporal_breakdown"].push_back(temporal(f));
    for (auto& row : idle_breakdown(f, options, &out["idle_interval_stats"]))
      out["idle_time_breakdown"].push_back(row);
    out["comm_comp_overlap"].push_back(overlap(f));
    kernel_type_time(f, &type_sums);
    for (HtaKernelType k :
         {HtaKernelType::kComputation, HtaKernelType::kCommunication, HtaKernelType::kMemory}) {
      for (json& row : kineto::kernel_breakdown_rows(f, t.names, k, options))
        kernels.push_back(std::move(row));
    }
    kineto::queue_length_analyses(f, kinds, options.max_queue_length, &out["queue_length_summary"],
                                  options.time_series ? &out["queue_length_time_series"] : nullptr,
                                  &out["time_blocked_on_full_queue"]);
    kineto::memory_bw_analyses(f, t.names,
                               options.time_series ? &out["memory_bw_time_series"] : nullptr,
                               &out["memory_bw_summary"]);
    out["cuda_kernel_launch_stats"][std::to_string(f.rank)] = launch_stats(f, kinds, options);
  }
  std::vector<std::pair<std::string, int64_t>> types(type_sums.begin(), type_sums.end());
  std::stable_sort(types.begin(), types.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  int64_t total = 0;
  for (const auto& [n, s] : types) total += s;
  out["kernel_type_breakdown"] = json::array();
  for (const auto& [n, s] : types) {
    json row;
    row["kernel_type"] = n;
    row["sum"] = s;
    row["percentage"] =
        num_or_null(round_to(100.0 * static_cast<double>(s) / static_cast<double>(total), 1));
    out["kernel_type_breakdown"].push_back(row);
  }
  for (const char* k : {"queue_length_time_series", "memory_bw_time_series"}) {
    for (auto& [rank, cols] : out[k].items()) {
      for (auto& ts : cols["ts"]) ts = ts.get<int64_t>() - min_ts;
    }
  }
  // HTA sorts the kernel table by kernel type, name and rank.
  std::stable_sort(kernels.begin(), kernels.end(), [](const json& a, const json& b) {
    const auto ka = std::tie(a["kernel_type"].get_ref<const std::string&>(),
                             a["name"].get_ref<const std::string&>());
    const auto kb = std::tie(b["kernel_type"].get_ref<const std::string&>(),
                             b["name"].get_ref<const std::string&>());
    if (ka != kb) return ka < kb;
    return a["rank"].get<int>() < b["rank"].get<int>();
  });
  out["kernel_breakdown_rows"] = kernels.size();
  out["kernel_breakdown"] = std::move(kernels);
  return out;
}

}  // namespace

json hta_analyses(const std::vector<KinetoTrace>& ranks, const HtaOptions& options) {
  return analyses(ranks, options, nullptr);
}

json hta_analyses(std::vector<KinetoTrace>&& ranks, const HtaOptions& options) {
  json out = analyses(ranks, options, ranks.data());
  ranks.clear();
  return out;
}

json hta_analyses_of(const std::string& trace_path, const HtaOptions& options) {
  KinetoReadOptions read;
  read.keep_memory = false;
  read.assign_steps = false;
  return hta_analyses(read_kineto_rank_records(trace_path, read), options);
}

std::string hta_entry_key(const std::string& trace_path, const std::string& traces_root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(trace_path), ec);
  if (ec) p = fs::path(trace_path);
  const bool is_dir = fs::is_directory(p, ec);
  if (!is_dir) p = p.parent_path();
  fs::path root;
  if (!traces_root.empty()) {
    root = fs::weakly_canonical(fs::path(traces_root), ec);
  } else if (is_dir) {
    // A directory without a root: the nearest ancestor holding hta_outputs.json is the root.
    for (fs::path a = p.parent_path(); !a.empty() && a != a.parent_path(); a = a.parent_path()) {
      if (fs::exists(a / "hta_outputs.json", ec)) {
        root = a;
        break;
      }
    }
  }
  if (!root.empty()) {
    const fs::path rel = p.lexically_relative(root);
    if (!rel.empty() && rel.native().rfind("..", 0) != 0 && rel != ".") return rel.generic_string();
  }
  return p.filename().string();
}

}  // namespace ft::profiler

namespace ft::profiler::kineto {

double pandas_quantile(const std::vector<int64_t>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return static_cast<double>(sorted[lo]) +
         static_cast<double>(sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace ft::profiler::kineto
