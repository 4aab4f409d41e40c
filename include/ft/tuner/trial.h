// trial.h: one tuner trial: an ft-train child process with a time limit, and what it measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ft::tuner {

// An ft-train configuration as its long flags (without "--"), e.g. {"precision", "bf16"}.
// A flag with an empty value is passed alone (a switch).
using Config = std::map<std::string, std::string>;

std::vector<std::string> config_args(const Config& c);  // {"--precision", "bf16", ...}
std::string config_key(const Config& c);                // canonical "k=v;k=v" for identity
std::string describe_diff(const Config& base,
                          const Config& c);  // "precision bf16, checkpoint block"
// The ft-train --config file text ("key = value" lines), loadable by ft-train --config.
std::string config_file_text(const Config& c);
// Parses "--flag value" / "--flag=value" / "--switch" words into a Config. Throws ConfigError
// on a word that is not a flag.
Config parse_flag_words(const std::vector<std::string>& words);

// kConfigError: the program refused its configuration (ft-train's exit status 2, a spec whose
// templates do not expand); not a crash.
enum class TrialStatus { kOk, kOom, kCrash, kTimeout, kRejected, kConfigError };
const char* trial_status_name(TrialStatus s);  // ok, oom, crash, timeout, rejected, config-error
bool parse_trial_status(const std::string& s, TrialStatus* out);

struct TrialResult {
  TrialStatus status = TrialStatus::kCrash;
  std::string reason;  // why it failed or was rejected; empty when ok
  // Throughput over the measured steps (those after the warm-up steps): their tokens divided by
  // their summed wall time, so a periodic stall (an in-line loader's chunk, one step in eight)
  // counts in full; the mean of per-step rates would all but hide it.
  double tokens_per_s = 0;
  double step_ms = 0;  // mean wall time of a measured step
  // Within-run noise: the median of the measured steps' tokens/s and their interquartile range
  // divided by that median (0 with fewer than 4 measured steps).
  double step_tps_median = 0;
  double step_tps_spread = 0;
  int measured_steps = 0;
  double mem_peak = 0;  // bytes
  double final_loss = 0;
  std::vector<double> losses;  // per step
  std::vector<double> tokens;  // tokens seen after each step
  double wall_s = 0;
  int exit_code = 0;
};

struct TrialOptions {
  std::filesystem::path ft_train;  // executable
  std::filesystem::path work_dir;  // where the trial writes its metrics and log
  double timeout_s = 300;
  int ranks = 1;  // > 1: `mpirun -np ranks --oversubscribe ft-train ...`
  // The launcher when ranks > 1 (initialised so that {ft_train, dir, timeout} stays valid
  // under -Wmissing-field-initializers).
  std::filesystem::path mpirun = {};
};

// The command line of a trial: ft-train and its flags, under mpirun when options.ranks > 1.
std::vector<std::string> trial_command(const Config& config, const TrialOptions& options);

// A child process run to completion or killed (with its process group) after `timeout_s`;
// stdout and stderr go to `log`. Exit 127: the program could not be executed.
struct ChildResult {
  int exit_code = 0;  // 128 + signal when killed by a signal
  int signal = 0;
  bool timed_out = false;
  double wall_s = 0;
};
ChildResult run_child(const std::vector<std::string>& command, const std::filesystem::path& log,
                      double timeout_s);
// The last line of a log that looks like an error (or the last line), at most 300 characters.
std::string last_error_line(const std::filesystem::path& log);

// The machine's current single-core speed: the best of 3 timed runs of a dependent
// multiply-add chain (~3 ms each), in millions of operations per second. It moves with the
// CPU share and clock a process gets, which on a shared VM change within seconds.
double machine_speed_probe();

// Runs ft-train with `config` as a child process in its own process group; kills the group
// after the time limit. Under mpirun (ranks > 1) rank 0's metrics (FILE.rank0.jsonl) are read:
// its loss and throughput are the job's (ft-train reduces them over the ranks). Exit 3 (ft-train's
// out-of-memory status) is kOom, exit 2 (a configuration ft-train rejects) kConfigError, a signal
// or other nonzero exit is kCrash with the log's last error line, a killed run is kTimeout. Never
// throws for a failing trial; throws IoError if the child cannot be started at all.
TrialResult run_trial(const std::string& id, const Config& config, const TrialOptions& options);

// Reads an ft-train metrics JSONL (per-step lines plus a final {"summary": ...}); fills
// tokens_per_s, step_ms and the step statistics from the per-step lines after the first
// `warmup_steps` (all of them when there are no more), mem_peak and final_loss from the summary,
// and losses, tokens. Returns false (reason set) when the file is missing or has no summary.
bool read_metrics(const std::filesystem::path& path, TrialResult* r, int warmup_steps = 2);

// Median and (p75 - p25) / median of `v` (linear interpolation between order statistics).
double median_of(std::vector<double> v);
double iqr_spread(std::vector<double> v);

}  // namespace ft::tuner
