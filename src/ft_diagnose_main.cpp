// ft_diagnose_main.cpp: the ft-diagnose command: profile a run (or re-analyse one), print and write
// the diagnosis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_main.h"
#include "ft/core/error.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"
#include "ft/profiler/trace_reader.h"
#include "ft/profiler/trace_writer.h"
#include "ft/reports/report.h"
#include "ft_diagnose/diff_cmd.h"
#include "ft_diagnose/run_cmd.h"

namespace {

namespace fs = std::filesystem;
using ft::profiler::Diagnosis;

constexpr int kGateExit = 4;  // a --fail-if gate tripped

constexpr const char* kUsage = R"(usage:
  ft-diagnose run --out DIR [--ranks N] [--profile-steps A-B] [--fail-if CLASS>PCT ...]
                  [ft-train options]
      train in-process with profiling; write DIR/trace.json and DIR/report.{md,html,json}.
      --ranks N (N > 1): launch `mpirun -np N ft-train ...` instead; every rank writes
      DIR/trace.rankR.json and DIR/metrics.rankR.jsonl, merged into DIR/trace.merged.json and
      diagnosed across ranks (without --dp/--tp/--pp: --dp N)
  ft-diagnose DIR|TRACE [--out DIR] [--fail-if CLASS>PCT ...] [--top N] [--hta-json FILE]
                        [--critical-path]
      re-analyse DIR/trace.json, or DIR's per-rank traces (NAME.rankR.json), or a trace file;
      PyTorch profiler (Kineto) traces too, a file (.json / .json.gz) or a directory of ranks;
      --hta-json FILE also writes HTA's analyses (all of ft-hta's, with its defaults);
      --critical-path adds HTA's critical path of the first steady step to the reports
  ft-diagnose diff A B [--out DIR] [--fail-if-slower PCT]
      compare two runs or traces (as above): median step with a 95% bootstrap interval on B/A,
      step time by class, knobs and findings that differ, and for PyTorch traces HTA's TraceDiff
      of their first steps; --out writes DIR/diff.{md,html,json}; exit status 4 when B is slower
      than A by more than PCT% beyond the interval
  CLASS: compute data pcie comm memory host sync other (share of step time) or
         precision batch loss environment parallel (findings). Exit status 4 when a gate trips.
  ft-train options: see `ft-train --help` (`ft-diagnose run --help`).
)";

void print_diagnosis(const Diagnosis& d, size_t top) {
  fmt::print("{} steps analysed; step time: ", d.steps.size());
  for (int i = 0; i < ft::profiler::kNumWaitClasses; ++i) {
    if (d.totals[i] >= 0.0005) {
      fmt::print("{} {:.1f}%  ",
                 ft::profiler::wait_class_name(static_cast<ft::profiler::WaitClass>(i)),
                 100 * d.totals[i]);
    }
  }
  const std::string memory = std::isfinite(d.memory.peak)
                                 ? fmt::format("peak memory {:.1f} MiB (reserved {:.1f} MiB)",
                                               d.memory.peak / 1048576, d.memory.reserved / 1048576)
                                 : std::string("peak memory not recorded");
  fmt::print("\nMFU {}  {}  {}  page faults {}  loss {}\n",
             std::isfinite(d.mfu) ? fmt::format("{:.2f}%", 100 * d.mfu) : "unknown",
             std::isfinite(d.tokens_per_s) ? fmt::format("{:.0f} tokens/s", d.tokens_per_s)
                                           : "tokens/s unknown",
             memory, d.memory.page_faults, d.loss_health.verdict);
  if (!d.ranks.empty()) {
    const auto& p = d.parallel;
    fmt::print(
        "{} ranks (dp {} tp {} pp {}): collectives per rank per step: transfer {:.2f} ms, "
        "synchronizing {:.2f} ms{}{}\n",
        p.ranks, p.dp, p.tp, p.pp, p.transfer_ms, p.sync_ms,
        p.straggler >= 0 ? fmt::format("; straggler rank {}", p.straggler) : "",
        p.bubble >= 0 ? fmt::format("; pipeline bubble {:.0f}% (theory {:.0f}%)", 100 * p.bubble,
                                    100 * p.bubble_theory)
                      : "");
    for (const auto& r : d.ranks) {
      fmt::print(
          "  rank {}: step {:.2f} ms, exposed comm {:.2f} ms (waiting {:.2f}), late at {} of "
          "{} collectives{}\n",
          r.rank, r.step_ms, r.exposed_comm_ms, r.exposed_wait_ms, r.late, r.collectives,
          r.bubble >= 0 ? fmt::format(", bubble {:.0f}%", 100 * r.bubble) : "");
    }
  }
  for (const std::string& w : d.warnings) fmt::print("warning: {}\n", w);
  if (d.findings.empty()) {
    fmt::print("no findings\n");
    return;
  }
  fmt::print("top findings:\n");
  for (size_t i = 0; i < d.findings.size() && i < top; ++i) {
    const auto& f = d.findings[i];
    fmt::print("  {}. [{}] {}: {}\n", i + 1, ft::profiler::severity_name(f.severity), f.cls,
               f.title);
    if (!f.evidence.detail.empty()) fmt::print("     evidence: {}\n", f.evidence.detail);
    std::string knobs;
    for (const auto& k : f.knobs) knobs += (knobs.empty() ? "" : "  ") + k;
    if (!knobs.empty()) fmt::print("     try: {}\n", knobs);
  }
}

// Writes the reports of `d` into `out_dir`, prints the summary and checks the gates.
int finish(const Diagnosis& d, const fs::path& out_dir,
           const std::vector<ft::profiler::Gate>& gates, size_t top) {
  ft::reports::write_reports(d, out_dir);
  print_diagnosis(d, top);
  fmt::print("wrote {}/report.{{md,html,json}}\n", out_dir.string());
  const auto tripped = ft::profiler::check_gates(d, gates);
  for (const auto& t : tripped) fmt::print(stderr, "ft-diagnose: gate tripped: {}\n", t);
  return tripped.empty() ? 0 : kGateExit;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print("{}", kUsage);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "diff")
    return ft::diagnose::run_diff(std::vector<std::string>(args.begin() + 1, args.end()),
                                  kGateExit);
  const bool run_mode = args[0] == "run";
  std::string out, profile, input, hta_json;
  bool critical_path = false;
  std::vector<ft::profiler::Gate> gates;
  size_t top = 5;
  int ranks = 1;
  std::vector<std::string> rest;
  for (size_t i = run_mode ? 1 : 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw ft::ConfigError(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (a == "--out") {
      out = value("--out");
    } else if (a == "--hta-json") {
      hta_json = value("--hta-json");
    } else if (!run_mode && a == "--critical-path") {
      critical_path = true;
    } else if (a == "--profile-steps") {
      profile = value("--profile-steps");
    } else if (a == "--fail-if") {
      gates.push_back(ft::profiler::parse_gate(value("--fail-if")));
    } else if (a == "--top") {
      const std::string v = value("--top");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || n < 0) throw ft::ConfigError("--top needs a count >= 0");
      top = static_cast<size_t>(n);
    } else if (run_mode && a == "--ranks") {
      const std::string v = value("--ranks");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || n < 1 || n > 4096)
        throw ft::ConfigError("--ranks needs a process count >= 1");
      ranks = static_cast<int>(n);
    } else if (run_mode) {
      rest.push_back(a);
    } else if (input.empty() && (a.empty() || a[0] != '-')) {
      input = a;
    } else {
      throw ft::ConfigError(fmt::format("unknown argument '{}' (see ft-diagnose --help)", a));
    }
  }
  if (run_mode) {
    if (!hta_json.empty()) throw ft::ConfigError("--hta-json applies to trace re-analysis only");
    ft::diagnose::RunOptions ro;
    ro.profile_steps = profile;
    if (std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
        std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
      // `ft-diagnose run --help`: this command's usage, then every ft-train option it takes.
      fmt::print("{}\n", kUsage);
      ft::profiler::Trace unused;
      ft::diagnose::run_profiled({"--help"}, ro, &unused);
      return 0;
    }
    if (out.empty())
      throw ft::ConfigError("ft-diagnose run needs --out DIR (see ft-diagnose run --help)");
    if (ranks > 1) {
      bool help = false;
      const int rc = ft::diagnose::run_ranks(rest, ro, ranks, out, &help);
      if (help || rc != 0) return rc;
      const auto traces = ft::profiler::read_rank_traces(out);
      const fs::path merged = fs::path(out) / "trace.merged.json";
      const uint64_t bytes =
          ft::profiler::write_trace_json(ft::profiler::merge_rank_traces(traces), merged);
      fmt::print("wrote {} ({} ranks, {} bytes)\n", merged.string(), traces.size(), bytes);
      return finish(ft::profiler::diagnose_ranks(traces), out, gates, top);
    }
    ft::profiler::Trace recorded;
    if (!ft::diagnose::run_profiled(rest, ro, &recorded)) return 0;
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) throw ft::IoError(fmt::format("cannot create '{}': {}", out, ec.message()));
    const fs::path trace_path = fs::path(out) / "trace.json";
    const uint64_t bytes = ft::profiler::write_trace_json(recorded, trace_path);
    // Analyse what was written, so that `ft-diagnose DIR` later gives the same report.
    const ft::profiler::Trace trace = ft::profiler::read_trace_json(trace_path);
    fmt::print("wrote {} ({} events, {} bytes, {} dropped)\n", trace_path.string(),
               trace.events.size(), bytes, trace.dropped_events);
    const int rc = finish(ft::profiler::diagnose(trace), out, gates, top);
    if (const auto it = trace.metadata.find("run.oom"); it != trace.metadata.end()) {
      std::fprintf(stderr, "ft-diagnose: the run stopped: %s (trace and report written)\n",
                   it->second.c_str());
      return 3;  // ft-train's out-of-memory status; the trace and report are written
    }
    return rc;
  }
  if (input.empty()) throw ft::ConfigError("ft-diagnose needs a run directory or a trace file");
  if (!profile.empty()) throw ft::ConfigError("--profile-steps applies to `ft-diagnose run` only");
  fs::path trace_path = input;
  std::error_code ec;
  if (fs::is_directory(trace_path, ec) && !fs::exists(trace_path / "trace.json", ec) &&
      !ft::profiler::find_rank_traces(trace_path).empty()) {
    if (!hta_json.empty() || critical_path)
      throw ft::ConfigError(
          "--hta-json and --critical-path need a PyTorch profiler (Kineto) trace");
    const auto traces = ft::profiler::read_rank_traces(trace_path);
    return finish(ft::profiler::diagnose_ranks(traces), out.empty() ? trace_path : fs::path(out),
                  gates, top);
  }
  const bool kineto =
      ft::profiler::detect_trace_format(input) == ft::profiler::TraceFormat::kKineto;
  if (!kineto && fs::is_directory(trace_path)) trace_path /= "trace.json";
  if (!kineto && !fs::exists(trace_path))
    throw ft::IoError(fmt::format("no trace at '{}'", trace_path.string()));
  if (!hta_json.empty()) {
    if (!kineto) throw ft::ConfigError("--hta-json needs a PyTorch profiler (Kineto) trace");
    ft::profiler::write_hta_json(input, hta_json);
  }
  const fs::path out_dir = !out.empty()                             ? fs::path(out)
                           : kineto && fs::is_directory(trace_path) ? trace_path
                                                                    : trace_path.parent_path();
  // A PyTorch trace, or a folder of its ranks (and their windows): every rank is diagnosed.
  if (critical_path && !kineto)
    throw ft::ConfigError("--critical-path needs a PyTorch profiler (Kineto) trace");
  if (!kineto) {
    return finish(ft::profiler::diagnose(ft::profiler::load_trace(input)),
                  out_dir.empty() ? fs::path(".") : out_dir, gates, top);
  }
  ft::profiler::Diagnosis d;
  int rank = 0;
  {  // the traces are freed before the critical path reads the file again
    const std::vector<ft::profiler::Trace> rank_traces = ft::profiler::load_kineto_ranks(input);
    d = ft::profiler::diagnose_trace_ranks(rank_traces);
    rank = ft::profiler::trace_rank(rank_traces.front());
  }
  if (critical_path) ft::profiler::add_critical_path(input, rank, &d);
  return finish(d, out_dir.empty() ? fs::path(".") : out_dir, gates, top);
}

}  // namespace

int main(int argc, char** argv) {
  return ft::run_command_line("ft-diagnose", [&] { return run(argc, argv); });
}
