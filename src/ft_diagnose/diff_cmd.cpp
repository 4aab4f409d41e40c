// diff_cmd.cpp: ft-diagnose diff (diff_cmd.h).
#include "diff_cmd.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "ft/core/error.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"
#include "ft/profiler/run_diff.h"
#include "ft/profiler/trace_diff.h"
#include "ft/reports/diff_report.h"

namespace ft::diagnose {
namespace {

namespace fs = std::filesystem;

struct Loaded {
  profiler::Diagnosis d;
  profiler::RunInfo run;
  bool kineto = false;
};

// One side: a PyTorch trace or folder of ranks, an ft run directory (trace.json, or per-rank
// traces), or an ft trace file.
Loaded load(const std::string& input) {
  Loaded l;
  std::error_code ec;
  if (!fs::exists(input, ec)) throw IoError(fmt::format("no run or trace at '{}'", input));
  if (profiler::detect_trace_format(input) == profiler::TraceFormat::kKineto) {
    const std::vector<profiler::Trace> ranks = profiler::load_kineto_ranks(input);
    l.d = profiler::diagnose_trace_ranks(ranks);
    l.run = profiler::RunInfo::from_metadata(ranks.front().metadata);
    l.kineto = true;
    return l;
  }
  fs::path p = input;
  if (fs::is_directory(p, ec) && !fs::exists(p / "trace.json", ec) &&
      !profiler::find_rank_traces(p).empty()) {
    const auto traces = profiler::read_rank_traces(p);
    l.d = profiler::diagnose_ranks(traces);
    l.run = profiler::RunInfo::from_metadata(traces.front().metadata);
    return l;
  }
  if (fs::is_directory(p, ec)) p /= "trace.json";
  const profiler::Trace t = profiler::load_trace(p);
  l.d = profiler::diagnose(t);
  l.run = profiler::RunInfo::from_metadata(t.metadata);
  return l;
}

// HTA's TraceDiff of the two traces' first steps (all operators and kernels, short names), and
// the kernels (full names) only one of them ran.
void add_trace_diff(const std::string& a, const Loaded& la, const std::string& b, const Loaded& lb,
                    profiler::RunDiff* d) {
  // (Labels set in the constructor: GCC 12's -Wrestrict misfires on assigning 1-char literals.)
  profiler::TraceDiffOptions o{std::string("A"), std::string("B")};
  o.use_short_name = true;
  // Each run's first steady step (ProfilerStep#N), else HTA's default, its first step.
  const auto sa = profiler::steady_steps(la.d.steps, la.run);
  const auto sb = profiler::steady_steps(lb.d.steps, lb.run);
  if (!sa.empty() && !sb.empty()) {
    o.control_iteration = sa.front()->step;
    o.test_iteration = sb.front()->step;
  }
  try {
    d->trace_diff = profiler::compare_traces(a, b, o);
    o.device = "GPU";
    o.use_short_name = false;
    const nlohmann::json gpu = profiler::compare_traces(a, b, o);
    for (const auto& r : gpu["records"]) {
      if (r["A_counts"] == 0) d->kernels_appeared.push_back(r["name"]);
      if (r["B_counts"] == 0) d->kernels_vanished.push_back(r["name"]);
    }
  } catch (const std::exception& e) {  // a trace without ProfilerStep, or unreadable by HTA's rules
    d->trace_diff = {{"error", e.what()}};
    return;
  }
  d->trace_diff["iterations"] = {o.control_iteration, o.test_iteration};
}

}  // namespace

int run_diff(const std::vector<std::string>& args, int gate_exit) {
  std::vector<std::string> inputs;
  std::string out;
  double slower_pct = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw ConfigError(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (args[i] == "--out") {
      out = value("--out");
    } else if (args[i] == "--fail-if-slower") {
      const std::string v = value("--fail-if-slower");
      char* end = nullptr;
      slower_pct = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(slower_pct) || slower_pct < 0)
        throw ConfigError(fmt::format("--fail-if-slower '{}': expected a percentage >= 0", v));
    } else if (!args[i].empty() && args[i][0] == '-') {
      throw ConfigError(fmt::format("ft-diagnose diff: unknown option '{}'", args[i]));
    } else {
      inputs.push_back(args[i]);
    }
  }
  if (inputs.size() != 2) throw ConfigError("ft-diagnose diff needs two runs or traces: A B");
  const Loaded a = load(inputs[0]), b = load(inputs[1]);
  profiler::RunDiff d = profiler::diff_runs(a.d, a.run, b.d, b.run);
  if (a.kineto && b.kineto) add_trace_diff(inputs[0], a, inputs[1], b, &d);
  fmt::print("A: {}\nB: {}\n", d.a_source, d.b_source);
  fmt::print(
      "median step: A {:.2f} ms ({} steps), B {:.2f} ms ({} steps); B/A {:.3f} [95% {:.3f}, "
      "{:.3f}]\n",
      d.a.median, d.a.n, d.b.median, d.b.n, d.ratio, d.ratio_lo, d.ratio_hi);
  for (const auto& [k, v] : d.knobs) fmt::print("knob {}: {} -> {}\n", k, v.first, v.second);
  for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
    const double delta = d.b_class_ms[c] - d.a_class_ms[c];
    if (std::abs(delta) >= 0.005)
      fmt::print("  {} {:+.2f} ms/step ({:.2f} -> {:.2f})\n",
                 profiler::wait_class_name(static_cast<profiler::WaitClass>(c)), delta,
                 d.a_class_ms[c], d.b_class_ms[c]);
  }
  for (const std::string& f : d.findings_appeared) fmt::print("finding appeared: {}\n", f);
  for (const std::string& f : d.findings_vanished) fmt::print("finding vanished: {}\n", f);
  if (!out.empty()) {
    reports::write_diff_reports(d, out);
    fmt::print("wrote {}/diff.{{md,html,json}}\n", out);
  }
  if (slower_pct >= 0 && profiler::slower_beyond(d, slower_pct)) {
    fmt::print(stderr, "ft-diagnose: B is slower than A by more than {}% (B/A >= {:.3f})\n",
               slower_pct, d.ratio_lo);
    return gate_exit;
  }
  return 0;
}

}  // namespace ft::diagnose
