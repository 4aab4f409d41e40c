// spec_trial.cpp: one trial of any training program (spec.h): run, read its metrics and trace.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ft/core/error.h"
#include "ft/profiler/diagnosis_json.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"
#include "ft/tuner/spec.h"

namespace fs = std::filesystem;

namespace ft::tuner {
namespace {

// Whether a failed program's log says it ran out of memory (PyTorch's "CUDA out of memory" /
// OutOfMemoryError, Python's MemoryError, ft-train's "out of memory").
bool log_says_oom(const fs::path& log) {
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("out of memory") != std::string::npos ||
        line.find("OutOfMemoryError") != std::string::npos ||
        line.find("MemoryError") != std::string::npos)
      return true;
  }
  return false;
}

// The metrics JSONL: per line at least "loss"; "tokens" (cumulative) or the spec's
// tokens_per_step place each loss on the token axis; "tokens_per_s" is the throughput when the
// spec gives no tokens_per_step. Returns false with the reason when it has no loss line.
bool read_spec_metrics(const fs::path& path, double tokens_per_step, TrialResult* r,
                       std::vector<double>* rates) {
  std::ifstream in(path);
  if (!in) {
    r->reason = "the program wrote no metrics file " + path.string();
    return false;
  }
  r->losses.clear();
  r->tokens.clear();
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("loss")) continue;  // torn or other
    ++lines;
    r->losses.push_back(j["loss"].is_number() ? j["loss"].get<double>() : std::nan(""));
    double tokens = tokens_per_step * lines;
    if (j.contains("tokens") && j["tokens"].is_number()) tokens = j["tokens"].get<double>();
    r->tokens.push_back(tokens);
    if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number())
      rates->push_back(j["tokens_per_s"].get<double>());
  }
  if (r->losses.empty()) {
    r->reason = "the metrics file " + path.string() + " has no line with a loss";
    return false;
  }
  r->final_loss = r->losses.back();
  return true;
}

}  // namespace

TrialResult run_spec_trial(const TuneSpec& spec, const std::string& id, const Config& config,
                           const fs::path& work_dir) {
  // The pid keeps a trial orphaned by a killed sweep from writing into its rerun's folder.
  const fs::path dir = fs::absolute(work_dir / fmt::format("{}.{}", id, ::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path log = dir / "log.txt";
  TrialResult r;
  std::vector<std::string> cmd;
  std::map<std::string, std::string> vars;
  double tokens_per_step = 0;
  try {
    cmd = spec_command(spec, config, dir);
    vars = spec_vars(spec, config, dir);
    if (!spec.tokens_per_step.empty())
      tokens_per_step =
          eval_arithmetic(expand_template(spec.tokens_per_step, vars, "tokens_per_step"));
  } catch (const ConfigError& e) {
    r.status = TrialStatus::kConfigError;
    r.reason = e.what();
    return r;
  }
  const ChildResult child = run_child(cmd, log, spec.timeout_s);
  r.wall_s = child.wall_s;
  r.exit_code = child.exit_code;
  if (child.timed_out) {
    r.status = TrialStatus::kTimeout;
    r.reason = fmt::format("killed after the {:.0f} s time limit", spec.timeout_s);
    return r;
  }
  if (child.exit_code != 0) {
    r.status = log_says_oom(log) ? TrialStatus::kOom : TrialStatus::kCrash;
    const std::string what =
        child.signal != 0
            ? fmt::format("killed by signal {} ({})", child.signal, strsignal(child.signal))
        : child.exit_code == 127 ? "cannot execute " + spec.command.front()
                                 : fmt::format("exit status {}", child.exit_code);
    r.reason = fmt::format("{}{}: {}", r.status == TrialStatus::kOom ? "out of memory, " : "", what,
                           last_error_line(log));
    return r;
  }
  std::vector<double> metric_rates;
  const fs::path metrics = expand_template(spec.metrics, vars, "metrics");
  if (!read_spec_metrics(metrics, tokens_per_step, &r, &metric_rates)) {
    r.status = TrialStatus::kCrash;
    return r;
  }
  // Throughput: the trace's steady steps x tokens_per_step, else the metrics' own rates.
  std::vector<double> rates;
  double step_ms = 0;
  if (tokens_per_step > 0 && !spec.trace.empty()) {
    const fs::path trace = expand_template(spec.trace, vars, "trace");
    if (!fs::exists(trace)) {
      r.status = TrialStatus::kCrash;
      r.reason = "the program wrote no trace at " + trace.string();
      return r;
    }
    try {
      const profiler::Diagnosis d =
          profiler::diagnose_trace_ranks(profiler::load_kineto_ranks(trace));
      for (const profiler::StepBreakdown* s :
           profiler::steady_steps(d.steps, profiler::RunInfo{})) {
        if (s->wall_ms <= 0) continue;
        step_ms += s->wall_ms;
        rates.push_back(tokens_per_step / s->wall_ms * 1000.0);
      }
    } catch (const Error& e) {
      r.status = TrialStatus::kCrash;
      r.reason = std::string("unreadable trace: ") + e.what();
      return r;
    }
    if (rates.empty()) {
      r.status = TrialStatus::kCrash;
      r.reason = "the trace at " + trace.string() + " has no step";
      return r;
    }
    step_ms /= static_cast<double>(rates.size());
    r.tokens_per_s = tokens_per_step / step_ms * 1000.0;
  } else {
    rates = metric_rates;
    if (rates.empty()) {
      r.status = TrialStatus::kCrash;
      r.reason =
          "no throughput: the spec has no trace and tokens_per_step, and the metrics no "
          "tokens_per_s";
      return r;
    }
    double sum_s = 0;
    for (double t : rates) sum_s += t > 0 ? 1.0 / t : 0;  // seconds per token, per step
    r.tokens_per_s = sum_s > 0 ? static_cast<double>(rates.size()) / sum_s : 0;
    step_ms =
        tokens_per_step > 0 && r.tokens_per_s > 0 ? tokens_per_step / r.tokens_per_s * 1000 : 0;
  }
  r.step_ms = step_ms;
  r.measured_steps = static_cast<int>(rates.size());
  r.step_tps_median = median_of(rates);
  r.step_tps_spread = rates.size() >= 4 ? iqr_spread(rates) : 0;
  r.status = TrialStatus::kOk;
  return r;
}

profiler::Diagnosis run_spec_diagnosis(const TuneSpec& spec, const fs::path& ft_diagnose,
                                       const fs::path& dir, const Config& config) {
  const fs::path report = dir / "report.json";
  if (fs::exists(report)) return profiler::read_diagnosis_file(report);
  fs::create_directories(dir);
  const fs::path run_dir = fs::absolute(dir / "run");
  fs::remove_all(run_dir);
  fs::create_directories(run_dir);
  const auto vars = spec_vars(spec, config, run_dir);
  if (spec.trace.empty()) throw ConfigError("the guided strategy needs the spec's 'trace'");
  const ChildResult child =
      run_child(spec_command(spec, config, run_dir), run_dir / "log.txt", spec.timeout_s);
  if (child.timed_out || child.exit_code != 0) {
    throw IoError(
        fmt::format("the program failed while running for a diagnosis ({}): {} (log {})",
                    child.timed_out ? "timed out" : fmt::format("exit status {}", child.exit_code),
                    last_error_line(run_dir / "log.txt"), (run_dir / "log.txt").string()));
  }
  const fs::path trace = expand_template(spec.trace, vars, "trace");
  if (!fs::exists(trace)) throw IoError("the program wrote no trace at " + trace.string());
  const fs::path log = dir / "diagnose.log";
  const ChildResult d =
      run_child({ft_diagnose.string(), trace.string(), "--out", dir.string()}, log, spec.timeout_s);
  if (d.timed_out || d.exit_code != 0 || !fs::exists(report)) {
    throw IoError(fmt::format("ft-diagnose failed on {}: {} (log {})", trace.string(),
                              last_error_line(log), log.string()));
  }
  return profiler::read_diagnosis_file(report);
}

}  // namespace ft::tuner
