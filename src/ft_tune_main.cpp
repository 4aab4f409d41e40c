// ft_tune_main.cpp: ft-tune, the diagnose -> optimize -> verify sweep command.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli_main.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/profiler/diagnosis.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/launch.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/report.h"
#include "ft/tuner/search.h"
#include "ft/tuner/spec.h"
#include "ft/tuner/trial.h"

namespace fs = std::filesystem;
using namespace ft;
using namespace ft::tuner;

namespace {

constexpr const char* kUsage =
    R"(usage: ft-tune --out DIR --strategy guided|grid [options] [ft-train flags]
       ft-tune --spec SPEC.json --out DIR [--strategy guided|grid] [options]

  --spec FILE             tune any training program: FILE (JSON) names its command template,
                          knobs (values, baseline, the finding classes each fixes), steps,
                          timeout_s, trace, metrics and tokens_per_step (docs/tuning.md); writes
                          best.json (knob values and command line) instead of best.cfg

  --out DIR               sweep directory: journal.jsonl, best.cfg, report.{md,html,json}
  --strategy S            guided (diagnose -> optimize -> verify, needs ft-diagnose) or grid
  --budget-trials N       stop after N trials have run (0: no limit)
  --budget-minutes M      stop after M minutes of trial time (0: no limit)
  --trial-steps N         steps of a short throughput trial (default 12); given alone, every
                          trial runs exactly N steps
  --trial-seconds S       trials run as many steps (at least --trial-steps) as the baseline
                          needs for S measured seconds, from one calibration run of the
                          baseline (default 1 unless --trial-steps is given; 0: off)
  --verify-steps N        steps of a loss-curve verification run (default 60)
  --machine-drift F       a side-by-side round is voided and run again (twice at most) when a
                          CPU speed probe taken before and after each of its trials moves by
                          more than F (default 0.5; 0: off)
  --trial-timeout S       seconds before a trial is killed (default 300)
  --repeats N             guided: rounds of the incumbent and a round's candidates measured
                          side by side, order alternating (default 3)
  --confirm-top K         confirmation round: the K best configurations + the baseline (3)
  --confirm-rounds R      ... each measured R times side by side, order alternating (3; 0: off)
  --candidates N          guided: candidates tried per diagnosis round (default 2)
  --min-gain F            guided: stop when no finding's share exceeds F (default 0.05)
  --compute-bound F       guided: at compute >= F of step time also try attention and the
                          micro-batch split (default 0.5; 0: never)
  --knobs LIST            the search space's dimensions, comma-separated from precision,
                          checkpoint,batch,loader,allocator,attention,parallel,dp-comm (default:
                          all available); guided then skips any knob outside it
  --ranks N               every trial runs `mpirun -np N ft-train ...` (mpirun on PATH, or
                          FT_MPIRUN); adds the parallel split (dp x tp x pp = N, ZeRO stage) and
                          DP communication (overlap, bucket size) to the space; without
                          --dp/--tp/--pp the baseline is --dp N
  --allow-batch-change    the global batch may change; LR scaled by --lr-scaling
  --lr-scaling R          sqrt (default) or linear
  --seed S                sweep order and every trial's ft-train --seed (default 1337)
  --no-memory-skip        run configs the memory model predicts to run out of memory
  --resume                continue the sweep journaled in DIR (nothing is rerun)
Any other flag is an ft-train flag of the baseline configuration. ft-train and ft-diagnose
are found next to ft-tune (override with FT_TRAIN / FT_DIAGNOSE).
)";

double available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

template <typename T>
T number(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    if (used != v.size() || d < 0) throw std::invalid_argument(v);
    return static_cast<T>(d);
  } catch (const std::exception&) {
    throw ConfigError(fmt::format("{} '{}': expected a non-negative number", flag, v));
  }
}

class Progress {
 public:
  explicit Progress(std::chrono::steady_clock::time_point t0) : t0_(t0), tty_(isatty(2)) {}
  void operator()(const SweepOutcome& o, int left) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    double best = 0;
    std::string best_change = "-";
    for (const auto& e : o.trials) {
      if (e.result.status == TrialStatus::kOk && e.phase != "verify" &&
          e.phase != "verify-baseline" && e.result.tokens_per_s > best) {
        best = e.result.tokens_per_s;
        best_change = e.change;
      }
    }
    const int done = o.trials_run;
    std::string bar;
    if (left >= 0) {
      const int width = 24, filled = done + left > 0 ? width * done / (done + left) : width;
      bar = fmt::format("[{}{}] ", std::string(static_cast<size_t>(filled), '#'),
                        std::string(static_cast<size_t>(width - filled), '.'));
    }
    const std::string line =
        fmt::format("{}{:02d}:{:02d} elapsed, {} trials done, {} left, best {:.0f} tok/s ({})", bar,
                    static_cast<int>(el) / 60, static_cast<int>(el) % 60, done,
                    left >= 0 ? std::to_string(left) : std::string("?"), best, best_change);
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.substr(0, 160).c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  std::chrono::steady_clock::time_point t0_;
  bool tty_;
};

// The trial length --trial-seconds chose (or why it could not), as the report's decision says.
void print_calibration(const SweepOutcome& o) {
  for (const Decision& d : o.decisions) {
    if (d.round == 0 && d.kind == "trial" &&
        (d.text.rfind("trial length:", 0) == 0 || d.text.rfind("calibration run failed", 0) == 0))
      std::fprintf(stderr, "ft-tune: %s\n", d.text.c_str());
  }
}

// A sweep without a baseline fails (exit 1, no best file, the report says why); one whose
// budget ran nothing but the baseline says it compared nothing.
int report_exit(const SweepOutcome& o, const fs::path& out, const char* best_file) {
  const std::string failed = baseline_failure(o);
  if (!failed.empty()) {
    fs::remove(out / best_file);
    std::fprintf(stderr, "ft-tune: %s: nothing to compare with, so no %s (report in %s)\n",
                 failed.c_str(), best_file, out.string().c_str());
    return 1;
  }
  if (o.trials_run <= 1) {
    std::fprintf(stderr,
                 "ft-tune: only the baseline ran (%s): no change was tested; raise the budget\n",
                 o.stop_reason.c_str());
  }
  return 0;
}

struct SpecRun {
  fs::path out;
  bool resume = false;
  bool trial_steps_given = false;
  std::optional<double> trial_seconds;
  bool verify_steps_given = false;
  double timeout_s = 0;  // 0: the spec's
};

// ft-tune --spec: the same sweep over any program's trials (spec.h).
int run_spec(const fs::path& spec_path, const SpecRun& sr, SweepOptions opt) {
  TuneSpec spec = load_spec(spec_path);
  if (sr.timeout_s > 0) spec.timeout_s = sr.timeout_s;
  const fs::path ft_diagnose = ft::sibling_tool("FT_DIAGNOSE", "ft-diagnose");
  if (opt.strategy == "guided") {
    if (spec.trace.empty()) {
      throw ConfigError(
          spec_path.string() +
          ": --strategy guided diagnoses the program's trace: the spec needs 'trace'");
    }
    if (access(ft_diagnose.c_str(), X_OK) != 0) {
      throw IoError(
          fmt::format("--strategy guided needs ft-diagnose, which is not at {} (set "
                      "FT_DIAGNOSE)",
                      ft_diagnose.string()));
    }
  }
  opt.ft_engine = false;
  opt.memory_skip = false;
  opt.compute_bound = 0;  // the engine's compute knobs (attention, micro-batch split) are not here
  opt.baseline = spec_baseline(spec);
  opt.space = spec_space(spec);
  opt.finding_patches = [&spec](const profiler::Finding& f, const Config& inc) {
    return spec_patches(spec, f.cls, inc);
  };
  opt.batch_scale = [&spec](const Config& c) { return spec_batch_scale(spec, c); };
  if (!sr.trial_steps_given) opt.trial_steps = spec.steps;
  if (!sr.verify_steps_given) opt.verify_steps = spec.steps;
  opt.trial_seconds = sr.trial_seconds.value_or(0.0);
  // Said, not silent: the lengths the trials run.
  std::fprintf(stderr,
               "ft-tune: trials run %d steps (%s), verification runs %d (%s)%s; %.0f s limit per "
               "trial\n",
               opt.trial_steps, sr.trial_steps_given ? "--trial-steps" : "the spec's steps",
               opt.verify_steps, sr.verify_steps_given ? "--verify-steps" : "the spec's steps",
               opt.trial_seconds > 0 ? ", calibrated by --trial-seconds" : "", spec.timeout_s);
  fs::create_directories(sr.out);
  Journal journal(sr.out / "journal.jsonl", sr.resume);
  if (journal.dropped_bytes() > 0) {
    std::fprintf(stderr,
                 "ft-tune: dropped a torn last journal line (%zu bytes) of a killed sweep\n",
                 journal.dropped_bytes());
  }
  const TrialFn run_fn = [&](const std::string& id, const Config& c) {
    return run_spec_trial(spec, id, c, sr.out / "trials");
  };
  const DiagnoseFn diag_fn = [&](int round, const Config& c) {
    return run_spec_diagnosis(spec, ft_diagnose, sr.out / fmt::format("diag_{}", round), c);
  };
  Progress progress(std::chrono::steady_clock::now());
  const ProgressFn progress_fn = [&](const SweepOutcome& o, int left) { progress(o, left); };
  const SweepOutcome o = run_sweep(opt, journal, run_fn, diag_fn, progress_fn);
  progress.finish();
  print_calibration(o);
  write_outputs(sr.out, o, opt);
  if (const int rc = report_exit(o, sr.out, "best.json"); rc != 0) return rc;
  // best.json: the winning knob values and the command line that runs them.
  nlohmann::json best;
  best["knobs"] = nlohmann::json::object();
  for (const SpecKnob& k : spec.knobs) best["knobs"][k.name] = o.best.at(k.name);
  best["change"] = describe_diff(o.baseline, o.best);
  Config full = o.best;
  full["steps"] = std::to_string(spec.steps);
  best["command"] = spec_command(spec, full, "{trial_dir}");
  best["stopped"] = o.stop_reason;
  write_file_atomic(sr.out / "best.json", best.dump(2) + "\n");
  std::cout << fmt::format(
      "best: {} ({} trials run; stopped: {})\nwrote {}/best.json and "
      "report.{{md,html,json}}\n",
      describe_diff(o.baseline, o.best), o.trials_run, o.stop_reason, sr.out.string());
  return 0;
}

int run(int argc, char** argv) {
  SweepOptions opt;
  opt.seed = 1337;
  fs::path out;
  bool resume = false;
  bool seed_given = false;
  double trial_timeout = 300;
  bool trial_steps_given = false;
  std::optional<double> trial_seconds;
  std::string knobs;
  int ranks = 1;
  std::vector<std::string> train_words;
  fs::path spec_path;
  bool verify_steps_given = false, timeout_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--out") {
      out = value();
    } else if (a == "--strategy") {
      opt.strategy = value();
    } else if (a == "--budget-trials") {
      opt.budget_trials = number<int>(a, value());
    } else if (a == "--budget-minutes") {
      opt.budget_minutes = number<double>(a, value());
    } else if (a == "--trial-steps") {
      opt.trial_steps = number<int>(a, value());
      trial_steps_given = true;
    } else if (a == "--trial-seconds") {
      trial_seconds = number<double>(a, value());
    } else if (a == "--machine-drift") {
      opt.machine_drift = number<double>(a, value());
      if (opt.machine_drift < 0) throw ConfigError("--machine-drift must be >= 0");
    } else if (a == "--verify-steps") {
      opt.verify_steps = number<int>(a, value());
      verify_steps_given = true;
    } else if (a == "--spec") {
      spec_path = value();
    } else if (a == "--trial-timeout") {
      trial_timeout = number<double>(a, value());
      timeout_given = true;
    } else if (a == "--repeats") {
      opt.repeats = number<int>(a, value());
    } else if (a == "--confirm-top") {
      opt.confirm_top = number<int>(a, value());
    } else if (a == "--confirm-rounds") {
      opt.confirm_rounds = number<int>(a, value());
    } else if (a == "--candidates") {
      opt.candidates_per_round = std::max(1, number<int>(a, value()));
    } else if (a == "--compute-bound") {
      opt.compute_bound = number<double>(a, value());
    } else if (a == "--min-gain") {
      opt.min_gain = number<double>(a, value());
    } else if (a == "--knobs") {
      knobs = value();
    } else if (a == "--allow-batch-change") {
      opt.batch.allow_change = true;
    } else if (a == "--lr-scaling") {
      opt.batch.lr_scaling = value();
    } else if (a == "--seed") {
      opt.seed = number<uint64_t>(a, value());
      seed_given = true;
    } else if (a == "--no-memory-skip") {
      opt.memory_skip = false;
    } else if (a == "--resume") {
      resume = true;
    } else if (a == "--ranks") {
      ranks = number<int>(a, value());
      if (ranks < 1) throw ConfigError("--ranks must be at least 1");
    } else {
      train_words.push_back(a);
    }
  }
  if (out.empty()) throw ConfigError("--out DIR is required");
  if (opt.strategy != "guided" && opt.strategy != "grid") {
    throw ConfigError(fmt::format("--strategy '{}': expected guided or grid", opt.strategy));
  }
  if (opt.batch.lr_scaling != "sqrt" && opt.batch.lr_scaling != "linear") {
    throw ConfigError(
        fmt::format("--lr-scaling '{}': expected sqrt or linear", opt.batch.lr_scaling));
  }
  if (trial_timeout <= 0) throw ConfigError("--trial-timeout must be positive");
  if (!spec_path.empty()) {
    if (!train_words.empty()) {
      throw ConfigError(
          fmt::format("'{}': ft-train flags do not apply with --spec (the spec's "
                      "command is the program)",
                      train_words.front()));
    }
    if (ranks > 1) throw ConfigError("--ranks does not apply with --spec (the command launches)");
    const SpecRun sr{out,
                     resume,
                     trial_steps_given,
                     trial_seconds,
                     verify_steps_given,
                     timeout_given ? trial_timeout : 0};
    return run_spec(spec_path, sr, opt);
  }
  opt.trial_seconds = trial_seconds.value_or(trial_steps_given ? 0.0 : 1.0);
  opt.machine_probe = machine_speed_probe;
  opt.baseline = parse_flag_words(train_words);
  for (const char* k : {"metrics", "save", "resume", "config", "help"}) {
    if (opt.baseline.count(k)) throw ConfigError(fmt::format("--{} cannot be part of a sweep", k));
  }
  // Said, not silent: the trial lengths replace the baseline's own --steps.
  {
    const std::string trials =
        opt.trial_seconds > 0
            ? fmt::format(
                  "short trials run as many steps (at least {}) as the baseline needs "
                  "for {:g} measured seconds (--trial-seconds; calibrated by one baseline "
                  "run, the report's first decision)",
                  opt.trial_steps, opt.trial_seconds)
            : fmt::format("short trials run {} steps (--trial-steps)", opt.trial_steps);
    const auto user_steps = opt.baseline.find("steps");
    const std::string unused =
        user_steps != opt.baseline.end()
            ? fmt::format("; the baseline's --steps {} is not used by the sweep",
                          user_steps->second)
            : "";
    std::fprintf(stderr, "ft-tune: %s; verification runs %d steps (--verify-steps)%s\n",
                 trials.c_str(), opt.verify_steps, unused.c_str());
  }
  opt.baseline["seed"] =
      seed_given || !opt.baseline.count("seed") ? std::to_string(opt.seed) : opt.baseline["seed"];
  opt.ranks = ranks;
  std::string mpirun;
  if (ranks > 1) {
    if (!trainer::mpi_supported()) {
      throw ConfigError("--ranks needs ft built with MPI (configure with -DFT_WITH_MPI=ON)");
    }
    mpirun = trainer::find_mpirun();
    if (mpirun.empty()) {
      throw ConfigError(
          "--ranks launches mpirun, which is not on PATH (Debian: apt-get install openmpi-bin; or "
          "set FT_MPIRUN)");
    }
    trainer::allow_mpirun_as_root();
    if (!opt.baseline.count("dp") && !opt.baseline.count("tp") && !opt.baseline.count("pp")) {
      opt.baseline["dp"] = std::to_string(ranks);
    }
  }

  const fs::path ft_train = ft::sibling_tool("FT_TRAIN", "ft-train");
  const fs::path ft_diagnose = ft::sibling_tool("FT_DIAGNOSE", "ft-diagnose");
  if (access(ft_train.c_str(), X_OK) != 0) {
    throw IoError(fmt::format("ft-train not found at {} (set FT_TRAIN)", ft_train.string()));
  }
  if (opt.strategy == "guided" && access(ft_diagnose.c_str(), X_OK) != 0) {
    throw IoError(
        fmt::format("--strategy guided needs ft-diagnose, which is not at {} (build "
                    "it, or set FT_DIAGNOSE); ft-tune does not guess a diagnosis",
                    ft_diagnose.string()));
  }
  fs::create_directories(out);
  // ft-train's options come from the engine ft-tune is built with (trainer::option_table()).
  opt.train_flags = ft_train_flags();
  opt.train_defaults = ft_train_defaults();
  validate_config(opt.baseline);
  if (!knobs.empty()) {
    const auto all = default_space(opt.baseline, opt.train_flags, opt.batch, ranks);
    std::string rest = knobs + ",";
    std::set<std::string> want;
    for (size_t p; (p = rest.find(',')) != std::string::npos; rest.erase(0, p + 1)) {
      if (p > 0) want.insert(rest.substr(0, p));
    }
    const std::map<std::string, std::string> names = {{"precision", "precision"},
                                                      {"checkpoint", "checkpoint"},
                                                      {"batch", "micro-batch x grad-accum"},
                                                      {"loader", "loader"},
                                                      {"allocator", "allocator"},
                                                      {"attention", "attention"},
                                                      {"parallel", "parallel split"},
                                                      {"dp-comm", "dp communication"}};
    for (const auto& w : want) {
      if (!names.count(w)) throw ConfigError(fmt::format("--knobs: unknown dimension '{}'", w));
    }
    for (const auto& d : all) {
      for (const auto& w : want) {
        if (names.at(w) == d.name) opt.space.push_back(d);
      }
    }
    if (opt.space.empty()) throw ConfigError("--knobs selects no available dimension");
  }
  // The memory limit the skip rule checks: the baseline's --memory-limit, else what the
  // machine has available now.
  const auto tc = to_train_config(opt.baseline);  // validated above
  opt.memory_limit =
      tc && tc->memory_limit > 0 ? static_cast<double>(tc->memory_limit) : available_memory();

  Journal journal(out / "journal.jsonl", resume);
  if (journal.dropped_bytes() > 0) {
    std::fprintf(stderr,
                 "ft-tune: dropped a torn last journal line (%zu bytes) of a killed sweep\n",
                 journal.dropped_bytes());
  }
  TrialOptions topt{ft_train, out / "trials", trial_timeout, ranks, mpirun};
  const TrialFn run_fn = [&](const std::string& id, const Config& c) {
    return run_trial(id, c, topt);
  };
  const DiagnoseFn diag_fn = [&](int round, const Config& c) {
    return run_diagnosis(ft_diagnose, out / fmt::format("diag_{}", round), c, trial_timeout * 2,
                         ranks);
  };
  Progress progress(std::chrono::steady_clock::now());
  const ProgressFn progress_fn = [&](const SweepOutcome& o, int left) { progress(o, left); };
  const SweepOutcome o = run_sweep(opt, journal, run_fn, diag_fn, progress_fn);
  progress.finish();
  print_calibration(o);
  write_outputs(out, o, opt);
  if (const int rc = report_exit(o, out, "best.cfg"); rc != 0) return rc;
  if (!o.requested_baseline.empty()) {
    std::cout << fmt::format(
        "fitted to --memory-limit: the requested baseline is predicted over it; the baseline "
        "is {}\n",
        describe_diff(o.requested_baseline, o.baseline));
  }
  std::cout << fmt::format(
      "best: {} ({} trials run; stopped: {})\nwrote {}/best.cfg and "
      "report.{{md,html,json}}\n",
      describe_diff(o.baseline, o.best), o.trials_run, o.stop_reason, out.string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ft-tune: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ft-tune: %s\n", e.what());
    return 1;
  }
}
