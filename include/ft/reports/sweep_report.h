// sweep_report.h: an ft-tune sweep's report.{md,html,json} from a plain description of it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ft::reports {

// What a trial was for: the throughput trials are plotted against peak memory, the verification
// runs' loss curves against tokens.
enum class SweepTrialKind { kThroughput, kVerify, kVerifyBaseline, kOther };

struct SweepTrial {
  int id = 0;
  SweepTrialKind kind = SweepTrialKind::kOther;
  std::string phase;   // the journal's phase: baseline, grid, trial, repeat, confirm, verify, ...
  std::string change;  // against the baseline, e.g. "precision bf16"
  std::string status;  // ok, oom, crash, timeout, rejected
  std::string reason;  // why it failed or was rejected; empty when ok
  double tokens_per_s = 0;
  double step_tps_spread = 0;  // interquartile range of the per-step rates over their median
  double mem_peak = 0;         // bytes
  double predicted_mem = 0;    // bytes (the memory model's prediction)
  double final_loss = 0;
  std::vector<double> tokens, losses;  // after each step
  nlohmann::json record;               // the journal entry, as report.json's trials[] lists it
};

struct SweepConfirmRow {
  std::string change;  // against the baseline; row 0: "baseline"
  std::map<std::string, std::string> config;
  std::vector<int> trials;           // per round (-1: not run)
  std::vector<double> tokens_per_s;  // per round
  std::vector<double> ratios;        // per round where both ran: to row 0
  double median_tps = 0, median_ratio = 0, ratio_spread = 0;
  bool beats_baseline = false;
};

struct SweepDecision {
  int round = 0;
  std::string kind;  // diagnose, skip, trial, measure, accept, reject, stop
  std::string text;
  std::vector<int> trials;
};

// The best configuration's verify run against the baseline's (smoothed final losses).
struct SweepVerified {
  double baseline_smoothed_loss = 0, best_smoothed_loss = 0, limit = 0;
  bool accepted = false;
};

// A finding's predicted step time against the step its knob measured side by side.
struct SweepPrediction {
  int round = 0;
  std::string cls, finding, knob;
  double predicted_step_ms = 0, measured_step_ms = 0, error = 0;  // error: predicted/measured - 1
  std::vector<int> trials;
};

// Everything a sweep report shows, filled by the tuner (tuner/report.cpp).
struct SweepReport {
  std::string strategy;  // guided, grid
  uint64_t seed = 0;
  std::map<std::string, std::string> baseline, best;  // ft-train flags
  std::string best_change;                            // "baseline" when nothing changed
  int baseline_trial = -1, best_trial = -1;
  std::optional<double> baseline_tokens_per_s, best_tokens_per_s;
  double speedup = 1;         // best over baseline throughput
  std::string speedup_basis;  // what the speedup was measured by
  // When the user's baseline was predicted over --memory-limit: what the sweep changed to fit
  // it (the baseline above is then the fitted one); empty otherwise.
  std::string fitted_to_memory;
  double confirmed_ratio = 0;
  std::vector<SweepConfirmRow> confirmation;
  std::string stop_reason;
  int trials_run = 0, diagnoses = 0;
  double trial_time_s = 0;
  std::string verification_rules;
  int baseline_verify = -1, best_verify = -1;
  std::vector<int> accepted_verifies;
  std::optional<double> baseline_verify_final_loss;
  std::optional<SweepVerified> verified;
  std::vector<SweepTrial> trials;  // in id order
  std::vector<SweepDecision> decisions;
  std::vector<int> pareto_front;  // trial ids on the throughput / peak-memory front
  std::vector<SweepPrediction> predictions;  // guided: each finding's prediction, checked
  int grid_size = 0;  // guided: configurations a grid over the same space runs (0: unknown)
};

// Median |error| of the predictions per finding class, and their count.
std::map<std::string, std::pair<double, int>> prediction_errors(const SweepReport& r);

// report.json: every field above (trials[] as their records), keys sorted.
nlohmann::json sweep_report_json(const SweepReport& r);
std::string render_sweep_json(const SweepReport& r);  // sweep_report_json, indented, "\n" ended
// report.md: summary, confirmation round, predictions, trials, Pareto front, decisions; text
// Markdown-escaped.
std::string render_sweep_markdown(const SweepReport& r);
// report.html: one self-contained offline page in the diagnosis report's style, with inline SVG
// charts (throughput vs peak memory with the Pareto front; verification loss curves) with axes,
// ticks, labels and legends; every text HTML-escaped.
std::string render_sweep_html(const SweepReport& r);

}  // namespace ft::reports
