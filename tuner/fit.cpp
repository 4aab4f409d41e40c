// fit.cpp: fitting the baseline into --memory-limit before a sweep: memory-knob configurations
// predicted by the memory model, pruned unrun when over, measured when under, loss-checked.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "sweep_impl.h"

namespace ft::tuner::detail {
namespace {

constexpr int kFitTrials = 3;  // fitting configurations measured before one is chosen

struct Fit {
  Config knobs;
  double predicted = 0;
  bool qlora = false;
  int changes = 0;  // knobs set differently from the baseline
  int micro = 0;
};

int int_knob(const Config& c, const char* k, int def) {
  const auto it = c.find(k);
  return it == c.end() || it->second.empty() ? def : std::atoi(it->second.c_str());
}

int count_changes(const Config& from, const Config& to) {
  int n = 0;
  for (const auto& [k, v] : to) {
    const auto it = from.find(k);
    if (it == from.end() || it->second != v) ++n;
  }
  return n;
}

double mib(double b) { return b / 1048576.0; }

// Every memory-knob configuration of the baseline: checkpointing, the micro-batch split at the
// same global batch, ZeRO stages under data parallelism, QLoRA for a fine-tuning run.
std::vector<Fit> memory_configurations(const Config& base, const BatchRule& rule) {
  static const trainer::TrainConfig kDefaults = *to_train_config({});
  const int b = int_knob(base, "micro-batch", kDefaults.micro_batch);
  const int dp = int_knob(base, "dp", 1);
  const bool fine_tuning = base.count("init-from") && !base.count("qlora");
  std::vector<Fit> out;
  for (const char* ck : {"", "block"}) {
    for (int split = 1; split <= 16 && b / split >= 1; split *= 2) {
      if (b % split) continue;
      for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
        for (const bool q : {false, true}) {
          if (q && !fine_tuning) continue;
          Config patch;
          if (*ck) patch["checkpoint"] = ck;
          if (split > 1) patch["micro-batch"] = std::to_string(b / split);
          if (zero > 0) patch["zero"] = std::to_string(zero);
          if (q) patch["qlora"] = "";
          if (patch.empty()) continue;
          std::string why;
          const std::optional<Config> c = apply_knob(base, patch, rule, &why);
          if (!c) continue;
          out.push_back({*c, predicted_peak(*c), q, count_changes(base, *c), b / split});
        }
      }
    }
  }
  return out;
}

}  // namespace

bool Sweep::fit_to_memory() {
  const double limit = o_.memory_limit;
  if (!o_.ft_engine || !o_.memory_skip || limit <= 0) return true;
  const double base_peak = predicted_peak(o_.baseline);
  if (base_peak <= 0 || base_peak <= limit) return true;
  std::vector<Fit> fits, pruned;
  for (Fit& f : memory_configurations(o_.baseline, o_.batch)) {
    if (f.predicted <= 0) continue;  // the memory model cannot price it
    (f.predicted <= limit ? fits : pruned).push_back(std::move(f));
  }
  std::sort(pruned.begin(), pruned.end(),
            [](const Fit& x, const Fit& y) { return x.predicted < y.predicted; });
  // Full training before QLoRA (it changes what is trained), then the fewest changes, then the
  // largest micro-batch (the least recompute and the fewest accumulation steps).
  std::sort(fits.begin(), fits.end(), [](const Fit& x, const Fit& y) {
    if (x.qlora != y.qlora) return !x.qlora;
    if (x.changes != y.changes) return x.changes < y.changes;
    return x.micro > y.micro;
  });
  const bool any_full = !fits.empty() && !fits.front().qlora;
  decide(
      0, "fit",
      fmt::format("the baseline is predicted to peak at {:.1f} MiB, over the {:.1f} MiB "
                  "limit: of {} configurations of the memory knobs (checkpoint, micro-batch "
                  "split at the same global batch{}{}): {} predicted to fit, {} pruned "
                  "unrun{}",
                  mib(base_peak), mib(limit), fits.size() + pruned.size(),
                  int_knob(o_.baseline, "dp", 1) > 1 ? ", zero" : "",
                  o_.baseline.count("init-from") ? ", qlora" : "", fits.size(), pruned.size(),
                  pruned.empty() ? ""
                                 : fmt::format(" (the smallest pruned prediction {:.1f} MiB: {})",
                                               mib(pruned.front().predicted),
                                               describe_diff(o_.baseline, pruned.front().knobs))));
  if (fits.empty()) {
    stop(0, "no configuration of the memory knobs is predicted to fit the memory limit");
    return false;
  }
  // Measure the first few of the preferred group (QLoRA only when no full training fits).
  std::vector<int> ran;
  int best = -1;        // trial id
  size_t best_fit = 0;  // its configuration in fits
  for (size_t i = 0; i < fits.size(); ++i) {
    const Fit& f = fits[i];
    if (static_cast<int>(ran.size()) >= kFitTrials || f.qlora != !any_full) break;
    if (!budget_left()) break;
    const JournalEntry& e = short_trial("fit", f.knobs, 0);
    ran.push_back(e.id);
    if (e.result.status != TrialStatus::kOk) continue;
    if (best < 0 || e.result.step_ms < entry(best).result.step_ms) {
      best = e.id;
      best_fit = i;
    }
  }
  if (best < 0) {
    stop(0, "no configuration predicted to fit ran (out of memory, failed, or no budget)", ran);
    return false;
  }
  // The pruning, checked by the measured trial that came nearest the limit: scaled by that
  // trial's measured / predicted peak, every pruned prediction must still exceed the limit.
  int nearest = -1;
  for (int id : ran) {
    const JournalEntry& e = entry(id);
    if (e.result.status == TrialStatus::kOk && e.result.mem_peak > 0 &&
        (nearest < 0 || e.result.mem_peak > entry(nearest).result.mem_peak)) {
      nearest = id;
    }
  }
  if (nearest >= 0 && !pruned.empty()) {
    const JournalEntry& n = entry(nearest);
    const double pred = predicted_peak(n.config), ratio = n.result.mem_peak / pred;
    const double worst = pruned.front().predicted * ratio;
    decide(0, "fit",
           fmt::format("pruning {}: the trial nearest the limit ({}) peaked at {:.1f} MiB against "
                       "{:.1f} MiB predicted ({:+.1f}%); the smallest pruned prediction so "
                       "corrected is {:.1f} MiB, {} the {:.1f} MiB limit",
                       worst > limit ? "confirmed" : "NOT confirmed", n.change,
                       mib(n.result.mem_peak), mib(pred), 100 * (pred / n.result.mem_peak - 1),
                       mib(worst), worst > limit ? "over" : "under", mib(limit)),
           {nearest});
  }
  const Config knobs = fits[best_fit].knobs;
  decide(0, "fit",
         fmt::format("the fitted baseline: {} ({:.2f} ms/step, the fastest of {} measured)",
                     describe_diff(o_.baseline, knobs), entry(best).result.step_ms, ran.size()),
         ran);
  out_.requested_baseline = o_.baseline;
  o_.baseline = out_.baseline = out_.best = knobs;
  // No reference can run inside the limit: the fitted baseline's own loss must converge.
  const JournalEntry* vb = baseline_verify(0);
  if (!vb) return false;
  const VerifyResult r = verify_converges(curve_of(vb->result), o_.verify);
  if (!r.accepted) {
    stop(0, "the fitted baseline's loss does not converge: " + r.reason, {vb->id});
    return false;
  }
  decide(0, "fit", "the fitted baseline's loss " + r.reason, {vb->id});
  return true;
}

}  // namespace ft::tuner::detail
