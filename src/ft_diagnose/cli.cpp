// cli.cpp: ft-diagnose's usage, argument parsing and printed summary (both binaries).
#include "cli.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "ft/core/error.h"
#include "ft/reports/report.h"

namespace ft::diagnose {

using profiler::Diagnosis;

const char* const kUsage = R"(usage:
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

CliArgs parse_cli(const std::vector<std::string>& args, bool run_mode) {
  CliArgs c;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw ConfigError(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (a == "--out") {
      c.out = value("--out");
    } else if (a == "--hta-json") {
      c.hta_json = value("--hta-json");
    } else if (!run_mode && a == "--critical-path") {
      c.critical_path = true;
    } else if (a == "--profile-steps") {
      c.profile = value("--profile-steps");
    } else if (a == "--fail-if") {
      c.gates.push_back(profiler::parse_gate(value("--fail-if")));
    } else if (a == "--top") {
      const std::string v = value("--top");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || n < 0) throw ConfigError("--top needs a count >= 0");
      c.top = static_cast<size_t>(n);
    } else if (run_mode && a == "--ranks") {
      const std::string v = value("--ranks");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || n < 1 || n > 4096)
        throw ConfigError("--ranks needs a process count >= 1");
      c.ranks = static_cast<int>(n);
    } else if (run_mode) {
      c.rest.push_back(a);
    } else if (c.input.empty() && (a.empty() || a[0] != '-')) {
      c.input = a;
    } else {
      throw ConfigError(fmt::format("unknown argument '{}' (see ft-diagnose --help)", a));
    }
  }
  return c;
}

void print_diagnosis(const Diagnosis& d, size_t top) {
  fmt::print("{} steps analysed; step time: ", d.steps.size());
  for (int i = 0; i < profiler::kNumWaitClasses; ++i) {
    if (d.totals[i] >= 0.0005) {
      fmt::print("{} {:.1f}%  ", profiler::wait_class_name(static_cast<profiler::WaitClass>(i)),
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
    fmt::print("  {}. [{}] {}: {}\n", i + 1, profiler::severity_name(f.severity), f.cls, f.title);
    if (!f.evidence.detail.empty()) fmt::print("     evidence: {}\n", f.evidence.detail);
    std::string knobs;
    for (const auto& k : f.knobs) knobs += (knobs.empty() ? "" : "  ") + k;
    if (!knobs.empty()) fmt::print("     try: {}\n", knobs);
  }
}

// Writes the reports of `d` into `out_dir`, prints the summary and checks the gates.
int finish(const Diagnosis& d, const std::filesystem::path& out_dir,
           const std::vector<profiler::Gate>& gates, size_t top) {
  reports::write_reports(d, out_dir);
  print_diagnosis(d, top);
  fmt::print("wrote {}/report.{{md,html,json}}\n", out_dir.string());
  const auto tripped = profiler::check_gates(d, gates);
  for (const auto& t : tripped) fmt::print(stderr, "ft-diagnose: gate tripped: {}\n", t);
  return tripped.empty() ? 0 : kGateExit;
}

}  // namespace ft::diagnose
