// verify.h: loss-curve verification: a change is kept only if convergence at equal tokens holds.
#pragma once

#include <string>
#include <vector>

namespace ft::tuner {

// A loss curve: the loss after each optimizer step and the tokens seen by then.
struct Curve {
  std::vector<double> tokens;
  std::vector<double> losses;
};

// The acceptance rules (docs/tuning.md). Curves are compared at the baseline's token points
// inside the tokens both curves cover; the candidate is linearly interpolated there (so a
// different global batch compares at equal tokens, not equal steps).
struct VerifyRules {
  // Smoothing: the final smoothed loss is the mean over the last `tail_fraction` of the
  // compared points (at least one point).
  double tail_fraction = 0.2;
  // Tolerance: accepted only if cand_final <= base_final * (1 + rel_tol) + abs_tol.
  double rel_tol = 0.02;
  double abs_tol = 0.01;
  // Spike: after the first `spike_skip` fraction of compared points, any point where the
  // candidate exceeds the baseline at equal tokens by more than spike_rel * baseline +
  // spike_abs.
  double spike_skip = 0.1;
  double spike_rel = 0.25;
  double spike_abs = 0.1;
  // Divergence: the candidate's tail mean rises above the mean of the window before it by more
  // than diverge_rel (relative) + abs_tol, or ends above its own first loss.
  double diverge_rel = 0.05;
  // The curves must overlap over at least this fraction of the baseline's tokens.
  double min_overlap = 0.9;
};

struct VerifyResult {
  bool accepted = false;
  std::string reason;     // why rejected, or a one-line summary when accepted
  double base_final = 0;  // smoothed final losses
  double cand_final = 0;
  double limit = 0;  // base_final * (1 + rel_tol) + abs_tol
  int compared_points = 0;
};

// Linear interpolation of `c` at `tokens` (clamped to its ends). `c` must be non-empty.
double interpolate_loss(const Curve& c, double tokens);

// Compares `candidate` with `baseline` under `rules`. A non-finite loss anywhere in the
// candidate, an empty curve or too little overlap rejects it with the reason.
VerifyResult verify_curve(const Curve& baseline, const Curve& candidate,
                          const VerifyRules& rules = {});

// One curve alone, for a configuration with no runnable reference (the baseline does not fit
// the memory limit): accepted when every loss is finite, the tail does not rise over the
// window before it (the divergence rule) and the smoothed tail lies below the first loss by at
// least abs_tol.
VerifyResult verify_converges(const Curve& curve, const VerifyRules& rules = {});

std::string describe_rules(const VerifyRules& rules);  // one sentence, for reports

}  // namespace ft::tuner
