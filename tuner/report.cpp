// report.cpp: best.cfg, and the sweep's outcome as the plain description reports/ renders.
#include "ft/tuner/report.h"

#include <algorithm>

#include "ft/core/atomic_file.h"

namespace ft::tuner {

namespace {

bool is_short(const JournalEntry& e) {
  return e.phase == "baseline" || e.phase == "trial" || e.phase == "grid" || e.phase == "repeat" ||
         e.phase == "confirm";
}

const JournalEntry* at(const SweepOutcome& o, int id) {
  return id >= 0 && id < static_cast<int>(o.trials.size()) ? &o.trials[static_cast<size_t>(id)]
                                                           : nullptr;
}

reports::SweepTrial report_trial(const JournalEntry& e) {
  reports::SweepTrial t;
  t.id = e.id;
  t.kind = is_short(e)                    ? reports::SweepTrialKind::kThroughput
           : e.phase == "verify"          ? reports::SweepTrialKind::kVerify
           : e.phase == "verify-baseline" ? reports::SweepTrialKind::kVerifyBaseline
                                          : reports::SweepTrialKind::kOther;
  t.phase = e.phase;
  t.change = e.change;
  t.status = trial_status_name(e.result.status);
  t.reason = e.result.reason;
  t.tokens_per_s = e.result.tokens_per_s;
  t.step_tps_spread = e.result.step_tps_spread;
  t.mem_peak = e.result.mem_peak;
  t.predicted_mem = e.predicted_mem;
  t.final_loss = e.result.final_loss;
  t.tokens = e.result.tokens;
  t.losses = e.result.losses;
  t.record = entry_to_json(e);
  return t;
}

}  // namespace

std::vector<int> pareto_front(const std::vector<JournalEntry>& trials) {
  std::vector<int> ok;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& e = trials[i];
    if (is_short(e) && e.result.status == TrialStatus::kOk && e.result.mem_peak > 0) {
      ok.push_back(static_cast<int>(i));
    }
  }
  std::vector<int> front;
  for (int i : ok) {
    const auto& a = trials[static_cast<size_t>(i)].result;
    bool dominated = false;
    for (int j : ok) {
      const auto& b = trials[static_cast<size_t>(j)].result;
      if (j != i && b.tokens_per_s >= a.tokens_per_s && b.mem_peak <= a.mem_peak &&
          (b.tokens_per_s > a.tokens_per_s || b.mem_peak < a.mem_peak)) {
        dominated = true;
        break;
      }
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](int x, int y) {
    return trials[static_cast<size_t>(x)].result.mem_peak <
           trials[static_cast<size_t>(y)].result.mem_peak;
  });
  return front;
}

reports::SweepReport sweep_report(const SweepOutcome& o, const SweepOptions& opt) {
  reports::SweepReport r;
  r.strategy = o.strategy;
  r.seed = opt.seed;
  r.baseline = o.baseline;
  r.best = o.best;
  r.best_change = describe_diff(o.baseline, o.best);
  if (!o.requested_baseline.empty()) {
    r.fitted_to_memory = describe_diff(o.requested_baseline, o.baseline);
  }
  r.baseline_trial = o.baseline_trial;
  r.best_trial = o.best_trial;
  const JournalEntry* b = at(o, o.baseline_trial);
  const JournalEntry* t = at(o, o.best_trial);
  if (b) r.baseline_tokens_per_s = b->result.tokens_per_s;
  if (t) r.best_tokens_per_s = t->result.tokens_per_s;
  // The confirmation round's median ratio when one chose the best, else the short trials'.
  // Without a baseline there is no best; a kept baseline is not called confirmed unless a
  // confirmation round ran.
  if (const std::string failed = baseline_failure(o); !failed.empty()) {
    r.best_change = "none";
    r.speedup = 0;
    r.speedup_basis = failed;
  } else if (o.confirmed_ratio > 0 && !o.confirmation.empty()) {
    r.speedup = o.confirmed_ratio;
    r.speedup_basis = "median ratio in the confirmation round";
  } else if (o.best == o.baseline) {
    r.speedup = 1;
    r.speedup_basis = "no change was accepted";
  } else {
    r.speedup =
        b && t && b->result.tokens_per_s > 0 ? t->result.tokens_per_s / b->result.tokens_per_s : 1;
    r.speedup_basis = "short trials, unconfirmed";
  }
  r.confirmed_ratio = o.confirmed_ratio;
  for (const auto& row : o.confirmation) {
    r.confirmation.push_back({row.change, row.knobs, row.trials, row.tokens_per_s, row.ratios,
                              row.median_tps, row.median_ratio, row.ratio_spread,
                              row.beats_baseline});
  }
  r.stop_reason = o.stop_reason;
  r.trials_run = o.trials_run;
  r.diagnoses = o.diagnoses;
  r.trial_time_s = o.spent_s;
  r.verification_rules = describe_rules(opt.verify);
  r.baseline_verify = o.baseline_verify;
  r.accepted_verifies = o.accepted_verifies;
  r.best_verify = o.best_verify;
  if (const JournalEntry* bv = at(o, o.baseline_verify)) {
    r.baseline_verify_final_loss = bv->result.final_loss;
    if (const JournalEntry* v = at(o, o.best_verify)) {
      const VerifyResult vr = verify_curve(Curve{bv->result.tokens, bv->result.losses},
                                           Curve{v->result.tokens, v->result.losses}, opt.verify);
      r.verified = reports::SweepVerified{vr.base_final, vr.cand_final, vr.limit, vr.accepted};
    }
  }
  for (const auto& e : o.trials) r.trials.push_back(report_trial(e));
  for (const auto& d : o.decisions) r.decisions.push_back({d.round, d.kind, d.text, d.trials});
  r.pareto_front = pareto_front(o.trials);  // indices: the trials are in id order
  for (const PredictionCheck& p : o.predictions) {
    r.predictions.push_back({p.round, p.cls, p.finding, p.knob, p.predicted_step_ms,
                             p.measured_step_ms, p.error, p.trials});
  }
  r.grid_size = o.grid_size;
  return r;
}

void write_outputs(const std::filesystem::path& dir, const SweepOutcome& o,
                   const SweepOptions& opt) {
  const reports::SweepReport r = sweep_report(o, opt);
  if (!baseline_failure(o).empty()) {
    std::filesystem::remove(dir / "best.cfg");  // no best without a baseline, not a stale one
  } else if (opt.ft_engine) {
    write_file_atomic(dir / "best.cfg", config_file_text(o.best));
  }
  write_file_atomic(dir / "report.json", reports::render_sweep_json(r));
  write_file_atomic(dir / "report.md", reports::render_sweep_markdown(r));
  write_file_atomic(dir / "report.html", reports::render_sweep_html(r));
}

}  // namespace ft::tuner
