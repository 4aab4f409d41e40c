// guided.cpp: the guided strategy: diagnose -> optimize -> verify rounds, then confirmation.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "sweep_impl.h"

namespace ft::tuner::detail {
namespace {

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

}  // namespace

void Sweep::guided() {
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
  double inc_step_noise = b.result.step_tps_spread;  // within-run spread of its latest trial
  std::set<std::string> tried{effective_key(inc, o_.train_defaults)};
  // With --knobs (options.space) guided searches the grid's space: a throughput candidate
  // outside it is skipped, so the two strategies can be compared on the same space.
  std::set<std::string> space_keys;
  if (!o_.space.empty()) {
    for (const Config& c :
         grid_configs(o_.baseline, o_.space, o_.seed, o_.batch, o_.train_defaults)) {
      space_keys.insert(effective_key(c, o_.train_defaults));
    }
  }
  for (int round = 1;; ++round) {
    last_round_ = round;
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
        if (!stability && (patch.count("lr") || patch.count("warmup") || patch.count("min-lr"))) {
          decide(round, "skip",
                 fmt::format("knob '{}': LR/warmup changes only for an unstable "
                             "loss finding",
                             knob));
          continue;
        }
        std::string why;
        const auto c = apply_knob(inc, patch, o_.batch, &why);
        if (!c) {
          decide(round, "skip", fmt::format("knob '{}': {}", knob, why));
          continue;
        }
        const std::string key = effective_key(*c, o_.train_defaults);
        if (!stability && !space_keys.empty() && !space_keys.count(key)) {
          decide(round, "skip",
                 fmt::format("knob '{}' of finding '{}': {} is outside the search space "
                             "(--knobs and the batch rule define it for grid and guided alike)",
                             knob, f.title, describe_diff(o_.baseline, *c)));
          continue;
        }
        if (!tried.insert(key).second) continue;
        double predicted = 0;
        const std::string skip = memory_skip(*c, &predicted);
        if (!skip.empty()) {
          const JournalEntry& e =
              trial("trial", with_steps(*c, o_.trial_steps), describe_diff(o_.baseline, *c), round,
                    0, nullptr, predicted, skip);
          decide(round, "skip", fmt::format("{} (from '{}'): {}", e.change, f.title, skip), {e.id});
          continue;
        }
        cands.push_back({*c, stability});
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
        // Screening: the two were measured at different times, so a first trial within the
        // measured noise of a gain still goes to the paired measurement. The noise: the
        // spread of the incumbent's repeated measurements, or the within-run spread (IQR of
        // the per-step rates over their median) of the incumbent's latest trial or of this
        // one, whichever is largest.
        const double inc_now = median(inc_samples);
        const double tol =
            std::max({spread(inc_samples), inc_step_noise, entry(first_id).result.step_tps_spread});
        if (first_tps <= inc_now * (1 + o_.min_improvement - tol)) {
          decide(round, "reject",
                 fmt::format("{}: {:.0f} tokens/s is not faster than the incumbent's "
                             "{:.0f} beyond the measured noise ({:.0f}%)",
                             change, first_tps, inc_now, 100 * tol),
                 {first_id});
          continue;
        }
        // Repeated measurement in back-to-back pairs, the order alternating (I C, C I, I C),
        // so load drift hits both members of a pair alike. Faster only if every pair favours
        // the candidate (a sign test against the noise both share) and the median paired
        // gain exceeds the floor.
        std::vector<double> inc_block, cand_block, gains;
        double cand_step_noise = entry(first_id).result.step_tps_spread;
        std::vector<int> ids{first_id};
        for (int r = 1; r <= o_.repeats && budget_left(); ++r) {
          double tps[2] = {0, 0};  // incumbent, candidate
          bool ran[2] = {false, false};
          for (int k = 0; k < 2; ++k) {
            const int who = r % 2 == 1 ? k : 1 - k;  // odd pairs incumbent first
            if (!budget_left()) break;
            const JournalEntry& e = short_trial("repeat", who == 0 ? inc : knobs, round, r);
            ids.push_back(e.id);
            ran[who] = e.result.status == TrialStatus::kOk;
            tps[who] = e.result.tokens_per_s;
            if (ran[who]) (who == 0 ? inc_step_noise : cand_step_noise) = e.result.step_tps_spread;
          }
          if (ran[0]) inc_block.push_back(tps[0]);
          if (ran[1]) cand_block.push_back(tps[1]);
          if (ran[0] && ran[1] && tps[0] > 0) gains.push_back(tps[1] / tps[0] - 1);
        }
        // The incumbent's re-measurements join its samples (a better noise estimate).
        inc_samples.insert(inc_samples.end(), inc_block.begin(), inc_block.end());
        const double noise = std::max(spread(inc_block), spread(cand_block));
        const double gain = median(gains);
        const double worst = gains.empty() ? 0 : *std::min_element(gains.begin(), gains.end());
        const int need = std::min(o_.repeats, 2);
        if (gains.empty() || static_cast<int>(gains.size()) < need || worst <= 0 ||
            gain <= o_.min_improvement) {
          decide(round, "reject",
                 fmt::format("{}: not faster beyond noise: paired gains {} (median {:+.1f}%, "
                             "worst {:+.1f}%; needs {} back-to-back pairs, every one > 0, and "
                             "median > {:.0f}%; spread of repeats {:.0f}%)",
                             change, gains.empty() ? "-" : fmt_gains(gains), 100 * gain,
                             100 * worst, need, 100 * o_.min_improvement, 100 * noise),
                 ids);
          continue;
        }
        decide(round, "measure",
               fmt::format("{}: faster in every back-to-back pair, paired gains {} (median "
                           "{:+.1f}%, spread of repeats {:.0f}%); verifying the loss curve",
                           change, fmt_gains(gains), 100 * gain, 100 * noise),
               ids);
        bool failed = false;
        if (!verify(knobs, round, &failed)) {
          if (failed) return stop(round, budget_text() + "; verification could not run");
          continue;
        }
        inc_samples = cand_block;
        inc_step_noise = cand_step_noise;
      } else {
        bool failed = false;
        if (!verify(knobs, round, &failed)) {
          if (failed) return stop(round, budget_text() + "; verification could not run");
          continue;
        }
        inc_samples = {first_tps};
        inc_step_noise = entry(first_id).result.step_tps_spread;
      }
      inc = knobs;
      out_.best = knobs;
      out_.best_trial = first_id;
      out_.best_verify = out_.accepted_verifies.back();
      accepted_.push_back({knobs, first_id, out_.best_verify});
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

// Guided: the baseline and the latest accepted changes (each verified) in a confirmation
// round; the best is the one with the highest confirmed ratio that beats the baseline beyond
// noise, else the baseline.
void Sweep::guided_confirm() {
  if (o_.confirm_rounds <= 0 || accepted_.empty()) return;
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
  for (size_t i : *rank) {
    const ConfirmRow& row = out_.confirmation[i];
    if (!row.beats_baseline) continue;
    out_.best = cands[i - 1];
    out_.best_trial = accepted_[from + i - 1].trial;
    out_.best_verify = accepted_[from + i - 1].verify;
    out_.confirmed_ratio = row.median_ratio;
    decide(round, "accept",
           fmt::format("{}: the fastest in the confirmation round, x{:.3f} the baseline{}",
                       row.change, row.median_ratio,
                       i == out_.confirmation.size() - 1
                           ? ""
                           : " (an earlier incumbent: the later changes were not faster here)"));
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
