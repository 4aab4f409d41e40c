// sweep.cpp: the sweep engine: journaled, replayable trials, loss-curve verification, the
// confirmation round and the grid strategy (guided.cpp holds the guided loop).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "ft/core/error.h"
#include "sweep_impl.h"

namespace ft::tuner::detail {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// (max - min) / median of repeated throughput measurements.
double spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double m = median(v);
  return m > 0 ? (*hi - *lo) / m : 0;
}

std::string fmt_gains(const std::vector<double>& g) {
  std::string s;
  for (double x : g) s += fmt::format("{}{:+.1f}%", s.empty() ? "" : " ", 100 * x);
  return s;
}

SweepOutcome Sweep::run() {
  if (o_.strategy == "grid") {
    grid();
  } else if (o_.strategy == "guided") {
    guided();
    guided_confirm();
  } else {
    throw ConfigError(fmt::format("--strategy '{}': expected guided or grid", o_.strategy));
  }
  if (static_cast<size_t>(next_id_) < journal_.entries().size()) {
    decide(0, "stop",
           fmt::format("note: the journal holds {} trials beyond this sweep's end",
                       journal_.entries().size() - next_id_));
  }
  return out_;
}

// Runs trial `id` = next id, or replays it from the journal. `post` may turn a finished trial
// into a rejection before it is journaled (verification).
const JournalEntry& Sweep::trial(const std::string& phase, const Config& config,
                                 const std::string& change, int round, int repeat,
                                 const std::function<void(JournalEntry&)>& post, double predicted,
                                 const std::string& skip_reason) {
  const int id = next_id_++;
  if (const JournalEntry* e = journal_.find(id)) {
    if (e->phase != phase || config_key(e->config) != config_key(config)) {
      throw ConfigError(fmt::format(
          "{}: trial {} was '{}' {} but this sweep now asks for '{}' {}; the flags or seed "
          "differ from the journaled sweep (use another --out)",
          journal_.path().string(), id, e->phase, config_key(e->config), phase,
          config_key(config)));
    }
    record(*e);
    return out_.trials.back();
  }
  JournalEntry e;
  e.id = id;
  e.phase = phase;
  e.repeat = repeat;
  e.round = round;
  e.config = config;
  e.change = change;
  e.predicted_mem = predicted;
  if (!skip_reason.empty()) {
    e.skipped = true;
    e.result.status = TrialStatus::kRejected;
    e.result.reason = skip_reason;
  } else {
    e.machine_before = probe_machine(true);
    e.result = run_(fmt::format("trial_{:04d}", id), config);
    e.machine_after = probe_machine(false);
    if (post) post(e);
  }
  journal_.append(e);
  record(e);
  return out_.trials.back();
}

// The CPU speed probe (0 without one). Back-to-back trials share a probe: the last trial's
// "after", when taken under a second ago, is this one's "before" (each probe costs ~10 ms).
double Sweep::probe_machine(bool may_reuse) {
  if (!o_.machine_probe) return 0;
  const auto now = std::chrono::steady_clock::now();
  if (may_reuse && last_probe_ > 0 && now - last_probe_at_ < std::chrono::seconds(1)) {
    return last_probe_;
  }
  last_probe_ = o_.machine_probe();
  last_probe_at_ = std::chrono::steady_clock::now();
  return last_probe_;
}

void Sweep::record(const JournalEntry& e) {
  out_.trials.push_back(e);
  if (!e.skipped) {
    ++out_.trials_run;
    out_.spent_s += e.result.wall_s;
    if (planned_left_ > 0) --planned_left_;
  }
  if (progress_) progress_(out_, trials_left());
}

// Skip reason when the memory model predicts `knobs` exceeds the limit; empty otherwise.
std::string Sweep::memory_skip(const Config& knobs, double* predicted) const {
  *predicted = o_.ft_engine ? predicted_peak(knobs) : 0;
  const double limit = o_.memory_limit;
  if (!o_.memory_skip || limit <= 0 || *predicted <= 0 || *predicted <= limit) return "";
  return fmt::format(
      "skipped: the memory model predicts a {:.1f} MiB peak, over the {:.1f} MiB "
      "limit",
      *predicted / 1048576.0, limit / 1048576.0);
}

const JournalEntry& Sweep::short_trial(const std::string& phase, const Config& knobs, int round,
                                       int repeat) {
  double predicted = 0;
  const std::string skip = memory_skip(knobs, &predicted);
  return trial(phase, with_steps(knobs, trial_steps_), describe_diff(o_.baseline, knobs), round,
               repeat, nullptr, predicted, skip);
}

void Sweep::calibrate() {
  if (o_.trial_seconds <= 0) return;
  const JournalEntry& e = short_trial("calibrate", o_.baseline, 0);
  if (e.result.status != TrialStatus::kOk || e.result.step_ms <= 0) {
    decide(0, "trial",
           fmt::format("calibration run failed ({}); trials keep --trial-steps {}",
                       trial_status_name(e.result.status), o_.trial_steps),
           {e.id});
    return;
  }
  const double want =
      std::ceil(o_.trial_seconds * 1000.0 / e.result.step_ms) + warmup_excluded(o_.trial_steps);
  trial_steps_ = static_cast<int>(
      std::clamp(want, static_cast<double>(o_.trial_steps), static_cast<double>(kMaxTrialSteps)));
  const int measured = trial_steps_ - warmup_excluded(trial_steps_);
  decide(0, "trial",
         fmt::format("trial length: the baseline ran {:.2f} ms/step, so a short trial runs {} "
                     "steps ({} measured, {:.2f} s of the baseline's steps; --trial-seconds {:g})",
                     e.result.step_ms, trial_steps_, measured, measured * e.result.step_ms / 1000.0,
                     o_.trial_seconds),
         {e.id});
}

// The baseline's verify run, once.
const JournalEntry* Sweep::baseline_verify(int round) {
  if (out_.baseline_verify >= 0) return &out_.trials[static_cast<size_t>(out_.baseline_verify)];
  if (!budget_left()) return nullptr;
  const JournalEntry& e =
      trial("verify-baseline", verify_config(o_.baseline), "baseline", round, 0);
  out_.baseline_verify = e.id;
  if (e.result.status != TrialStatus::kOk) {
    decide(round, "stop",
           fmt::format("the baseline's verify run failed ({}: {}); no change can "
                       "be verified",
                       trial_status_name(e.result.status), e.result.reason),
           {e.id});
    return nullptr;
  }
  return &out_.trials[static_cast<size_t>(e.id)];
}

// Runs the candidate for the verify length and compares its curve with the baseline's.
bool Sweep::verify(const Config& knobs, int round, bool* failed_to_run) {
  *failed_to_run = true;
  const JournalEntry* base = baseline_verify(round);
  if (!base || !budget_left()) return false;
  const Curve base_curve = curve_of(base->result);
  const int base_id = base->id;
  VerifyResult vr;
  const JournalEntry& e = trial("verify", verify_config(knobs), describe_diff(o_.baseline, knobs),
                                round, 0, [&](JournalEntry& je) {
                                  if (je.result.status != TrialStatus::kOk) return;
                                  const VerifyResult r =
                                      verify_curve(base_curve, curve_of(je.result), o_.verify);
                                  if (!r.accepted) {
                                    je.result.status = TrialStatus::kRejected;
                                    je.result.reason = "convergence check failed: " + r.reason;
                                  }
                                });
  *failed_to_run = false;
  if (e.result.status == TrialStatus::kRejected) {
    decide(round, "reject",
           fmt::format("{}: faster, but REJECTED by the loss-curve check: {}", e.change,
                       e.result.reason),
           {base_id, e.id});
    return false;
  }
  if (e.result.status != TrialStatus::kOk) {
    decide(round, "reject",
           fmt::format("{}: verify run failed ({}: {})", e.change,
                       trial_status_name(e.result.status), e.result.reason),
           {e.id});
    return false;
  }
  vr = verify_curve(base_curve, curve_of(e.result), o_.verify);
  decide(round, "accept", fmt::format("{}: loss curve verified: {}", e.change, vr.reason),
         {base_id, e.id});
  out_.accepted_verifies.push_back(e.id);
  return true;
}

int Sweep::run_rounds(std::vector<ConfirmRow>* rows, const std::vector<size_t>& which,
                      const std::string& phase, int round, int first, int count) {
  int complete = 0;
  int voids_left = o_.max_void_rounds;
  for (int r = first; r < first + count;) {
    bool all_ran = true;
    double lo = 0, hi = 0;  // the machine probes of this round's trials
    std::vector<int> ids;
    for (size_t j : confirm_order(which.size(), r)) {
      ConfirmRow& row = (*rows)[which[j]];
      if (!budget_left()) {
        all_ran = false;
        row.trials.push_back(-1);
        row.tokens_per_s.push_back(0);
        continue;
      }
      const JournalEntry& e = short_trial(phase, row.knobs, round, r);
      row.trials.push_back(e.id);
      row.tokens_per_s.push_back(e.result.status == TrialStatus::kOk ? e.result.tokens_per_s : 0);
      ids.push_back(e.id);
      for (double m : {e.machine_before, e.machine_after}) {
        if (m <= 0) continue;
        lo = lo > 0 ? std::min(lo, m) : m;
        hi = std::max(hi, m);
      }
    }
    if (!all_ran) break;
    const double drift = lo > 0 ? hi / lo - 1 : 0;
    if (o_.machine_drift > 0 && drift > o_.machine_drift && voids_left > 0) {
      --voids_left;
      for (size_t j : which) {  // forget the round: its ratios compare two machine states
        (*rows)[j].trials.pop_back();
        (*rows)[j].tokens_per_s.pop_back();
      }
      decide(round, "trial",
             fmt::format("round {} voided and run again: the machine's speed moved by {:.0f}% "
                         "during it (probes {:.0f} to {:.0f}, limit {:.0f}%)",
                         r + 1, 100 * drift, lo, hi, 100 * o_.machine_drift),
             ids);
      continue;
    }
    ++complete;
    ++r;
  }
  return complete;
}

std::vector<ConfirmRow> Sweep::side_by_side(const Config& reference, const std::string& ref_name,
                                            const std::vector<Config>& cands,
                                            const std::string& phase, const std::string& what,
                                            int round, int rounds, std::vector<size_t>* ranked,
                                            int* complete) {
  std::vector<ConfirmRow> rows;
  const auto add_row = [&](const Config& c, const std::string& change) {
    ConfirmRow row;
    row.knobs = c;
    row.change = change;
    rows.push_back(std::move(row));
  };
  add_row(reference, ref_name);
  for (const Config& c : cands) add_row(c, describe_diff(o_.baseline, c));
  std::vector<size_t> all(rows.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  *complete = run_rounds(&rows, all, phase, round, 0, rounds);
  *ranked = score_block(&rows, what, round, rounds, *complete);
  if (*complete < rounds) return rows;
  // Undecided: a candidate is faster by the median than every candidate that beats the
  // reference (or nothing does), but lost one round. Those candidates and the reference run as
  // many rounds again, and all rounds are re-scored (the sign test then asks e.g. 5 of 6), once;
  // so one noisy round does not hand the step to a decided but slower candidate.
  std::vector<size_t> promising{0};
  std::string names;
  for (size_t i : *ranked) {  // best median first
    const ConfirmRow& row = rows[i];
    if (row.beats_baseline) break;  // the rest are slower by the median than a decided one
    const int wins = static_cast<int>(
        std::count_if(row.ratios.begin(), row.ratios.end(), [](double x) { return x > 1.0; }));
    if (row.median_ratio > 1 + o_.min_improvement &&
        wins + 1 >= static_cast<int>(row.ratios.size())) {
      promising.push_back(i);
      names += (names.empty() ? "" : "; ") + row.change;
    }
  }
  if (promising.size() == 1) return rows;
  decide(round, "trial",
         fmt::format("undecided: {} faster by the median but slower in one round; {} more rounds "
                     "for {} and the {}",
                     what, rounds, names, ref_name));
  const int more = run_rounds(&rows, promising, phase, round, rounds, rounds);
  *ranked = score_block(&rows, what + ", extended", round, rounds + more, *complete + more);
  *complete += more;
  return rows;
}

std::vector<size_t> Sweep::score_block(std::vector<ConfirmRow>* rows, const std::string& what,
                                       int round, int rounds, int complete) {
  const auto ranked = score_confirmation(rows, o_.min_improvement, std::min(2, rounds));
  const ConfirmRow& ref = rows->front();
  std::string text = fmt::format(
      "{} ({} of {} rounds, each configuration once per round, order alternating): {} median "
      "{:.0f} tokens/s",
      what, complete, rounds, ref.change, ref.median_tps);
  std::vector<int> ids;
  for (const auto& row : *rows) {
    for (int id : row.trials) {
      if (id >= 0) ids.push_back(id);
    }
  }
  for (size_t i : ranked) {
    const ConfirmRow& row = (*rows)[i];
    std::string ratios;
    for (double x : row.ratios) ratios += fmt::format("{}{:.3f}", ratios.empty() ? "" : " ", x);
    if (row.ratios.empty()) {  // never measured beside the reference (budget, or it failed)
      text += fmt::format("; {}: not measured", row.change);
      continue;
    }
    text += fmt::format("; {}: x{:.3f} (per-round ratios {}){}", row.change, row.median_ratio,
                        ratios, row.beats_baseline ? ", faster beyond noise" : "");
  }
  decide(round, "measure", text, ids);
  return ranked;
}

std::optional<std::vector<size_t>> Sweep::confirm(const std::vector<Config>& cands, int round) {
  int complete = 0;
  std::vector<size_t> ranked;
  out_.confirmation = side_by_side(o_.baseline, "baseline", cands, "confirm", "confirmation round",
                                   round, o_.confirm_rounds, &ranked, &complete);
  if (complete < min_rounds()) return std::nullopt;
  return ranked;
}

void Sweep::grid() {
  if (!fit_to_memory()) return;
  const auto space =
      o_.space.empty() ? default_space(o_.baseline, o_.train_flags, o_.batch, o_.ranks) : o_.space;
  const std::vector<Config> configs =
      grid_configs(o_.baseline, space, o_.seed, o_.batch, o_.train_defaults);
  planned_left_ = static_cast<int>(configs.size()) + (o_.trial_seconds > 0 ? 1 : 0);
  calibrate();
  decide(0, "trial",
         fmt::format("grid of {} configurations over {} dimensions (seeded order, "
                     "seed {})",
                     configs.size(), space.size(), o_.seed));
  std::vector<std::pair<double, int>> ranked;  // (tokens/s, trial id)
  std::map<int, Config> knobs_of;
  for (const Config& c : configs) {
    if (!budget_left()) {
      decide(0, "stop",
             budget_text() +
                 fmt::format(" after {} of {} grid points", knobs_of.size(), configs.size()));
      break;
    }
    const bool is_base = &c == &configs.front();
    const JournalEntry& e = short_trial(is_base ? "baseline" : "grid", c, 0);
    knobs_of[e.id] = c;
    if (is_base) out_.baseline_trial = e.id;
    if (is_base && !e.skipped && e.result.status != TrialStatus::kOk) {
      // Nothing can be compared with a baseline that did not run.
      return stop(0,
                  fmt::format("the baseline trial failed ({}: {})",
                              trial_status_name(e.result.status), e.result.reason),
                  {e.id});
    }
    if (e.skipped) decide(0, "skip", e.change + ": " + e.result.reason, {e.id});
    if (e.result.status == TrialStatus::kOk) ranked.push_back({e.result.tokens_per_s, e.id});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  out_.best_trial = out_.baseline_trial;
  const double base_tps =
      out_.baseline_trial >= 0 &&
              out_.trials[static_cast<size_t>(out_.baseline_trial)].result.status ==
                  TrialStatus::kOk
          ? out_.trials[static_cast<size_t>(out_.baseline_trial)].result.tokens_per_s
          : 0;
  // The configurations to verify, in order: those of the confirmation round that beat the
  // baseline beyond noise, by confirmed ratio; without one, the single trials by throughput
  // down to the baseline.
  std::vector<int> order;
  std::map<int, double> confirmed_ratio;
  bool baseline_cut = false;
  if (o_.confirm_rounds > 0 && base_tps > 0) {
    std::vector<int> top;
    std::vector<Config> cands;
    for (const auto& [tps, id] : ranked) {
      if (static_cast<int>(top.size()) >= o_.confirm_top) break;
      if (id == out_.baseline_trial) continue;
      top.push_back(id);
      cands.push_back(knobs_of[id]);
    }
    if (top.empty()) {
      decide(0, "accept", "no configuration other than the baseline ran; kept");
      out_.confirmed_ratio = 1;
    } else {
      decide(0, "trial",
             fmt::format("the {} fastest single trials go to a confirmation round with the "
                         "baseline: one measurement per point is not trusted",
                         top.size()),
             top);
      const auto rank = confirm(cands, 0);
      if (!rank) {
        decide(0, "stop", budget_text() + "; the confirmation round could not finish");
      } else {
        for (size_t i : *rank) {
          if (!out_.confirmation[i].beats_baseline) continue;
          order.push_back(top[i - 1]);
          confirmed_ratio[top[i - 1]] = out_.confirmation[i].median_ratio;
        }
        if (order.empty()) {
          decide(0, "accept",
                 "no configuration beat the baseline beyond noise in the confirmation round "
                 "(every round faster and the median ratio above 1 + " +
                     fmt::format("{:.0f}%); the baseline is kept", 100 * o_.min_improvement),
                 {out_.baseline_trial});
          out_.confirmed_ratio = 1;
        }
      }
    }
  } else {
    for (const auto& [tps, id] : ranked) {
      if (id == out_.baseline_trial) {
        baseline_cut = true;
        break;
      }
      order.push_back(id);
    }
  }
  int verified = 0;
  bool found = false;
  for (int id : order) {
    const double tps = out_.trials[static_cast<size_t>(id)].result.tokens_per_s;
    if (verified >= o_.max_verify) {
      decide(0, "stop",
             fmt::format("{} fastest configurations failed verification; keeping "
                         "the baseline",
                         verified));
      break;
    }
    ++verified;
    const Config& c = knobs_of[id];
    decide(0, "trial",
           confirmed_ratio.count(id)
               ? fmt::format("{}: fastest remaining in the confirmation round (x{:.3f} the "
                             "baseline); verifying",
                             describe_diff(o_.baseline, c), confirmed_ratio[id])
               : fmt::format("{}: fastest remaining ({:.0f} tokens/s, {:+.1f}% vs "
                             "baseline); verifying",
                             describe_diff(o_.baseline, c), tps,
                             base_tps > 0 ? 100 * (tps / base_tps - 1) : 0),
           {id});
    bool failed = false;
    if (verify(c, 0, &failed)) {
      out_.best = c;
      out_.best_trial = id;
      out_.best_verify = out_.accepted_verifies.back();
      if (confirmed_ratio.count(id)) out_.confirmed_ratio = confirmed_ratio[id];
      found = true;
      break;
    }
    if (failed) {
      decide(0, "stop", budget_text() + "; verification could not run");
      break;
    }
  }
  if (!found && baseline_cut && (out_.decisions.empty() || out_.decisions.back().kind != "stop")) {
    decide(0, "accept",
           fmt::format("the baseline is the fastest remaining configuration "
                       "({:.0f} tokens/s); kept",
                       base_tps),
           {out_.baseline_trial});
  }
  if (!found && !confirmed_ratio.empty() && out_.confirmed_ratio == 0) out_.confirmed_ratio = 1;
  if (out_.stop_reason.empty()) out_.stop_reason = "grid done";
  if (!out_.decisions.empty() && out_.decisions.back().kind == "stop") {
    out_.stop_reason = out_.decisions.back().text;
  }
}

}  // namespace ft::tuner::detail

namespace ft::tuner {

SweepOutcome run_sweep(const SweepOptions& options, Journal& journal, const TrialFn& run,
                       const DiagnoseFn& diagnose, const ProgressFn& progress) {
  if (options.trial_steps < 2) throw ConfigError("--trial-steps must be at least 2");
  if (options.trial_seconds < 0 || !std::isfinite(options.trial_seconds)) {
    throw ConfigError("--trial-seconds must be a finite number >= 0");
  }
  if (options.verify_steps < 5) throw ConfigError("--verify-steps must be at least 5");
  if (options.strategy == "guided" && options.repeats < 1) {
    throw ConfigError(
        "--repeats must be at least 1: guided accepts a change only on paired "
        "re-measurement");
  }
  if (options.confirm_rounds > 0 && options.confirm_top < 1) {
    throw ConfigError("--confirm-top must be at least 1 (or --confirm-rounds 0)");
  }
  detail::Sweep s(options, journal, run, diagnose, progress);
  return s.run();
}

std::string baseline_failure(const SweepOutcome& o) {
  for (const int id : {o.baseline_trial, o.baseline_verify}) {
    if (id < 0 || static_cast<size_t>(id) >= o.trials.size()) continue;
    const JournalEntry& e = o.trials[static_cast<size_t>(id)];
    if (!e.skipped && e.result.status != TrialStatus::kOk) {
      return fmt::format("the baseline's {} failed ({}: {})",
                         e.phase == "verify-baseline" ? "verify run" : "trial",
                         trial_status_name(e.result.status), e.result.reason);
    }
  }
  if (o.baseline_trial < 0 && o.trials_run == 0) return "no trial ran: " + o.stop_reason;
  return "";
}

}  // namespace ft::tuner
