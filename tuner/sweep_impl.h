// sweep_impl.h: the sweep engine shared by sweep.cpp (trials, verification, confirmation,
// grid) and guided.cpp (the diagnose -> optimize -> verify loop). Private to tuner/.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ft/core/error.h"
#include "ft/tuner/search.h"

namespace ft::tuner::detail {

double median(std::vector<double> v);
// (max - min) / median of repeated throughput measurements.
double spread(const std::vector<double>& v);
std::string fmt_gains(const std::vector<double>& g);
inline Curve curve_of(const TrialResult& r) { return Curve{r.tokens, r.losses}; }

class Sweep {
 public:
  Sweep(const SweepOptions& o, Journal& j, const TrialFn& run, const DiagnoseFn& diag,
        const ProgressFn& progress)
      : o_(o), journal_(j), run_(run), diag_(diag), progress_(progress) {
    trial_steps_ = o.trial_steps;
    out_.strategy = o.strategy;
    out_.baseline = o.baseline;
    out_.best = o.baseline;
  }

  SweepOutcome run();

 private:
  bool budget_left() const {
    if (o_.budget_trials > 0 && out_.trials_run >= o_.budget_trials) return false;
    if (o_.budget_minutes > 0 && out_.spent_s >= o_.budget_minutes * 60) return false;
    return true;
  }

  std::string budget_text() const {
    return fmt::format("budget spent ({} trials, {:.1f} min of trial time)", out_.trials_run,
                       out_.spent_s / 60);
  }

  int trials_left() const {
    if (o_.budget_trials > 0) return std::max(0, o_.budget_trials - out_.trials_run);
    return planned_left_;
  }

  void decide(int round, const std::string& kind, const std::string& text,
              std::vector<int> trials = {}) {
    out_.decisions.push_back({round, kind, text, std::move(trials)});
  }

  // Steps a short trial of `steps` steps leaves out of its throughput (ft-train's default 2).
  static int warmup_excluded(int steps) { return std::min(2, std::max(0, steps - 1)); }

  Config with_steps(const Config& knobs, int steps) const {
    Config c = knobs;
    c["steps"] = std::to_string(std::max(1, steps));
    c["warmup-excluded"] = std::to_string(warmup_excluded(steps));
    c["quiet"] = "";
    return c;
  }

  // Verify runs cover the same tokens as the baseline's: steps scale by the batch ratio.
  Config verify_config(const Config& knobs) const {
    const double ratio = o_.batch_scale
                             ? o_.batch_scale(o_.baseline) / o_.batch_scale(knobs)
                             : static_cast<double>(global_batch(o_.baseline)) / global_batch(knobs);
    Config c = with_steps(knobs, static_cast<int>(std::lround(o_.verify_steps * ratio)));
    c["warmup-excluded"] = "2";
    return c;
  }

  int min_rounds() const { return std::min(2, std::max(1, o_.confirm_rounds)); }

  const JournalEntry& entry(int id) const { return out_.trials[static_cast<size_t>(id)]; }

  void stop(int round, const std::string& why, std::vector<int> trials = {}) {
    decide(round, "stop", why, std::move(trials));
    out_.stop_reason = why;
  }

  // Runs trial `id` = next id, or replays it from the journal. `post` may turn a finished trial
  // into a rejection before it is journaled (verification).
  const JournalEntry& trial(const std::string& phase, const Config& config,
                            const std::string& change, int round, int repeat,
                            const std::function<void(JournalEntry&)>& post = nullptr,
                            double predicted = 0, const std::string& skip_reason = "");
  void record(const JournalEntry& e);
  // Skip reason when the memory model predicts `knobs` exceeds the limit; empty otherwise.
  std::string memory_skip(const Config& knobs, double* predicted) const;
  const JournalEntry& short_trial(const std::string& phase, const Config& knobs, int round,
                                  int repeat = 0);
  // With --trial-seconds: one baseline run of --trial-steps measures its step time, and every
  // short trial then runs enough steps for the baseline to measure that many seconds (at least
  // --trial-steps, at most kMaxTrialSteps). Replays from the journal like any trial.
  void calibrate();
  // The baseline's verify run, once.
  const JournalEntry* baseline_verify(int round);
  // Runs the candidate for the verify length and compares its curve with the baseline's.
  bool verify(const Config& knobs, int round, bool* failed_to_run);
  // Runs rounds first..first+count-1 of a side-by-side measurement over rows[which]: each round
  // one short trial (journal phase `phase`) per row in confirm_order. Stops early when the
  // budget is spent (the rest of that round is recorded as not run); returns the full rounds.
  int run_rounds(std::vector<ConfirmRow>* rows, const std::vector<size_t>& which,
                 const std::string& phase, int round, int first, int count);
  // Measures `reference` (row 0, named `ref_name`) and `cands` side by side for `rounds` rounds
  // and scores them (*ranked: score_confirmation's order). When no candidate beats the
  // reference but some are faster by the median and lost only one round, those and the
  // reference run `rounds` more rounds and everything is re-scored, once. *complete counts the
  // full rounds of the first measurement plus the extension's.
  std::vector<ConfirmRow> side_by_side(const Config& reference, const std::string& ref_name,
                                       const std::vector<Config>& cands, const std::string& phase,
                                       const std::string& what, int round, int rounds,
                                       std::vector<size_t>* ranked, int* complete);
  // score_confirmation over the rows (at least min(2, rounds) rounds to beat row 0), and a
  // "measure" decision listing every row's median ratio and per-round ratios.
  std::vector<size_t> score_block(std::vector<ConfirmRow>* rows, const std::string& what, int round,
                                  int rounds, int complete);
  // The confirmation round: the baseline and `cands` measured side by side, one short trial each
  // per round, o_.confirm_rounds rounds in alternating order (confirm_order). Fills
  // out_.confirmation and returns its rows other than the baseline ranked by median throughput
  // ratio to the baseline; nullopt when the budget ran out before min_rounds() rounds.
  std::optional<std::vector<size_t>> confirm(const std::vector<Config>& cands, int round);
  void grid();
  void guided();
  // Before the sweep: when the memory model predicts the baseline over --memory-limit, the
  // configurations of the memory knobs (activation checkpointing, micro-batch split with
  // accumulation at the same global batch, ZeRO stages under --dp, QLoRA for a fine-tuning run
  // when no full-training configuration fits) are predicted, those over the limit pruned unrun,
  // the fitting ones measured, and the fastest whose loss converges becomes the baseline. The
  // pruning is checked against the measured trial nearest the limit. False: the sweep stops.
  bool fit_to_memory();
  // Guided: a candidate change and whether it is a loss-stability change (verified, not timed).
  struct Candidate {
    Config knobs;
    bool stability = false;
    std::string knob;  // the finding's knob text; a compute knob: its lost_key (see below)
    double share = 0;  // the finding's share of step time
    // The finding's prediction as a throughput ratio: the diagnosed steady step over its
    // predicted_step_ms (0: the finding predicts nothing).
    double predicted_ratio = 0;
    std::string cls, finding;  // the finding's class and title
  };
  // Records, for each candidate of a round that came from a finding with a prediction, the
  // predicted step time against the one measured side by side (out_.predictions).
  void check_predictions(int round, const std::vector<ConfirmRow>& rows,
                         const std::vector<const Candidate*>& source);
  // False (with a decision) when `c` is outside the --knobs space, was tried before, or is
  // predicted to run out of memory (journaled as skipped); `source` names where it came from.
  bool admit(const Config& c, bool stability, const std::string& source, int round);
  // The findings' knobs applied to the incumbent (at most --candidates), admitted; *promising
  // is set when a finding other than loss stability promises more than --min-gain.
  std::vector<Candidate> finding_candidates(const std::vector<profiler::Finding>& findings,
                                            int round, bool* promising, double step_ms);
  // The micro-batch halved / doubled within the global batch and the other attention
  // implementation, applied to the incumbent and admitted (at most `limit`); a setting an accepted
  // change moved away from is not proposed again (no oscillation).
  std::vector<Candidate> compute_candidates(int round, size_t limit,
                                            const profiler::Diagnosis& diag);
  // The runners-up (g_.carry) applied to the incumbent, at most `limit`, none already in
  // `this_round`; the carry is emptied.
  std::vector<Candidate> carried_candidates(int round, size_t limit,
                                            const std::vector<Config>& this_round);
  // `c`'s setting of a compute knob (attention, micro-batch, grad-accum), defaults filled in.
  std::string compute_knob(const Config& c, const std::string& k) const;
  // `knobs` (verified) becomes the incumbent and the best so far.
  void accept(const Config& knobs, int trial_id);
  // Guided: the baseline and the latest accepted changes (each verified) in a confirmation
  // round; the best is the one with the highest confirmed ratio that beats the baseline beyond
  // noise, else the baseline.
  void guided_confirm();

  SweepOptions o_;  // a copy: fit_to_memory() may replace the baseline
  Journal& journal_;
  const TrialFn& run_;
  const DiagnoseFn& diag_;
  const ProgressFn& progress_;
  SweepOutcome out_;
  struct Accepted {
    Config knobs;
    int trial = -1;   // its first short trial
    int verify = -1;  // its verify run
  };
  std::vector<Accepted> accepted_;  // guided: the accepted changes in order
  struct GuidedState {
    Config inc;                        // the incumbent
    std::set<std::string> tried;       // effective keys of every configuration admitted
    std::set<std::string> space_keys;  // with --knobs: the grid's configurations
    std::set<std::string> left;        // "knob=value" settings accepted changes moved away from
    std::map<std::string, double> rejected;  // finding knob -> its finding's share, not taken
    // Compute knobs measured and not taken, as "patch @ the incumbent's compute settings"
    // (precision, attention, split, checkpointing): not proposed again until one of those
    // settings changes (a new allocator or loader setting leaves the same math to compute).
    std::set<std::string> compute_lost;
    // Runners-up of the last accepting round: candidates that beat the incumbent beyond noise
    // but were not taken, as (the knobs they changed, their description). Measured once more,
    // applied to the new incumbent, in the next round: one round's ranking of two winners is
    // noise-prone (the wrong point of the micro-batch axis can win it).
    std::vector<std::pair<Config, std::string>> carry;
  } g_;
  int last_round_ = 0;
  int trial_steps_ = 0;  // steps of a short trial: --trial-steps, or calibrated (calibrate())
  // The last machine probe, reused as the next trial's "before" when taken moments ago.
  double last_probe_ = 0;
  std::chrono::steady_clock::time_point last_probe_at_{};
  double probe_machine(bool may_reuse);
  int next_id_ = 0;
  int planned_left_ = 0;
};

}  // namespace ft::tuner::detail
