// guided.cpp: the guided strategy: diagnose -> optimize -> verify rounds, then confirmation.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "ft/profiler/findings.h"
#include "sweep_impl.h"

namespace ft::tuner::detail {
namespace {

using profiler::Diagnosis;
using profiler::Finding;

// The share of step time a diagnosis puts in `c` (report.json's totals; 0 when unknown).
double total_share(const Diagnosis& d, profiler::WaitClass c) {
  const double v = d.totals[static_cast<size_t>(c)];
  return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0;
}
double compute_share(const Diagnosis& d) { return total_share(d, profiler::WaitClass::kCompute); }

// The mean steady step of a diagnosis, the step its findings' predicted_step_ms replace (the
// run's --warmup-excluded when it records one, else the classifier's default).
double steady_step_ms(const Diagnosis& d) {
  profiler::RunInfo run;
  if (const auto it = d.config.find("warmup-excluded"); it != d.config.end()) {
    try {
      run.warmup_excluded = std::stoi(it->second);
    } catch (const std::exception&) {  // the classifier's default
    }
  }
  double sum = 0;
  int n = 0;
  for (const profiler::StepBreakdown* s : profiler::steady_steps(d.steps, run)) {
    sum += s->wall_ms;
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

double median_of_steps(const SweepOutcome& o, const std::vector<int>& trials) {
  std::vector<double> v;
  for (int id : trials) {
    if (id < 0 || static_cast<size_t>(id) >= o.trials.size()) continue;
    const JournalEntry& e = o.trials[static_cast<size_t>(id)];
    if (e.result.status == TrialStatus::kOk && e.result.step_ms > 0) v.push_back(e.result.step_ms);
  }
  return v.empty() ? 0 : median(v);
}

std::vector<std::string> split_words(const std::string& s) {
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

// The knobs `to` sets differently from `from`.
Config changed_knobs(const Config& from, const Config& to) {
  Config patch;
  for (const auto& [k, v] : to) {
    if (const auto it = from.find(k); it == from.end() || it->second != v) patch[k] = v;
  }
  return patch;
}

}  // namespace

bool Sweep::admit(const Config& c, bool stability, const std::string& source, int round) {
  const std::string key = effective_key(c, o_.train_defaults);
  if (!stability && !g_.space_keys.empty() && !g_.space_keys.count(key)) {
    decide(round, "skip",
           fmt::format("{} ({}): outside the search space (--knobs and the batch rule define "
                       "it for grid and guided alike)",
                       describe_diff(o_.baseline, c), source));
    return false;
  }
  if (!g_.tried.insert(key).second) return false;
  double predicted = 0;
  const std::string skip = memory_skip(c, &predicted);
  if (!skip.empty()) {
    const JournalEntry& e =
        trial("trial", with_steps(c, trial_steps_), describe_diff(o_.baseline, c), round, 0,
              nullptr, predicted, skip);
    decide(round, "skip", fmt::format("{} ({}): {}", e.change, source, skip), {e.id});
    return false;
  }
  return true;
}

void Sweep::check_predictions(int round, const std::vector<ConfirmRow>& rows,
                              const std::vector<const Candidate*>& source) {
  // Row 0 is the incumbent; row i + 1 is fast[i], whose finding candidate is source[i].
  const double inc_ms = median_of_steps(out_, rows[0].trials);
  for (size_t i = 0; i < source.size() && i + 1 < rows.size(); ++i) {
    const Candidate* c = source[i];
    const ConfirmRow& row = rows[i + 1];
    if (!c || c->predicted_ratio <= 0 || row.median_ratio <= 0 || inc_ms <= 0) continue;
    PredictionCheck p;
    p.round = round;
    p.cls = c->cls;
    p.finding = c->finding;
    p.knob = row.change;
    // In the side-by-side round's terms: the incumbent's measured step over the predicted and
    // the measured throughput ratio (tokens per step may change with the knob).
    p.incumbent_step_ms = inc_ms;
    p.predicted_step_ms = inc_ms / c->predicted_ratio;
    p.measured_step_ms = inc_ms / row.median_ratio;
    p.error = p.predicted_step_ms / p.measured_step_ms - 1;
    p.trials = row.trials;
    p.trials.insert(p.trials.end(), rows[0].trials.begin(), rows[0].trials.end());
    decide(round, "predict",
           fmt::format("{} (finding '{}', {}): predicted {:.2f} ms/step, measured {:.2f} "
                       "(incumbent {:.2f}): error {:+.1f}%",
                       p.knob, p.finding, p.cls, p.predicted_step_ms, p.measured_step_ms, inc_ms,
                       100 * p.error),
           p.trials);
    out_.predictions.push_back(std::move(p));
  }
}

std::vector<Sweep::Candidate> Sweep::finding_candidates(const std::vector<Finding>& findings,
                                                        int round, bool* promising,
                                                        double step_ms) {
  std::vector<Candidate> cands;
  *promising = false;
  // The findings by predicted gain (their share where they predict nothing), so the round's
  // slots go to the largest predicted saving first.
  const auto gain = [&](const Finding& f) {
    return f.predicted_step_ms >= 0 && step_ms > 0 ? 1 - f.predicted_step_ms / step_ms : f.share;
  };
  std::vector<const Finding*> order;
  for (const Finding& f : findings) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(),
                   [&](const Finding* a, const Finding* b) { return gain(*a) > gain(*b); });
  for (const Finding* fp : order) {
    const Finding& f = *fp;
    const bool stability = f.cls == "loss" && f.severity != profiler::Severity::kInfo;
    if (!stability && f.share < o_.min_gain) continue;
    if (!stability && f.predicted_step_ms >= 0 && step_ms > 0 && gain(f) < o_.min_improvement) {
      decide(round, "skip",
             fmt::format("finding '{}': predicted to save {:.1f}% of the step ({:.2f} -> {:.2f} "
                         "ms), under the {:.0f}% noise floor: not measured",
                         f.title, 100 * gain(f), step_ms, f.predicted_step_ms,
                         100 * o_.min_improvement));
      continue;
    }
    *promising = *promising || !stability;
    const double predicted_ratio =
        f.predicted_step_ms > 0 && step_ms > 0 ? step_ms / f.predicted_step_ms : 0;
    // A candidate from a patch: the finding's knob (`knob` is its text) or a derived one.
    const auto consider = [&](const Config& patch, const std::string& knob) {
      if (const auto it = g_.rejected.find(knob);
          it != g_.rejected.end() && !stability && f.share < 1.5 * it->second) {
        decide(round, "skip",
               fmt::format("knob '{}': not taken (not faster, or refused by verification) when "
                           "its finding stood at {:.0f}% of step time; retried once the finding "
                           "reaches 1.5x that (now {:.0f}%)",
                           knob, 100 * it->second, 100 * f.share));
        return;
      }
      if (!stability && (patch.count("lr") || patch.count("warmup") || patch.count("min-lr"))) {
        decide(round, "skip",
               fmt::format("knob '{}': LR/warmup changes only for an unstable loss finding", knob));
        return;
      }
      std::string why;
      const auto c = apply_knob(g_.inc, patch, o_.batch, &why);
      if (!c) {
        decide(round, "skip", fmt::format("knob '{}': {}", knob, why));
        return;
      }
      if (admit(*c, stability, fmt::format("knob '{}' of finding '{}'", knob, f.title), round)) {
        cands.push_back({*c, stability, knob, f.share, predicted_ratio, f.cls, f.title});
      }
    };
    if (o_.finding_patches) {  // any program: its knobs that fix the finding's class
      for (const Config& patch : o_.finding_patches(f, g_.inc)) {
        if (static_cast<int>(cands.size()) >= o_.candidates_per_round) break;
        std::string words;
        for (const auto& [k, v] : patch) words += (words.empty() ? "" : " ") + k + "=" + v;
        consider(patch, words + " (fixes " + f.cls + ")");
      }
      continue;
    }
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
    for (const Config& patch : derived_knobs(f, g_.inc)) {
      if (static_cast<int>(cands.size()) >= o_.candidates_per_round) break;
      std::string words;
      for (const auto& w : config_args(patch)) words += (words.empty() ? "" : " ") + w;
      consider(patch, words + " (derived from the " + f.cls + " finding)");
    }
  }
  return cands;
}

std::string Sweep::compute_knob(const Config& c, const std::string& k) const {
  if (k == "attention") return effective_attention(c, o_.train_defaults);
  if (const auto it = c.find(k); it != c.end()) return it->second;
  if (const auto it = o_.train_defaults.find(k); it != o_.train_defaults.end()) return it->second;
  // ft-train's defaults.
  static const std::map<std::string, std::string> kDefaults = {
      {"micro-batch", "8"}, {"grad-accum", "1"}, {"precision", "fp32"}, {"checkpoint", "none"}};
  const auto it = kDefaults.find(k);
  return it != kDefaults.end() ? it->second : "1";
}

std::vector<Sweep::Candidate> Sweep::compute_candidates(int round, size_t limit,
                                                        const Diagnosis& diag) {
  // The micro-batch axis at a fixed global batch is a line search: its nearest points on both
  // sides (B/2 x 2K, 2B x K/2), the other attention, then the points two steps away (B/4 x 4K,
  // 4B x K/4), so one round measures the axis two steps deep when the slots allow.
  std::vector<Config> patches;
  const int b = std::stoi(compute_knob(g_.inc, "micro-batch"));
  const int k = std::stoi(compute_knob(g_.inc, "grad-accum"));
  const auto split = [&](int f, bool smaller) {
    if (smaller ? b % f != 0 : k % f != 0) return;
    patches.push_back({{"micro-batch", std::to_string(smaller ? b / f : b * f)},
                       {"grad-accum", std::to_string(smaller ? k * f : k / f)}});
  };
  split(2, true);
  split(2, false);
  patches.push_back(
      {{"attention", compute_knob(g_.inc, "attention") == "naive" ? "flash" : "naive"}});
  split(4, true);
  split(4, false);
  // Reduced precision is not always faster on a CPU: at the memory scenario's C = 32 the bf16
  // operand conversions outweigh the GEMMs, and fp32 ran 1.14x bf16 (Zen 5, 9 alternating
  // rounds). fp32 is the reference precision, so the loss check passes it whenever bf16 passed.
  if (compute_knob(g_.inc, "precision") != "fp32") patches.push_back({{"precision", "fp32"}});
  // Background loader workers pay only when the step waits for data. When it barely does (under
  // the data finding's 5%), a worker buys nothing, hands every batch across threads and shares
  // the cores with compute; the in-line loader produces the batch on the training thread. In
  // the underfilled and memory scenarios grid's best had it (1.037x, 11 rounds, Zen 5) while no
  // finding named it. A costly preprocessing step makes it lose, and it is then not re-proposed.
  if (std::atoi(compute_knob(g_.inc, "loader-workers").c_str()) > 0 &&
      total_share(diag, profiler::WaitClass::kData) < profiler::FindingRules{}.data_share) {
    patches.push_back({{"loader-workers", "0"}});
  }
  std::string settings;  // the incumbent's compute settings
  for (const char* k : {"precision", "attention", "micro-batch", "grad-accum", "checkpoint"}) {
    settings += fmt::format(" {}={}", k, compute_knob(g_.inc, k));
  }
  std::vector<Candidate> cands;
  for (const Config& patch : patches) {
    const bool back = std::any_of(patch.begin(), patch.end(), [&](const auto& kv) {
      return g_.left.count(kv.first + "=" + kv.second) > 0;
    });
    if (back) continue;  // no going back to a setting an accepted change left
    std::string lost_key;
    for (const auto& [k, v] : patch) lost_key += k + "=" + v + " ";
    // The in-line loader's cost (producing the batch on the training thread) and gain (no
    // handoff) do not depend on how the GEMMs are computed: one loss is final for the sweep. In
    // a memory sweep it was re-proposed after the split and the attention changed, lost again
    // (x1.034, 2 of 6 rounds slower) and cost 12 trials.
    lost_key += patch.count("loader-workers") ? "@sweep" : "@" + settings;
    if (g_.compute_lost.count(lost_key)) continue;  // lost against the same math before
    if (cands.size() >= limit) break;
    std::string why;
    const auto c = apply_knob(g_.inc, patch, o_.batch, &why);
    if (c && admit(*c, false, "compute-bound step", round)) {
      cands.push_back({*c, false, lost_key, 0, 0, "", ""});
    }
  }
  return cands;
}

std::vector<Sweep::Candidate> Sweep::carried_candidates(int round, size_t limit,
                                                        const std::vector<Config>& this_round) {
  std::vector<Candidate> cands;
  std::set<std::string> keys = {effective_key(g_.inc, o_.train_defaults)};
  for (const Config& c : this_round) keys.insert(effective_key(c, o_.train_defaults));
  std::string names;
  for (const auto& [patch, was] : g_.carry) {
    if (cands.size() >= limit) break;
    const bool back = std::any_of(patch.begin(), patch.end(), [&](const auto& kv) {
      return g_.left.count(kv.first + "=" + kv.second) > 0;
    });
    std::string why;
    const auto c = back ? std::nullopt : apply_knob(g_.inc, patch, o_.batch, &why);
    if (!c) continue;
    const std::string key = effective_key(*c, o_.train_defaults);
    if (!g_.space_keys.empty() && !g_.space_keys.count(key)) continue;
    if (!keys.insert(key).second) continue;
    g_.tried.insert(key);  // tried before, on the old incumbent; not proposed a third time
    cands.push_back({*c, false, "", 0, 0, "", ""});
    names +=
        fmt::format("{}{} (was {})", names.empty() ? "" : "; ", describe_diff(g_.inc, *c), was);
  }
  g_.carry.clear();
  if (!cands.empty()) {
    decide(round, "trial",
           fmt::format("runners-up of round {}, faster than the old incumbent (beyond noise, or "
                       "by the median and undecided) but not taken, measured again against the "
                       "new one: {}",
                       round - 1, names));
  }
  return cands;
}

void Sweep::accept(const Config& knobs, int trial_id) {
  // The settings this change moved away from are not proposed again as compute knobs.
  for (const char* k : {"attention", "micro-batch", "grad-accum", "precision"}) {
    const std::string before = compute_knob(g_.inc, k);
    if (before != compute_knob(knobs, k)) g_.left.insert(std::string(k) + "=" + before);
  }
  g_.inc = knobs;
  out_.best = knobs;
  out_.best_trial = trial_id;
  out_.best_verify = out_.accepted_verifies.back();
  accepted_.push_back({knobs, trial_id, out_.best_verify});
}

void Sweep::guided() {
  planned_left_ = -1;
  if (!fit_to_memory()) return;
  calibrate();
  const JournalEntry& b = short_trial("baseline", o_.baseline, 0);
  out_.baseline_trial = out_.best_trial = b.id;
  if (b.result.status != TrialStatus::kOk) {
    stop(0,
         fmt::format("the baseline trial failed ({}: {})", trial_status_name(b.result.status),
                     b.result.reason),
         {b.id});
    return;
  }
  g_.inc = o_.baseline;
  g_.tried = {effective_key(g_.inc, o_.train_defaults)};
  // What a grid over the same space would run (one short trial per configuration), for the
  // report's count of the trials guided saved.
  out_.grid_size = static_cast<int>(
      grid_configs(o_.baseline,
                   o_.space.empty() ? default_space(o_.baseline, o_.train_flags, o_.batch, o_.ranks)
                                    : o_.space,
                   o_.seed, o_.batch, o_.train_defaults)
          .size());
  // With --knobs (options.space) guided searches the grid's space: a throughput candidate
  // outside it is skipped, so the two strategies can be compared on the same space.
  if (!o_.space.empty()) {
    for (const Config& c :
         grid_configs(o_.baseline, o_.space, o_.seed, o_.batch, o_.train_defaults)) {
      g_.space_keys.insert(effective_key(c, o_.train_defaults));
    }
  }
  for (int round = 1;; ++round) {
    last_round_ = round;
    if (!budget_left()) return stop(round, budget_text());
    Diagnosis diag = diag_(round, with_steps(g_.inc, o_.trial_steps));
    ++out_.diagnoses;
    std::vector<Finding>& findings = diag.findings;
    for (Finding& f : findings) {  // an unknown (null) share promises nothing
      if (!std::isfinite(f.share) || f.share < 0) f.share = 0;
    }
    std::stable_sort(findings.begin(), findings.end(),
                     [](const Finding& x, const Finding& y) { return x.share > y.share; });
    std::string summary;
    for (size_t i = 0; i < findings.size() && i < 4; ++i) {
      summary += fmt::format("{}{} {:.0f}% ({})", i ? "; " : "", findings[i].cls,
                             100 * findings[i].share, findings[i].title);
    }
    decide(round, "diagnose",
           fmt::format("diagnosis of {}: {}; compute {:.0f}% of step time",
                       describe_diff(o_.baseline, g_.inc),
                       summary.empty() ? "no findings" : summary, 100 * compute_share(diag)));
    bool promising = false;
    const std::vector<Candidate> from_findings =
        finding_candidates(findings, round, &promising, steady_step_ms(diag));
    // A loss-stability change is not about speed: it goes straight to verification.
    std::vector<Config> fast;
    std::vector<const Candidate*> source;  // the finding candidate behind fast[i], or nullptr
    std::vector<std::string> lost_keys;    // a compute candidate's lost_key at fast[i], or ""
    bool accepted = false;
    for (const Candidate& c : from_findings) {
      if (!c.stability) {
        fast.push_back(c.knobs);
        source.push_back(&c);
        continue;
      }
      if (accepted) continue;
      const JournalEntry& e = short_trial("trial", c.knobs, round);
      bool failed = false;
      if (verify(c.knobs, round, &failed)) {
        accept(c.knobs, e.id);
        accepted = true;
      } else if (failed) {
        return stop(round, budget_text() + "; verification could not run");
      }
    }
    if (accepted) continue;
    {
      const size_t slots = static_cast<size_t>(o_.candidates_per_round) + 2;
      const size_t limit = slots > fast.size() ? slots - fast.size() : 0;
      for (const Candidate& c : carried_candidates(round, limit, fast)) {
        fast.push_back(c.knobs);
        source.push_back(nullptr);
      }
    }
    // A compute-bound step: the knobs that change how the same math is computed (the split of
    // the fixed global batch, the attention implementation) fill the round up to --candidates
    // + 2 configurations, each configuration tried once.
    const size_t from_diagnosis = fast.size();
    const size_t slots = static_cast<size_t>(o_.candidates_per_round) + 2;
    if (o_.compute_bound > 0 && compute_share(diag) >= o_.compute_bound && from_diagnosis < slots) {
      for (const Candidate& c : compute_candidates(round, slots - from_diagnosis, diag)) {
        fast.push_back(c.knobs);
        source.push_back(nullptr);
        lost_keys.resize(fast.size());
        lost_keys.back() = c.knob;
      }
      if (fast.size() > from_diagnosis) {
        std::string names;
        for (size_t i = from_diagnosis; i < fast.size(); ++i) {
          names += (names.empty() ? "" : "; ") + describe_diff(g_.inc, fast[i]);
        }
        decide(round, "trial",
               fmt::format("compute is {:.0f}% of step time (>= {:.0f}%): also trying {}",
                           100 * compute_share(diag), 100 * o_.compute_bound, names));
      }
    }
    if (fast.empty()) {
      if (!promising) {
        return stop(round, fmt::format("no finding promises more than {:.0f}% of step time",
                                       100 * o_.min_gain));
      }
      return stop(round, "every knob the findings name was tried, skipped or not applicable");
    }
    // The incumbent and the candidates side by side, alternating, --repeats rounds: a candidate
    // is faster only if every round favours it and its median ratio exceeds 1 + the floor.
    int complete = 0;
    std::vector<size_t> ranked;
    std::vector<ConfirmRow> rows = side_by_side(g_.inc, "incumbent", fast, "trial", "round", round,
                                                o_.repeats, &ranked, &complete);
    if (complete < std::min(2, o_.repeats)) return stop(round, budget_text());
    check_predictions(round, rows, source);
    size_t taken = 0;  // the row accepted
    for (size_t i : ranked) {
      if (!rows[i].beats_baseline) continue;
      bool failed = false;
      if (verify(rows[i].knobs, round, &failed)) {
        accept(rows[i].knobs, rows[i].trials.front());
        accepted = true;
        taken = i;
        break;
      }
      if (failed) return stop(round, budget_text() + "; verification could not run");
    }
    // Runners-up: the rows ranked after the one taken that also beat the incumbent (those
    // ranked before it failed verification), and any row not taken that was faster by the
    // median but undecided (lost a round): a round that accepts a change is not extended, so
    // such a row was never decided against. In a memory sweep, allocator caching (the top
    // finding's knob) read x1.044 (1.044 0.980 1.153) in the round that took micro-batch 4 x 4
    // and, marked rejected, was never measured again; grid's best had it.
    std::set<size_t> carried;
    if (accepted) {
      const auto it = std::find(ranked.begin(), ranked.end(), taken);
      for (auto r = ranked.begin(); r != ranked.end(); ++r) {
        if (*r == taken || *r == 0) continue;
        const bool runner_up = r > it && rows[*r].beats_baseline;
        const bool undecided =
            !rows[*r].beats_baseline && rows[*r].median_ratio > 1 + o_.min_improvement;
        if (runner_up || undecided) {
          g_.carry.emplace_back(changed_knobs(rows[0].knobs, rows[*r].knobs), rows[*r].change);
          carried.insert(*r);
        }
      }
    }
    // A finding's knob that was measured and not taken (nor carried) is retried only once its
    // finding grows.
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] && i + 1 != taken && !carried.count(i + 1)) {
        g_.rejected[source[i]->knob] = source[i]->share;
      }
    }
    // A compute knob that lost is not proposed again while the math it would change is the
    // same: in a memory sweep the micro-batch axis lost every point beside micro-batch 4 x 4 and
    // was searched again, point by point, after allocator caching was accepted (9 trials).
    for (size_t i = 0; i < lost_keys.size(); ++i) {
      if (!lost_keys[i].empty() && i + 1 != taken && !carried.count(i + 1)) {
        g_.compute_lost.insert(lost_keys[i]);
      }
    }
    if (!accepted && !budget_left()) return stop(round, budget_text());
    if (!accepted) {
      return stop(round, fmt::format("no candidate of round {} beat the incumbent beyond noise "
                                     "and passed verification",
                                     round));
    }
  }
}

// Guided: the baseline and the latest accepted changes (each verified) in a confirmation
// round; the best is the latest accepted change if it beats the baseline beyond noise, unless
// an earlier one is faster than it beyond noise; else the fastest earlier one that beats the
// baseline; else the baseline.
void Sweep::guided_confirm() {
  if (o_.confirm_rounds <= 0) return;
  if (accepted_.empty()) {
    out_.confirmed_ratio = 1;  // the best is the baseline itself
    return;
  }
  const size_t k = static_cast<size_t>(std::max(1, o_.confirm_top));
  const size_t from = accepted_.size() > k ? accepted_.size() - k : 0;
  std::vector<Config> cands;
  for (size_t i = from; i < accepted_.size(); ++i) cands.push_back(accepted_[i].knobs);
  const int round = last_round_ + 1;
  const auto rank = confirm(cands, round);
  if (!rank) {
    decide(round, "stop",
           budget_text() +
               "; the confirmation round could not finish, so the best is the last "
               "accepted change, unconfirmed");
    return;
  }
  // Each accepted change beat its predecessor side by side and passed verification, so the
  // latest is the default pick: an earlier incumbent replaces it only when it is faster than
  // the latest beyond noise in these same rounds (a median over 3 rounds alone would let noise
  // undo accepted changes). When the latest does not beat the baseline here, the fastest
  // earlier change that does is taken.
  const auto& rows = out_.confirmation;
  const size_t last = rows.size() - 1;
  size_t pick = 0;  // 0: none
  std::string why;
  if (rows[last].beats_baseline) {
    pick = last;
    why = "the latest accepted change, confirmed";
    for (size_t i : *rank) {
      if (i == last || !rows[i].beats_baseline) continue;
      if (faster_beyond_noise(rows[i], rows[last], o_.min_improvement, 2)) {
        pick = i;
        why = fmt::format("an earlier incumbent, faster than the latest ({}) beyond noise here",
                          rows[last].change);
        break;
      }
    }
  } else {
    for (size_t i : *rank) {
      if (!rows[i].beats_baseline) continue;
      pick = i;
      why = fmt::format(
          "the fastest earlier incumbent that beat the baseline here (the latest, {}, "
          "did not)",
          rows[last].change);
      break;
    }
  }
  if (pick > 0) {
    const ConfirmRow& row = rows[pick];
    out_.best = cands[pick - 1];
    out_.best_trial = accepted_[from + pick - 1].trial;
    out_.best_verify = accepted_[from + pick - 1].verify;
    out_.confirmed_ratio = row.median_ratio;
    decide(round, "accept",
           fmt::format("{}: {}, x{:.3f} the baseline in the confirmation round", row.change, why,
                       row.median_ratio));
    return;
  }
  out_.best = o_.baseline;
  out_.best_trial = out_.baseline_trial;
  out_.best_verify = -1;
  out_.confirmed_ratio = 1;
  decide(round, "reject",
         fmt::format("no accepted change beat the baseline beyond noise in the confirmation "
                     "round (every round faster and the median ratio above 1 + {:.0f}%); the "
                     "baseline is kept",
                     100 * o_.min_improvement));
}

}  // namespace ft::tuner::detail
