// trace_diff.cpp: HTA v0.6.1's TraceDiff (trace_diff.h) on HTA-loaded rows (critical_path_rows.h).
#include "ft/profiler/trace_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "critical_path_rows.h"
#include "ft/core/error.h"
#include "kineto_names.h"

namespace ft::profiler {
namespace {

using kineto::CpRow;
using kineto::CpTrace;
using nlohmann::json;

struct Tally {
  int64_t counts = 0, duration = 0;
};

int64_t step_number(const std::string& name) { return kineto::profiler_step_number(name); }

// One side's counts and total durations by name (or short name): the rows of the chosen rank and
// iteration on the chosen device. A CPU row belongs to the ProfilerStep containing its start, a
// GPU row to its launch call's step.
std::map<std::string, Tally> summary(const std::string& path, int64_t rank, int64_t iteration,
                                     const TraceDiffOptions& o, const std::string& label) {
  const std::vector<CpTrace> traces = kineto::load_cp_traces(path, /*align_and_cut=*/false);
  std::set<int64_t> ranks;
  for (const CpTrace& t : traces) ranks.insert(t.rank);
  if (rank < 0) rank = *ranks.begin();
  if (!ranks.count(rank))
    throw ConfigError(fmt::format("trace {} ({}) has no rank {}", label, path, rank));
  const CpTrace* t = nullptr;
  for (const CpTrace& x : traces)
    if (x.rank == rank) t = &x;
  // Iterations: the ProfilerStep#N spans on the CPU.
  std::vector<std::pair<int64_t, const CpRow*>> steps;
  for (const CpRow& r : t->rows)
    if (!r.gpu() && step_number(r.name) >= 0) steps.emplace_back(r.ts, &r);
  std::sort(steps.begin(), steps.end());
  std::set<int64_t> numbers;
  for (const auto& [ts, r] : steps) numbers.insert(step_number(r->name));
  if (numbers.empty())
    throw ConfigError(fmt::format("trace {} ({}) has no iteration", label, path));
  if (iteration < 0) iteration = *numbers.begin();
  if (!numbers.count(iteration))
    throw ConfigError(fmt::format("trace {} ({}) has no iteration {}", label, path, iteration));
  auto cpu_iteration = [&](int64_t ts) -> int64_t {
    for (const auto& [start, r] : steps)
      if (ts >= start && ts < start + r->dur) return step_number(r->name);
    return -1;
  };
  std::map<std::string, Tally> out;
  for (const CpRow& r : t->rows) {
    const bool gpu = r.gpu();
    if ((o.device == "CPU" && gpu) || (o.device == "GPU" && !gpu)) continue;
    int64_t it = -1;
    if (!gpu) {
      it = cpu_iteration(r.ts);
    } else if (r.partner >= 0 && !t->rows[r.partner].gpu()) {
      it = cpu_iteration(t->rows[r.partner].ts);
    }
    if (it != iteration) continue;
    Tally& x = out[o.use_short_name ? hta_short_name(r.name) : r.name];
    ++x.counts;
    x.duration += r.dur;
  }
  return out;
}

}  // namespace

std::string hta_short_name(std::string_view name) {
  const std::string n(name);
  if (kineto::hta_kernel_type(n) == kineto::HtaKernelType::kMemory) return n;
  if (n.find('<') == std::string::npos && n.find('(') == std::string::npos) return n;
  std::string s;
  for (size_t i = 0; i < n.size(); ++i) {  // "->" dropped
    if (n[i] == '-' && i + 1 < n.size() && n[i + 1] == '>') {
      ++i;
      continue;
    }
    s += n[i];
  }
  std::string stack;
  for (const char c : s) {
    if (c == '>' || c == ')') {
      const char open = c == '>' ? '<' : '(';
      while (!stack.empty() && stack.back() != open) stack.pop_back();
      if (!stack.empty()) stack.pop_back();
    } else {
      stack += c;
    }
  }
  const size_t space = stack.rfind(' ');
  return space == std::string::npos ? stack : stack.substr(space + 1);
}

json compare_traces(const std::string& control, const std::string& test,
                    const TraceDiffOptions& o) {
  if (o.device != "CPU" && o.device != "GPU" && o.device != "ALL")
    throw ConfigError("device must be CPU, GPU or ALL, not '" + o.device + "'");
  std::string test_label = o.test_label;
  if (test_label == o.control_label) test_label += "_control_test";  // as HTA renames it
  const auto a = summary(control, o.control_rank, o.control_iteration, o, o.control_label);
  const auto b = summary(test, o.test_rank, o.test_iteration, o, test_label);
  const std::string key = o.use_short_name ? "short_name" : "name";
  std::vector<std::string> names;
  for (const auto& [n, x] : a) names.push_back(n);
  for (const auto& [n, x] : b)
    if (!a.count(n)) names.push_back(n);
  json out;
  out["n_rows"] = names.size();
  out["columns"] = {key,
                    o.control_label + "_counts",
                    o.control_label + "_total_duration",
                    test_label + "_counts",
                    test_label + "_total_duration",
                    "diff_counts",
                    "diff_duration",
                    "counts_change_categories"};
  std::map<std::string, int64_t> categories;
  out["records"] = json::array();
  for (const std::string& n : names) {
    const Tally x = a.count(n) ? a.at(n) : Tally{};
    const Tally y = b.count(n) ? b.at(n) : Tally{};
    const int64_t dc = y.counts - x.counts;
    const std::string cat = dc > 0 ? "+" : dc < 0 ? "-" : "=";
    ++categories[cat];
    json r;
    r[key] = n;
    r[o.control_label + "_counts"] = x.counts;
    r[o.control_label + "_total_duration"] = x.duration;
    r[test_label + "_counts"] = y.counts;
    r[test_label + "_total_duration"] = y.duration;
    r["diff_counts"] = dc;
    r["diff_duration"] = y.duration - x.duration;
    r["counts_change_categories"] = cat;
    out["records"].push_back(std::move(r));
  }
  out["counts_change_categories"] = categories;
  return out;
}

json ops_diff(const std::string& control, const std::string& test, const TraceDiffOptions& o) {
  TraceDiffOptions full = o;
  full.use_short_name = false;
  const json c = compare_traces(control, test, full);
  std::string test_label = o.test_label;
  if (test_label == o.control_label) test_label += "_control_test";
  json out = {{"added", json::array()},
              {"deleted", json::array()},
              {"increased", json::array()},
              {"decreased", json::array()},
              {"unchanged", json::array()}};
  for (const json& r : c["records"]) {
    const int64_t x = r[o.control_label + "_counts"], y = r[test_label + "_counts"];
    const char* kind = x == 0   ? "added"
                       : y == 0 ? "deleted"
                       : y > x  ? "increased"
                       : y < x  ? "decreased"
                                : "unchanged";
    out[kind].push_back(r["name"]);
  }
  return out;
}

}  // namespace ft::profiler
