// search.h: the tuner's knob space, grid and guided (diagnose -> optimize -> verify) sweeps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/trainer/train_config.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/trial.h"
#include "ft/tuner/verify.h"

namespace ft::tuner {

// One dimension of the space: alternative settings, each a patch of ft-train flags.
struct Dimension {
  std::string name;
  std::vector<Config> settings;
};

// How the global batch may change. Fixed by default; with allow_change the LR (and min-lr) is
// scaled by (new/old global batch) for "linear" or its square root for "sqrt", and steps and
// warmup are scaled by old/new so the run covers the same tokens.
struct BatchRule {
  bool allow_change = false;
  std::string lr_scaling = "sqrt";
};

// ft-train's flags (long names without "--") and the defaults of those that have one
// ("precision" -> "fp32", booleans as true/false), from trainer::option_table().
std::set<std::string> ft_train_flags();
std::map<std::string, std::string> ft_train_defaults();
// The TrainConfig of a flag config (ft-train's defaults for the rest); flags ft-train does not
// have are dropped. nullopt when ft_trainer rejects the values.
std::optional<trainer::TrainConfig> to_train_config(const Config& c);
// config_key of `c` with the knob flags it leaves at ft-train's defaults spelled out, so
// "--precision fp32" and no --precision are the same configuration.
// `--attention auto` (ft-train's default) counts as the kernel it picks for the config's shape.
std::string effective_key(const Config& c, const std::map<std::string, std::string>& defaults);
// The attention kernel `c` runs, "flash" or "naive": its --attention, else the default, with
// "auto" resolved by trainer::choose_attention from its (or the default) seq-len, channels, heads.
std::string effective_attention(const Config& c,
                                const std::map<std::string, std::string>& defaults);

// precision x checkpoint x (micro-batch, grad-accum) x loader workers/prefetch (when `flags`
// has them) x allocator caching x attention. The split keeps B*K fixed unless the rule allows a
// change (then B in {B/2, B, 2B, 4B} with K = 1 as well). With `ranks` > 1 (and ft-train's
// parallel flags) also: the parallel split, every (dp, tp, pp) with dp*tp*pp = ranks that the
// model allows (tp divides heads and channels, pp <= layers), each with ZeRO 0/1/2 when dp > 1;
// and the DP communication: overlap on (bucket as the baseline, or a quarter of it) or off.
std::vector<Dimension> default_space(const Config& baseline, const std::set<std::string>& flags,
                                     const BatchRule& rule, int ranks = 1);

// Patches a finding implies beyond its knob strings, from its class and the incumbent: exposed
// communication -> overlap on (when off), a bigger gradient bucket, more accumulation per
// all-reduce; a pipeline bubble -> more micro-batches (at the same global batch when the
// micro-batch halves evenly, and with a larger one). The guided sweep tries them after the
// finding's own knobs.
std::vector<Config> derived_knobs(const profiler::Finding& finding, const Config& incumbent);
// Every combination, the baseline first, the rest in a seeded shuffle (so a budget-truncated
// grid is an unbiased sample); duplicates removed.
std::vector<Config> grid_configs(const Config& baseline, const std::vector<Dimension>& space,
                                 uint64_t seed, const BatchRule& rule,
                                 const std::map<std::string, std::string>& defaults = {});
// `incumbent` with `patch` applied under the batch rule. Returns nullopt and sets `why` when the
// patch would change the global batch and that is not allowed, or cannot keep it fixed.
std::optional<Config> apply_knob(const Config& incumbent, const Config& patch,
                                 const BatchRule& rule, std::string* why);
int global_batch(const Config& c);  // micro-batch x grad-accum (ft-train defaults 8 x 1)

constexpr int kMaxTrialSteps = 100000;  // the cap on a calibrated trial length

struct SweepOptions {
  std::string strategy = "guided";  // guided | grid
  Config baseline;                  // the user's ft-train flags
  int budget_trials = 0;            // 0: unlimited (grid: the whole space)
  double budget_minutes = 0;        // 0: unlimited; counts recorded trial wall time
  int trial_steps = 12;             // steps of a short trial; the floor when trial_seconds > 0
  // > 0: trials run as many steps as the baseline needs for this many measured seconds (one
  // calibration run of the baseline first); 0: exactly trial_steps
  double trial_seconds = 0;
  int verify_steps = 60;
  int repeats = 3;  // guided: rounds of the incumbent and a round's candidates side by side
  // guided: when compute is at least this share of step time, the compute knobs (attention,
  // micro-batch split) join the round's candidates; 0: never
  double compute_bound = 0.5;
  int confirm_top = 3;     // confirmation round: this many best configurations + the baseline
  int confirm_rounds = 3;  // ... each measured this many times, alternating; 0: no confirmation
  int candidates_per_round = 2;
  int max_verify = 3;             // grid: verify at most this many of the fastest
  double min_gain = 0.05;         // stop when no finding's share promises more
  double min_improvement = 0.02;  // floor of the noise threshold
  uint64_t seed = 1;
  BatchRule batch;
  VerifyRules verify;
  std::set<std::string> train_flags;                  // ft-train's: ft_train_flags()
  std::vector<Dimension> space;                       // grid space; empty: default_space()
  std::map<std::string, std::string> train_defaults;  // ft-train's: ft_train_defaults()
  double memory_limit = 0;                            // bytes for the skip rule; 0: no limit
  bool memory_skip = true;  // skip configs predicted to exceed memory_limit
  int ranks = 1;            // processes per trial (mpirun -np); adds the parallel dimensions
  // The machine's current speed (any unit, higher is faster), measured before and after every
  // trial; a side-by-side round whose probes spread by more than machine_drift (max/min - 1)
  // compared configurations under different machine states, so it is voided and run again (at
  // most max_void_rounds times per measurement). Unset or machine_drift 0: no check.
  std::function<double()> machine_probe;
  // 0.5: only gross slow phases (the 2.7x one seen); 25-47% probe spreads voided rounds whose
  // trials read normal (docs/tuning.md, "Machine drift").
  double machine_drift = 0.5;
  int max_void_rounds = 2;
  // Any training program (ft-tune --spec) instead of ft-train: no memory model, a finding's
  // candidates come from `finding_patches` (the knobs whose fixes name its class) instead of
  // its ft-train knob strings, and verification runs scale their steps by `batch_scale` (the
  // global batch of a configuration, any unit) so they cover the baseline's tokens.
  bool ft_engine = true;
  std::function<std::vector<Config>(const profiler::Finding&, const Config& incumbent)>
      finding_patches;
  std::function<double(const Config&)> batch_scale;
};

// One configuration of a side-by-side measurement: a confirmation round (row 0 the baseline,
// then the best few configurations) or a guided round (row 0 the incumbent, then the round's
// candidates), one trial each per round, in alternating order.
struct ConfirmRow {
  Config knobs;
  std::string change;                // against the baseline; row 0: "baseline" / "incumbent"
  std::vector<int> trials;           // trial id per round (-1: not run, budget spent)
  std::vector<double> tokens_per_s;  // per round; 0 where the trial failed or did not run
  std::vector<double> ratios;        // rounds where both ran: tokens_per_s / row 0's
  double median_tps = 0;             // median over the rounds that ran
  double median_ratio = 0;           // the score (1 for row 0)
  double ratio_spread = 0;           // (max - min) / median of the ratios
  bool beats_baseline = false;       // beats row 0 beyond noise: see score_confirmation
};

// Trial order of confirmation round `round` over `n` rows: forward for even rounds, reversed for
// odd ones (A B C, C B A, A B C), so a linear drift in machine load hits every row alike.
std::vector<size_t> confirm_order(size_t n, int round);

// The sign test: a candidate that is no faster wins a round with probability 1/2, so winning at
// least sign_test_wins(n) of n rounds happens by chance with probability <= kSignTestLevel:
// every round for n <= 3 (n = 3: 1/8), then the smallest k with P(Binomial(n, 1/2) >= k) <= 1/8
// (n = 4, 5: all; 6: 5; 7: 6; 9: 7; 12: 9), so more rounds buy power under noise.
constexpr double kSignTestLevel = 0.125;
int sign_test_wins(int n);

// Fills every row's ratios, medians and spread (rows[0] is the baseline, measured in the same
// rounds) and sets beats_baseline for a row with at least `min_rounds` ratios, that wins the
// sign test (ratio > 1 in at least sign_test_wins(n) of its n rounds) and has a median ratio
// > 1 + min_improvement. Returns the indices of
// rows[1..] by median ratio, best first (ties keep the row order).
std::vector<size_t> score_confirmation(std::vector<ConfirmRow>* rows, double min_improvement,
                                       int min_rounds);

// True when row a is faster than row b beyond noise over the rounds where both ran: at least
// `min_rounds` of them, a/b > 1 in sign_test_wins(n) of the n rounds and median(a/b) >
// 1 + min_improvement (score_confirmation's rule, between two candidates).
bool faster_beyond_noise(const ConfirmRow& a, const ConfirmRow& b, double min_improvement,
                         int min_rounds);

struct Decision {
  int round = 0;
  std::string kind;  // diagnose | skip | trial | measure | accept | reject | stop
  std::string text;
  std::vector<int> trials;
};

// A finding's prediction checked by the trial it proposed: the predicted step time (issue 10's
// predicted_step_ms, as a ratio to its diagnosed step, applied to the incumbent's measured
// step) against the step measured side by side (the incumbent's over the median throughput
// ratio). error = predicted / measured - 1.
struct PredictionCheck {
  int round = 0;
  std::string cls, finding, knob;  // the finding's class and title; the change it proposed
  double incumbent_step_ms = 0, predicted_step_ms = 0, measured_step_ms = 0, error = 0;
  std::vector<int> trials;  // the candidate's trials, then the incumbent's
};

struct SweepOutcome {
  std::string strategy;
  std::vector<JournalEntry> trials;  // in id order (also the journal)
  std::vector<Decision> decisions;
  Config baseline, best;    // knob configs (the user's steps), best.cfg is `best`
  // The user's baseline when it was predicted over --memory-limit and a fitted configuration
  // replaced it as `baseline` (empty otherwise).
  Config requested_baseline;
  int baseline_trial = -1;  // short-trial ids
  int best_trial = -1;
  int baseline_verify = -1;  // verify-run ids: baseline and each accepted change
  std::vector<int> accepted_verifies;
  int best_verify = -1;  // the verify run of `best` (-1: best is the baseline)
  std::string stop_reason;
  // The confirmation round that chose `best` (empty when none ran) and best's median
  // throughput ratio to the baseline in it (1 when the baseline was kept; 0: not confirmed).
  std::vector<ConfirmRow> confirmation;
  double confirmed_ratio = 0;
  int trials_run = 0;  // trials that ran (skipped ones excluded)
  int diagnoses = 0;
  std::vector<PredictionCheck> predictions;  // guided: every checked prediction, in order
  int grid_size = 0;  // guided: configurations a grid over the same space would run
  double spent_s = 0;  // sum of trial wall times
};

// Why the sweep has no baseline to compare with: its short trial or its verify run failed, or
// no trial ran (a budget too small); "" when it has one. ft-tune then exits 1 and writes no
// best.cfg / best.json.
std::string baseline_failure(const SweepOutcome& outcome);

// Runs (or, for ids already journaled, replays) one trial.
using TrialFn = std::function<TrialResult(const std::string& id, const Config& config)>;
// Diagnoses `config` (round 1 = baseline): ft-diagnose's diagnosis, of which the guided loop
// reads the findings and the compute and data shares of step time (totals).
using DiagnoseFn = std::function<profiler::Diagnosis(int round, const Config& config)>;
using ProgressFn = std::function<void(const SweepOutcome& so_far, int trials_left)>;

// The sweep. Trial ids are sequential and every decision depends only on the options (seed)
// and the recorded results, so a journaled trial is replayed, never rerun; a journal that does
// not match (different flags or seed) is a ConfigError naming the first differing trial.
SweepOutcome run_sweep(const SweepOptions& options, Journal& journal, const TrialFn& run,
                       const DiagnoseFn& diagnose, const ProgressFn& progress = nullptr);

// Runs `ft-diagnose run --out DIR <config flags>` as a child process with a time limit and
// reads DIR/report.json. An existing DIR/report.json (a resumed sweep) is read, not rerun.
// Throws IoError (with the log's last line) when ft-diagnose fails or writes no report.
// With `ranks` > 1 it runs `ft-diagnose run --ranks N`, which launches ft-train under mpirun.
profiler::Diagnosis run_diagnosis(const std::filesystem::path& ft_diagnose,
                                  const std::filesystem::path& dir, const Config& config,
                                  double timeout_s, int ranks = 1);

// Throws ConfigError when `c` has a flag ft-train does not have (trainer::option_table()) or when
// ft_trainer rejects the values.
void validate_config(const Config& c);

// Predicted peak bytes of a knob config (flags ft_trainer does not know are ignored); 0 when it
// cannot be predicted.
double predicted_peak(const Config& c);

}  // namespace ft::tuner
