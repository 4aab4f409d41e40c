// loss_health.cpp: NaN, divergence, spike and oscillation rules over a loss series.
#include "ft/profiler/loss_health.h"

#include <algorithm>
#include <cmath>

namespace ft::profiler {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  const double hi = v[m];
  if (v.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + m));
}

}  // namespace

LossHealth assess_loss(const std::vector<double>& losses, const LossHealthRules& rules) {
  LossHealth h;
  std::vector<double> l;
  for (double x : losses) {
    if (std::isfinite(x)) {
      l.push_back(x);
    } else {
      h.has_nan = true;
    }
  }
  if (l.size() >= 3) {
    std::vector<double> d(l.size() - 1);
    for (size_t i = 1; i < l.size(); ++i) d[i - 1] = l[i] - l[i - 1];
    // Normalised spread of the differences around their local trend (the mean difference over
    // a centred window of 5), so a steady descent does not count as oscillation.
    std::vector<double> r(d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      const size_t a = i >= 2 ? i - 2 : 0, b = std::min(d.size(), i + 3);
      double m = 0;
      for (size_t j = a; j < b; ++j) m += d[j];
      r[i] = d[i] - m / static_cast<double>(b - a);
    }
    double mean = 0;
    for (double x : r) mean += x;
    mean /= r.size();
    double var = 0;
    for (double x : r) var += (x - mean) * (x - mean);
    const double sd = std::sqrt(var / r.size());
    const double med_loss = std::abs(median(l));
    h.oscillation = med_loss > 0 ? sd / med_loss : 0;
    // Typical step-to-step movement: 1.4826 x the median absolute difference (robust to the
    // spikes being measured, and large for a curve that alternates up and down).
    std::vector<double> dev(d.size());
    for (size_t i = 0; i < d.size(); ++i) dev[i] = std::abs(d[i]);
    const double sigma = 1.4826 * median(dev);
    const auto w = static_cast<size_t>(std::max(1, rules.trend_window));
    for (size_t i = w; i < l.size(); ++i) {
      const double trend = median(std::vector<double>(l.begin() + (i - w), l.begin() + i));
      if (l[i] - trend > std::max(rules.spike_rel * std::abs(trend), rules.spike_sigmas * sigma)) {
        ++h.spikes;
      }
    }
    const size_t tail = std::max<size_t>(1, l.size() / 5);
    double final_loss = 0;
    for (size_t i = l.size() - tail; i < l.size(); ++i) final_loss += l[i];
    final_loss /= tail;
    const double best = *std::min_element(l.begin(), l.end());
    h.diverged = final_loss > l.front() || (best > 0 && final_loss > rules.diverge_ratio * best);
  }
  if (losses.empty()) {
    h.verdict = "unknown";  // no loss recorded (e.g. a PyTorch trace)
  } else if (h.has_nan) {
    h.verdict = "nan";
  } else if (h.diverged) {
    h.verdict = "diverging";
  } else if (h.spikes > 0) {
    h.verdict = "spiky";
  } else if (h.oscillation > rules.oscillation_max) {
    h.verdict = "oscillating";
  } else {
    h.verdict = "healthy";
  }
  return h;
}

}  // namespace ft::profiler
