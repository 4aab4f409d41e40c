// trial.cpp: runs an ft-train trial as a child process with a time limit and reads its metrics.
#include "ft/tuner/trial.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ft/core/error.h"
#include "ft/trainer/launch.h"
#include "ft/trainer/parallel.h"

namespace ft::tuner {
namespace fs = std::filesystem;

std::vector<std::string> config_args(const Config& c) {
  std::vector<std::string> out;
  for (const auto& [k, v] : c) {
    out.push_back("--" + k);
    if (!v.empty()) out.push_back(v);
  }
  return out;
}

std::string config_key(const Config& c) {
  std::string s;
  for (const auto& [k, v] : c) s += k + "=" + v + ";";
  return s;
}

std::string describe_diff(const Config& base, const Config& c) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  for (const auto& [k, v] : c) {
    const auto it = base.find(k);
    if (it == base.end() || it->second != v) add(v.empty() ? k : k + " " + v);
  }
  for (const auto& [k, v] : base) {
    if (!c.count(k)) add("no " + k);
  }
  return s.empty() ? "baseline" : s;
}

std::string config_file_text(const Config& c) {
  std::string s = "# written by ft-tune; load with ft-train --config FILE\n";
  for (const auto& [k, v] : c) {
    if (k == "config" || k == "metrics" || k == "save" || k == "resume") continue;
    s += k + " = " + (v.empty() ? "true" : v) + "\n";
  }
  return s;
}

Config parse_flag_words(const std::vector<std::string>& words) {
  Config c;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 3 || w.compare(0, 2, "--") != 0) {
      throw ConfigError(fmt::format("expected an ft-train flag, got '{}'", w));
    }
    const std::string body = w.substr(2);
    const size_t eq = body.find('=');
    if (eq != std::string::npos) {
      c[body.substr(0, eq)] = body.substr(eq + 1);
    } else if (i + 1 < words.size() &&
               (words[i + 1].compare(0, 2, "--") != 0 || words[i + 1].size() == 2)) {
      c[body] = words[++i];
    } else {
      c[body] = "";
    }
  }
  return c;
}

const char* trial_status_name(TrialStatus s) {
  switch (s) {
    case TrialStatus::kOk:
      return "ok";
    case TrialStatus::kOom:
      return "oom";
    case TrialStatus::kCrash:
      return "crash";
    case TrialStatus::kTimeout:
      return "timeout";
    case TrialStatus::kRejected:
      return "rejected";
    case TrialStatus::kConfigError:
      return "config-error";
  }
  return "crash";
}

bool parse_trial_status(const std::string& s, TrialStatus* out) {
  for (TrialStatus t : {TrialStatus::kOk, TrialStatus::kOom, TrialStatus::kCrash,
                        TrialStatus::kTimeout, TrialStatus::kRejected, TrialStatus::kConfigError}) {
    if (s == trial_status_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

namespace {

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile(v, 0.5);
}

double iqr_spread(std::vector<double> v) {
  if (v.size() < 4) return 0;
  std::sort(v.begin(), v.end());
  const double m = quantile(v, 0.5);
  return m > 0 ? (quantile(v, 0.75) - quantile(v, 0.25)) / m : 0;
}

bool read_metrics(const fs::path& path, TrialResult* r, int warmup_steps) {
  std::ifstream in(path);
  if (!in) {
    r->reason = "no metrics file " + path.string();
    return false;
  }
  std::string line;
  bool summary = false;
  r->losses.clear();
  r->tokens.clear();
  double tokens = 0;
  struct Step {
    double tokens, ms, tps;
  };
  std::vector<Step> steps;
  double summary_tps = 0, summary_ms = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) continue;  // a torn last line of a killed run
    if (j.contains("summary")) {
      const auto& s = j["summary"];
      summary_tps = s.value("mean_tokens_per_s", 0.0);
      summary_ms = s.value("mean_step_ms", 0.0);
      r->mem_peak = s.value("mem_peak", 0.0);
      r->final_loss = s.value("final_loss", std::nan(""));
      summary = true;
    } else if (j.contains("loss")) {
      const double loss = j["loss"].is_number() ? j["loss"].get<double>() : std::nan("");
      const double tps = j.value("tokens_per_s", 0.0), ms = j.value("step_ms", 0.0);
      // Tokens of this step: throughput x duration (B T K, exactly up to rounding).
      const double step_tokens = std::round(tps * ms / 1000.0);
      tokens += step_tokens;
      r->losses.push_back(loss);
      r->tokens.push_back(tokens);
      steps.push_back({step_tokens, ms, tps});
    }
  }
  // The measured steps: those after the warm-up, or all when the run is no longer than it.
  const size_t skip = steps.size() > static_cast<size_t>(std::max(0, warmup_steps))
                          ? static_cast<size_t>(std::max(0, warmup_steps))
                          : 0;
  double sum_tokens = 0, sum_ms = 0;
  std::vector<double> rates;
  for (size_t i = skip; i < steps.size(); ++i) {
    sum_tokens += steps[i].tokens;
    sum_ms += steps[i].ms;
    rates.push_back(steps[i].tps);
  }
  r->measured_steps = static_cast<int>(rates.size());
  if (sum_ms > 0) {
    r->tokens_per_s = sum_tokens / (sum_ms / 1000.0);
    r->step_ms = sum_ms / static_cast<double>(rates.size());
    r->step_tps_median = median_of(rates);
    r->step_tps_spread = iqr_spread(rates);
  } else {  // no per-step lines: ft-train's own summary
    r->tokens_per_s = summary_tps;
    r->step_ms = summary_ms;
  }
  if (!summary) r->reason = "metrics have no summary line";
  return summary;
}

// The last line of the log that looks like an error, for the failure reason.
std::string last_error_line(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last, any;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    any = line;
    if (line.find("error") != std::string::npos || line.find("Error") != std::string::npos ||
        line.find("out of memory") != std::string::npos) {
      last = line;
    }
  }
  const std::string s = last.empty() ? any : last;
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

ChildResult run_child(const std::vector<std::string>& command, const fs::path& log,
                      double timeout_s) {
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw IoError(fmt::format("cannot fork for {}: {}", args[0], std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a timeout kills everything it started
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  ChildResult r;
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > timeout_s) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the child, not work
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.timed_out) {
    if (WIFSIGNALED(status)) {
      r.signal = WTERMSIG(status);
      r.exit_code = 128 + r.signal;
    } else {
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
  }
  return r;
}

std::vector<std::string> trial_command(const Config& config, const TrialOptions& options) {
  std::vector<std::string> args = config_args(config);
  if (options.ranks > 1) {
    return trainer::mpirun_command(options.mpirun.string(), options.ranks,
                                   options.ft_train.string(), args);
  }
  args.insert(args.begin(), options.ft_train.string());
  return args;
}

TrialResult run_trial(const std::string& id, const Config& config, const TrialOptions& options) {
  fs::create_directories(options.work_dir);
  // The pid in the names keeps a trial orphaned by a killed sweep from writing into the file of
  // the same trial rerun by the resumed sweep.
  const std::string stem = fmt::format("{}.{}", id, ::getpid());
  const fs::path metrics = options.work_dir / (stem + ".jsonl");
  const fs::path log = options.work_dir / (stem + ".log");
  fs::remove(metrics);
  Config c = config;
  c["metrics"] = metrics.string();
  int warmup = 2;  // ft-train's --warmup-excluded default
  if (const auto it = c.find("warmup-excluded"); it != c.end()) {
    try {
      warmup = std::stoi(it->second);
    } catch (const std::exception&) {
      // ft-train rejects the value itself; the trial fails with its message
    }
  }
  // Under mpirun every rank writes its own FILE.rankN.jsonl; rank 0's speaks for the job.
  const fs::path read_from =
      options.ranks > 1 ? fs::path(trainer::rank_path(metrics.string(), 0)) : metrics;
  fs::remove(read_from);
  const ChildResult child = run_child(trial_command(c, options), log, options.timeout_s);
  TrialResult r;
  const bool timed_out = child.timed_out;
  const int status_signal = child.signal;
  r.wall_s = child.wall_s;
  if (timed_out) {
    r.status = TrialStatus::kTimeout;
    read_metrics(read_from, &r, warmup);  // the steps it finished, if any
    r.reason = fmt::format("killed after the {:.0f} s time limit", options.timeout_s);
    return r;
  }
  if (status_signal != 0) {
    r.status = TrialStatus::kCrash;
    r.exit_code = child.exit_code;
    r.reason = fmt::format("killed by signal {} ({}); log: {}", status_signal,
                           strsignal(status_signal), last_error_line(log));
    return r;
  }
  r.exit_code = child.exit_code;
  if (r.exit_code == 3) {
    r.status = TrialStatus::kOom;
    r.reason = "out of memory: " + last_error_line(log);
    return r;
  }
  if (r.exit_code == 2) {  // ft-train's status for a configuration it rejects
    r.status = TrialStatus::kConfigError;
    r.reason = "ft-train rejected the configuration: " + last_error_line(log);
    return r;
  }
  if (r.exit_code != 0) {
    r.status = TrialStatus::kCrash;
    r.reason = fmt::format(
        "exit status {}: {}", r.exit_code,
        r.exit_code == 127 ? "cannot execute " + options.ft_train.string() : last_error_line(log));
    return r;
  }
  if (!read_metrics(read_from, &r, warmup)) {
    r.status = TrialStatus::kCrash;
    return r;
  }
  r.status = TrialStatus::kOk;
  return r;
}

double machine_speed_probe() {
  constexpr int kOps = 1 << 20;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    volatile double seed = 1.0;  // opaque to the optimiser, so the chain is computed
    double x = seed;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kOps; ++i) x = x * 0.9999999 + 1e-7;  // each step waits for the last
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seed = x;
    if (s > 0) best = std::max(best, kOps / s / 1e6);
  }
  return best;
}

}  // namespace ft::tuner
