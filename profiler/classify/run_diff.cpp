// run_diff.cpp: two diagnosed runs compared (run_diff.h).
#include "ft/profiler/run_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "ft/profiler/findings.h"

namespace ft::profiler {
namespace {

constexpr int kResamples = 2000;
constexpr uint32_t kSeed = 20261203;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

StepStats stats_of(const std::vector<double>& ms) {
  StepStats s;
  s.n = ms.size();
  if (ms.empty()) return s;
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean = sum / static_cast<double>(ms.size());
  s.median = quantile(ms, 0.5), s.p10 = quantile(ms, 0.1), s.p90 = quantile(ms, 0.9);
  return s;
}

// A finding's identity across runs: its class and title without the figures in it ("Compute-
// bound in fp32 (98% ...)" and "(99% ...)" are one finding); the value shown is the title.
std::map<std::string, std::string> finding_keys(const Diagnosis& d) {
  std::map<std::string, std::string> out;
  for (const Finding& f : d.findings) {
    if (f.share <= 0 && f.severity == Severity::kInfo) continue;
    std::string key = f.cls + ":";
    for (const char c : f.title)
      if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') key += c;
    out.emplace(key, f.cls + ": " + f.title);
  }
  return out;
}

}  // namespace

RunDiff diff_runs(const Diagnosis& a, const RunInfo& run_a, const Diagnosis& b,
                  const RunInfo& run_b) {
  RunDiff out;
  auto steady_of = [&](const Diagnosis& d) {
    return steady_steps(d.steps, &d == &a ? run_a : run_b);
  };
  out.a_source = a.source, out.b_source = b.source;
  std::vector<double> am, bm;
  for (const auto* s : steady_of(a)) am.push_back(s->wall_ms);
  for (const auto* s : steady_of(b)) bm.push_back(s->wall_ms);
  out.a = stats_of(am), out.b = stats_of(bm);
  for (const auto* s : steady_of(a))
    for (int c = 0; c < kNumWaitClasses; ++c)
      out.a_class_ms[c] += s->ms[c] / static_cast<double>(am.size());
  for (const auto* s : steady_of(b))
    for (int c = 0; c < kNumWaitClasses; ++c)
      out.b_class_ms[c] += s->ms[c] / static_cast<double>(bm.size());
  if (!am.empty() && !bm.empty() && out.a.median > 0) {
    out.ratio = out.b.median / out.a.median;
    std::mt19937 rng(kSeed);
    std::uniform_int_distribution<size_t> pa(0, am.size() - 1), pb(0, bm.size() - 1);
    std::vector<double> ratios, ra(am.size()), rb(bm.size());
    ratios.reserve(kResamples);
    for (int i = 0; i < kResamples; ++i) {
      for (double& v : ra) v = am[pa(rng)];
      for (double& v : rb) v = bm[pb(rng)];
      const double m = quantile(ra, 0.5);
      if (m > 0) ratios.push_back(quantile(rb, 0.5) / m);
    }
    out.ratio_lo = quantile(ratios, 0.025), out.ratio_hi = quantile(ratios, 0.975);
  }
  // Knobs: the run's flags as recorded (ft's own runs), changed, added or removed.
  std::set<std::string> keys;
  for (const auto& [k, v] : a.config) keys.insert(k);
  for (const auto& [k, v] : b.config) keys.insert(k);
  for (const std::string& k : keys) {
    const std::string x = a.config.count(k) ? a.config.at(k) : "(unset)";
    const std::string y = b.config.count(k) ? b.config.at(k) : "(unset)";
    if (x != y) out.knobs.push_back({k, {x, y}});
  }
  const auto fa = finding_keys(a), fb = finding_keys(b);
  for (const auto& [k, title] : fb)
    if (!fa.count(k)) out.findings_appeared.push_back(title);
  for (const auto& [k, title] : fa)
    if (!fb.count(k)) out.findings_vanished.push_back(title);
  return out;
}

bool slower_beyond(const RunDiff& d, double pct) {
  return d.a.n >= kMinDiffSteps && d.b.n >= kMinDiffSteps && d.ratio_lo > 1.0 + pct / 100.0;
}

}  // namespace ft::profiler
