// sweep.cpp: grid and guided sweeps over journaled, replayable trials.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "ft/core/error.h"
#include "ft/tuner/search.h"

namespace ft::tuner {
namespace {

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

Curve curve_of(const TrialResult& r) { return Curve{r.tokens, r.losses}; }

class Sweep {
 public:
  Sweep(const SweepOptions& o, Journal& j, const TrialFn& run, const DiagnoseFn& diag,
        const ProgressFn& progress)
      : o_(o), journal_(j), run_(run), diag_(diag), progress_(progress) {
    out_.strategy = o.strategy;
    out_.baseline = o.baseline;
    out_.best = o.baseline;
  }

  SweepOutcome run() {
    if (o_.strategy == "grid") {
      grid();
    } else if (o_.strategy == "guided") {
      guided();
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

  Config with_steps(const Config& knobs, int steps) const {
    Config c = knobs;
    c["steps"] = std::to_string(std::max(1, steps));
    c["warmup-excluded"] = std::to_string(std::min(2, std::max(0, steps - 1)));
    c["quiet"] = "";
    return c;
  }

  // Verify runs cover the same tokens as the baseline's: steps scale by the batch ratio.
  Config verify_config(const Config& knobs) const {
    const double ratio = static_cast<double>(global_batch(o_.baseline)) / global_batch(knobs);
    Config c = with_steps(knobs, static_cast<int>(std::lround(o_.verify_steps * ratio)));
    c["warmup-excluded"] = "2";
    return c;
  }

  // Runs trial `id` = next id, or replays it from the journal. `post` may turn a finished trial
  // into a rejection before it is journaled (verification).
  const JournalEntry& trial(const std::string& phase, const Config& config,
                            const std::string& change, int round, int repeat,
                            const std::function<void(JournalEntry&)>& post = nullptr,
                            double predicted = 0, const std::string& skip_reason = "") {
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
      e.result = run_(fmt::format("trial_{:04d}", id), config);
      if (post) post(e);
    }
    journal_.append(e);
    record(e);
    return out_.trials.back();
  }

  void record(const JournalEntry& e) {
    out_.trials.push_back(e);
    if (!e.skipped) {
      ++out_.trials_run;
      out_.spent_s += e.result.wall_s;
      if (planned_left_ > 0) --planned_left_;
    }
    if (progress_) progress_(out_, trials_left());
  }

  // Skip reason when the memory model predicts `knobs` exceeds the limit; empty otherwise.
  std::string memory_skip(const Config& knobs, double* predicted) const {
    *predicted = predicted_peak(knobs);
    const double limit = o_.memory_limit;
    if (!o_.memory_skip || limit <= 0 || *predicted <= 0 || *predicted <= limit) return "";
    return fmt::format(
        "skipped: the memory model predicts a {:.1f} MiB peak, over the {:.1f} MiB "
        "limit",
        *predicted / 1048576.0, limit / 1048576.0);
  }

  const JournalEntry& short_trial(const std::string& phase, const Config& knobs, int round,
                                  int repeat = 0) {
    double predicted = 0;
    const std::string skip = memory_skip(knobs, &predicted);
    return trial(phase, with_steps(knobs, o_.trial_steps), describe_diff(o_.baseline, knobs), round,
                 repeat, nullptr, predicted, skip);
  }

  // The baseline's verify run, once.
  const JournalEntry* baseline_verify(int round) {
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
  bool verify(const Config& knobs, int round, bool* failed_to_run) {
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

  void grid() {
    const auto space = o_.space.empty()
                           ? default_space(o_.baseline, o_.train_flags, o_.batch, o_.ranks)
                           : o_.space;
    const std::vector<Config> configs =
        grid_configs(o_.baseline, space, o_.seed, o_.batch, o_.train_defaults);
    planned_left_ = static_cast<int>(configs.size());
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
      if (e.skipped) decide(0, "skip", e.change + ": " + e.result.reason, {e.id});
      if (e.result.status == TrialStatus::kOk) ranked.push_back({e.result.tokens_per_s, e.id});
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    out_.best_trial = out_.baseline_trial;
    int verified = 0;
    const double base_tps =
        out_.baseline_trial >= 0
            ? out_.trials[static_cast<size_t>(out_.baseline_trial)].result.tokens_per_s
            : 0;
    for (const auto& [tps, id] : ranked) {
      if (id == out_.baseline_trial) {
        decide(0, "accept",
               fmt::format("the baseline is the fastest remaining configuration "
                           "({:.0f} tokens/s); kept",
                           tps),
               {id});
        break;
      }
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
             fmt::format("{}: fastest remaining ({:.0f} tokens/s, {:+.1f}% vs "
                         "baseline); verifying",
                         describe_diff(o_.baseline, c), tps,
                         base_tps > 0 ? 100 * (tps / base_tps - 1) : 0),
             {id});
      bool failed = false;
      if (verify(c, 0, &failed)) {
        out_.best = c;
        out_.best_trial = id;
        break;
      }
      if (failed) {
        decide(0, "stop", budget_text() + "; verification could not run");
        break;
      }
    }
    if (out_.stop_reason.empty()) out_.stop_reason = "grid done";
    if (!out_.decisions.empty() && out_.decisions.back().kind == "stop") {
      out_.stop_reason = out_.decisions.back().text;
    }
  }

  void guided() {
    planned_left_ = -1;
    const JournalEntry& b = short_trial("baseline", o_.baseline, 0);
    out_.baseline_trial = out_.best_trial = b.id;
    if (b.result.status != TrialStatus::kOk) {
      stop(0,
           fmt::format("the baseline trial failed ({}: {})", trial_status_name(b.result.status),
                       b.result.reason),
           {b.id});
      return;
    }
    Config inc = o_.baseline;
    std::vector<double> inc_samples{b.result.tokens_per_s};
    std::set<std::string> tried{effective_key(inc, o_.train_defaults)};
    for (int round = 1;; ++round) {
      if (!budget_left()) return stop(round, budget_text());
      std::vector<Finding> findings = diag_(round, with_steps(inc, o_.trial_steps));
      ++out_.diagnoses;
      std::stable_sort(findings.begin(), findings.end(),
                       [](const Finding& x, const Finding& y) { return x.share > y.share; });
      std::string summary;
      for (size_t i = 0; i < findings.size() && i < 4; ++i) {
        summary += fmt::format("{}{} {:.0f}% ({})", i ? "; " : "", findings[i].cls,
                               100 * findings[i].share, findings[i].title);
      }
      decide(round, "diagnose",
             fmt::format("diagnosis of {}: {}", describe_diff(o_.baseline, inc),
                         summary.empty() ? "no findings" : summary));
      std::vector<std::pair<Config, bool>> cands;  // (knobs, is a loss-stability change)
      bool promising = false;
      for (const Finding& f : findings) {
        const bool stability = f.cls == "loss" && f.severity != "info";
        if (!stability && f.share < o_.min_gain) continue;
        promising = promising || !stability;
        // A candidate from a patch: the finding's knob (`knob` is its text) or a derived one.
        auto consider = [&](const Config& patch, const std::string& knob) {
          if (!stability && (patch.count("lr") || patch.count("warmup") || patch.count("min-lr"))) {
            decide(round, "skip",
                   fmt::format("knob '{}': LR/warmup changes only for an unstable "
                               "loss finding",
                               knob));
            return;
          }
          std::string why;
          const auto c = apply_knob(inc, patch, o_.batch, &why);
          if (!c) {
            decide(round, "skip", fmt::format("knob '{}': {}", knob, why));
            return;
          }
          if (!tried.insert(effective_key(*c, o_.train_defaults)).second) return;
          double predicted = 0;
          const std::string skip = memory_skip(*c, &predicted);
          if (!skip.empty()) {
            const JournalEntry& e =
                trial("trial", with_steps(*c, o_.trial_steps), describe_diff(o_.baseline, *c),
                      round, 0, nullptr, predicted, skip);
            decide(round, "skip", fmt::format("{} (from '{}'): {}", e.change, f.title, skip),
                   {e.id});
            return;
          }
          cands.push_back({*c, stability});
        };
        for (const std::string& knob : f.knobs) {
          if (static_cast<int>(cands.size()) >= o_.candidates_per_round) break;
          Config patch;
          try {
            // ft-diagnose may annotate a knob: "--micro-batch 16 (doubles the global batch)".
            patch = parse_flag_words(split_words(knob.substr(0, knob.find(" ("))));
          } catch (const ConfigError& e) {
            decide(round, "skip",
                   fmt::format("knob '{}' of finding '{}': {}", knob, f.title, e.what()));
            continue;
          }
          consider(patch, knob);
        }
        // The parallel knobs the finding's class implies (derived_knobs), after its own.
        for (const Config& patch : derived_knobs(f, inc)) {
          if (static_cast<int>(cands.size()) >= o_.candidates_per_round) break;
          std::string words;
          for (const auto& w : config_args(patch)) words += (words.empty() ? "" : " ") + w;
          consider(patch, words + " (derived from the " + f.cls + " finding)");
        }
      }
      if (!promising && cands.empty()) {
        return stop(round, fmt::format("no finding promises more than {:.0f}% of step time",
                                       100 * o_.min_gain));
      }
      if (cands.empty()) {
        return stop(round, "every knob the findings name was tried, skipped or not applicable");
      }
      std::vector<std::pair<int, size_t>> ok;  // (trial id, candidate index)
      for (size_t i = 0; i < cands.size(); ++i) {
        if (!budget_left()) return stop(round, budget_text());
        const JournalEntry& e = short_trial("trial", cands[i].first, round);
        decide(round, "trial",
               fmt::format("{}: {} {:.0f} tokens/s{}", e.change, trial_status_name(e.result.status),
                           e.result.tokens_per_s,
                           e.result.reason.empty() ? "" : " (" + e.result.reason + ")"),
               {e.id});
        if (e.result.status == TrialStatus::kOk) ok.push_back({e.id, i});
      }
      std::stable_sort(ok.begin(), ok.end(), [&](const auto& x, const auto& y) {
        return entry(x.first).result.tokens_per_s > entry(y.first).result.tokens_per_s;
      });
      bool accepted = false;
      for (const auto& [first_id, ci] : ok) {
        const Config knobs = cands[ci].first;
        const double first_tps = entry(first_id).result.tokens_per_s;
        const std::string change = entry(first_id).change;
        if (!cands[ci].second) {
          // Screening: a first trial within the incumbent's measured spread of a gain still
          // goes to the paired measurement (the two were measured at different times).
          const double inc_now = median(inc_samples);
          if (first_tps <= inc_now * (1 + o_.min_improvement - spread(inc_samples))) {
            decide(round, "reject",
                   fmt::format("{}: {:.0f} tokens/s is not faster than the incumbent's "
                               "{:.0f} (screening allows its measured spread, {:.0f}%)",
                               change, first_tps, inc_now, 100 * spread(inc_samples)),
                   {first_id});
            continue;
          }
          // Paired, alternating measurements: (incumbent's latest, candidate's first trial),
          // then I, C per repeat. Faster only if every pair favours the candidate (a sign test
          // against the load noise both share) and the median paired gain exceeds the floor.
          std::vector<double> inc_block{inc_samples.back()}, cand_block{first_tps};
          std::vector<double> gains{first_tps / inc_samples.back() - 1};
          std::vector<int> ids{first_id};
          for (int r = 1; r <= o_.repeats && budget_left(); ++r) {
            const JournalEntry& ei = short_trial("repeat", inc, round, r);
            ids.push_back(ei.id);
            const bool iok = ei.result.status == TrialStatus::kOk;
            const double itps = ei.result.tokens_per_s;
            if (iok) inc_block.push_back(itps);
            if (!budget_left()) break;
            const JournalEntry& ec = short_trial("repeat", knobs, round, r);
            ids.push_back(ec.id);
            if (ec.result.status == TrialStatus::kOk) {
              cand_block.push_back(ec.result.tokens_per_s);
              if (iok && itps > 0) gains.push_back(ec.result.tokens_per_s / itps - 1);
            }
          }
          const double noise = std::max(spread(inc_block), spread(cand_block));
          const double gain = median(gains);
          const double worst = *std::min_element(gains.begin(), gains.end());
          const int need = 1 + std::min(o_.repeats, 1);
          if (static_cast<int>(gains.size()) < need || worst <= 0 || gain <= o_.min_improvement) {
            decide(round, "reject",
                   fmt::format("{}: not faster beyond noise: paired gains {} (median {:+.1f}%, "
                               "worst {:+.1f}%; needs every pair > 0 and median > {:.0f}%; "
                               "spread of repeats {:.0f}%)",
                               change, fmt_gains(gains), 100 * gain, 100 * worst,
                               100 * o_.min_improvement, 100 * noise),
                   ids);
            continue;
          }
          decide(round, "measure",
                 fmt::format("{}: faster in every alternating pair, paired gains {} (median "
                             "{:+.1f}%, spread of repeats {:.0f}%); verifying the loss curve",
                             change, fmt_gains(gains), 100 * gain, 100 * noise),
                 ids);
          bool failed = false;
          if (!verify(knobs, round, &failed)) {
            if (failed) return stop(round, budget_text() + "; verification could not run");
            continue;
          }
          inc_samples = cand_block;
        } else {
          bool failed = false;
          if (!verify(knobs, round, &failed)) {
            if (failed) return stop(round, budget_text() + "; verification could not run");
            continue;
          }
          inc_samples = {first_tps};
        }
        inc = knobs;
        out_.best = knobs;
        out_.best_trial = first_id;
        accepted = true;
        break;
      }
      if (!accepted && !budget_left()) return stop(round, budget_text());
      if (!accepted) {
        return stop(round, fmt::format("no candidate of round {} beat the incumbent beyond noise "
                                       "and passed verification",
                                       round));
      }
    }
  }

  const JournalEntry& entry(int id) const { return out_.trials[static_cast<size_t>(id)]; }

  void stop(int round, const std::string& why, std::vector<int> trials = {}) {
    decide(round, "stop", why, std::move(trials));
    out_.stop_reason = why;
  }

  static std::vector<std::string> split_words(const std::string& s) {
    std::vector<std::string> w;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j > i) w.push_back(s.substr(i, j - i));
      i = j;
    }
    return w;
  }

  const SweepOptions& o_;
  Journal& journal_;
  const TrialFn& run_;
  const DiagnoseFn& diag_;
  const ProgressFn& progress_;
  SweepOutcome out_;
  int next_id_ = 0;
  int planned_left_ = 0;
};

}  // namespace

SweepOutcome run_sweep(const SweepOptions& options, Journal& journal, const TrialFn& run,
                       const DiagnoseFn& diagnose, const ProgressFn& progress) {
  if (options.trial_steps < 2) throw ConfigError("--trial-steps must be at least 2");
  if (options.verify_steps < 5) throw ConfigError("--verify-steps must be at least 5");
  Sweep s(options, journal, run, diagnose, progress);
  return s.run();
}

}  // namespace ft::tuner
