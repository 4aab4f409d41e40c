// aten_op_delay.cpp: HTA v0.6.1's get_aten_op_kernels_and_delay on a rank's rows.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "critical_path_rows.h"

namespace ft::profiler::kineto {

using nlohmann::json;

namespace {

// HTA's KERNEL_LAUNCH_CATEGORY_PATTERN, matched at the start of the name:
// (cuda.*LaunchKernel)|(cuLaunchKernel)|(^runFunction).
bool is_kernel_launch(const std::string& n) {
  return (n.rfind("cuda", 0) == 0 && n.find("LaunchKernel", 4) != std::string::npos) ||
         n.rfind("cuLaunchKernel", 0) == 0 || n.rfind("runFunction", 0) == 0;
}

// numpy's round(x, 3): x * 1000 to the nearest integer, halves to even.
double round3(double x) { return std::nearbyint(x * 1000.0) / 1000.0; }

// Over values v[0..n): the last position before `r` whose value is at least `x`, in O(log n)
// (a max segment tree, descended right first). The launches' search for their wrapping ATen op
// walked back over every op that started earlier; a launch no op wraps walked back to the
// trace's start, which made a 10x tile of df_index_resolver take 50 s.
class LastAtLeast {
 public:
  explicit LastAtLeast(const std::vector<int64_t>& v) {
    while (size_ < v.size()) size_ *= 2;
    tree_.assign(2 * size_, std::numeric_limits<int64_t>::min());
    std::copy(v.begin(), v.end(), tree_.begin() + static_cast<std::ptrdiff_t>(size_));
    for (size_t i = size_ - 1; i >= 1; --i) tree_[i] = std::max(tree_[2 * i], tree_[2 * i + 1]);
  }
  // -1 when none.
  int64_t find(size_t r, int64_t x) const { return descend(1, 0, size_, r, x); }

 private:
  int64_t descend(size_t node, size_t lo, size_t hi, size_t r, int64_t x) const {
    if (lo >= r || tree_[node] < x) return -1;
    if (hi - lo == 1) return static_cast<int64_t>(lo);
    const size_t mid = (lo + hi) / 2;
    const int64_t right = descend(2 * node + 1, mid, hi, r, x);
    return right >= 0 ? right : descend(2 * node, lo, mid, r, x);
  }
  size_t size_ = 1;
  std::vector<int64_t> tree_;
};

}  // namespace

json aten_op_kernels_and_delay(const CpTrace& t) {
  const std::vector<CpRow>& rows = t.rows;
  // ATen ops (any row named "aten::..."), by start for the search below.
  std::vector<int64_t> aten;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].name.rfind("aten::", 0) == 0) aten.push_back(static_cast<int64_t>(i));
  std::stable_sort(aten.begin(), aten.end(),
                   [&](int64_t a, int64_t b) { return rows[a].ts < rows[b].ts; });
  // Per launch in trace order: the latest-starting ATen op that wraps it whole, and its kernel.
  struct Launch {
    int64_t delay, runtime_delay;
    std::string kernel;
  };
  std::vector<int64_t> ends(aten.size());
  for (size_t j = 0; j < aten.size(); ++j) ends[j] = rows[aten[j]].end();
  const LastAtLeast wrapping(ends);
  std::map<std::tuple<int64_t, std::string, int64_t>, std::vector<Launch>> by_op;
  for (size_t i = 0; i < rows.size(); ++i) {
    const CpRow& l = rows[i];
    if (l.gpu() || !is_kernel_launch(l.name)) continue;
    const int64_t k = l.partner;
    if (k < 0 || !rows[k].gpu()) continue;  // HTA raises on a launch without its kernel
    // The ops started by the launch's start, the last of them (by start) that ends after it.
    const auto end = std::upper_bound(aten.begin(), aten.end(), l.ts,
                                      [&](int64_t ts, int64_t r) { return ts < rows[r].ts; });
    const int64_t j = wrapping.find(static_cast<size_t>(end - aten.begin()), l.end());
    if (j < 0) continue;
    const CpRow* best = &rows[aten[static_cast<size_t>(j)]];
    by_op[{best->tid, best->name, best->ts}].push_back(
        {l.ts - best->ts, rows[k].ts - l.ts, rows[k].name});
  }
  struct Agg {
    int64_t count = 0;
    double launch_delay = 0, runtime_delay = 0;
  };
  std::map<std::pair<std::string, std::string>, Agg> by_sequence;
  for (const auto& [key, launches] : by_op) {
    std::string seq;
    for (const Launch& l : launches) seq += (seq.empty() ? "" : " -> ") + l.kernel;
    Agg& a = by_sequence[{std::get<1>(key), seq}];
    ++a.count;
    a.launch_delay += static_cast<double>(launches.front().delay);
    a.runtime_delay += static_cast<double>(launches.front().runtime_delay);
  }
  std::vector<std::pair<std::pair<std::string, std::string>, Agg>> sorted(by_sequence.begin(),
                                                                          by_sequence.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
  json out = json::array();
  for (const auto& [key, a] : sorted) {
    const double n = static_cast<double>(a.count);
    out.push_back({{"aten_op_name", key.first},
                   {"kernel_sequence", key.second},
                   {"occurrence_count", a.count},
                   {"avg_aten_op_launch_delay", round3(a.launch_delay / n)},
                   {"avg_runtime_delay", round3(a.runtime_delay / n)}});
  }
  return out;
}

}  // namespace ft::profiler::kineto
