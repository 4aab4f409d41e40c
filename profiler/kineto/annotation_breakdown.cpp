// annotation_breakdown.cpp: HTA v0.6.1's get_gpu_user_annotation_breakdown (its
// BreakdownAnalysis._aggr_gpu_kernel_time over the annotation rows), on HTA-loaded rows.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "critical_path_rows.h"
#include "hta_frame.h"

namespace ft::profiler::kineto {
namespace {

using nlohmann::json;

// pandas' groupby(...).agg(["sum", "max", "min", "mean", "std"]) of one group; std is the sample
// standard deviation, NaN (filled with 0) for a single value.
struct Stats {
  std::string name;
  int64_t sum = 0, max = 0, min = 0;
  double mean = 0, std = 0;
};

Stats stats_of(const std::string& name, const std::vector<int64_t>& v) {
  Stats s;
  s.name = name;
  s.max = *std::max_element(v.begin(), v.end());
  s.min = *std::min_element(v.begin(), v.end());
  s.sum = std::accumulate(v.begin(), v.end(), int64_t{0});
  s.mean = static_cast<double>(s.sum) / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (const int64_t x : v)
      ss += (static_cast<double>(x) - s.mean) * (static_cast<double>(x) - s.mean);
    s.std = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

// _aggr_gpu_kernel_time: per-name statistics, sorted by sum (descending); past `num_kernels`
// names, those past the `duration_ratio` quantile of the running sum or at position >=
// num_kernels become "others", and the statistics are taken again over the per-name sums.
std::vector<Stats> aggregate(const std::vector<const CpRow*>& rows, double duration_ratio,
                             size_t num_kernels) {
  std::map<std::string, std::vector<int64_t>> by_name;
  for (const CpRow* r : rows) by_name[r->name].push_back(r->dur);
  std::vector<Stats> out;
  for (const auto& [name, v] : by_name) out.push_back(stats_of(name, v));
  std::stable_sort(out.begin(), out.end(),
                   [](const Stats& a, const Stats& b) { return a.sum > b.sum; });
  if (out.size() <= num_kernels) return out;
  std::vector<int64_t> cumsum(out.size());
  int64_t run = 0;
  for (size_t i = 0; i < out.size(); ++i) cumsum[i] = run += out[i].sum;
  std::vector<int64_t> sorted = cumsum;  // (descending sums of -1 µs rows can make it fall)
  std::sort(sorted.begin(), sorted.end());
  const double q = pandas_quantile(sorted, duration_ratio);
  std::map<std::string, std::vector<int64_t>> regrouped;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool other = static_cast<double>(cumsum[i]) > q || i >= num_kernels;
    regrouped[other ? "others" : out[i].name].push_back(out[i].sum);
  }
  out.clear();
  for (const auto& [name, v] : regrouped) out.push_back(stats_of(name, v));
  return out;
}

}  // namespace

json user_annotation_breakdown(const std::vector<const CpTrace*>& ranks, bool use_gpu_annotation,
                               double duration_ratio, size_t num_kernels) {
  const std::string cat = use_gpu_annotation ? "gpu_user_annotation" : "user_annotation";
  json out;
  out["args"] = {{"use_gpu_annotation", use_gpu_annotation},
                 {"duration_ratio", duration_ratio},
                 {"num_kernels", num_kernels},
                 {"visualize", false}};
  struct Row {
    int64_t rank;
    Stats s;
  };
  std::vector<Row> all;
  bool present = false;
  for (const CpTrace* t : ranks) {
    std::vector<const CpRow*> rows;
    for (const CpRow& r : t->rows)
      if (r.cat == cat) rows.push_back(&r);
    present |= !rows.empty();
    for (Stats& s : aggregate(rows, duration_ratio, num_kernels)) all.push_back({t->rank, s});
  }
  if (!present) {  // HTA: the category is absent from the trace's symbols: None
    out["records"] = nullptr;
    return out;
  }
  std::stable_sort(all.begin(), all.end(), [](const Row& a, const Row& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.s.name < b.s.name;
  });
  out["records"] = json::array();
  for (const Row& r : all) {
    out["records"].push_back({{"name", r.s.name},
                              {"sum (us)", r.s.sum},
                              {"max (us)", r.s.max},
                              {"min (us)", r.s.min},
                              {"stddev", r.s.std},
                              {"mean (us)", r.s.mean},
                              {"rank", r.rank}});
  }
  return out;
}

}  // namespace ft::profiler::kineto
