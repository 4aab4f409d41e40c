// loss_health.h: loss-curve health (NaN, divergence, spikes, oscillation) from the per-step loss
// series.
#pragma once

#include <vector>

#include "ft/profiler/diagnosis.h"

namespace ft::profiler {

// Rule constants (docs/classification.md, "Loss health").
struct LossHealthRules {
  int trend_window = 3;       // a spike is measured against the median of this many prior losses
  double spike_rel = 0.10;    // ... and must exceed it by this fraction of the trend
  double spike_sigmas = 4.0;  // ... and by this many x 1.4826 x median |difference|
  double oscillation_max =
      0.10;  // detrended sd(loss differences) / median loss above this: oscillating
  double diverge_ratio = 1.5;  // final loss above this x the best loss: diverging
};

// Assesses a loss series (one value per optimizer step; non-finite values allowed).
LossHealth assess_loss(const std::vector<double>& losses, const LossHealthRules& rules = {});

}  // namespace ft::profiler
