// verify.cpp: compares a candidate's loss curve with the baseline's at equal tokens.
#include "ft/tuner/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ft::tuner {

double interpolate_loss(const Curve& c, double tokens) {
  const auto& t = c.tokens;
  if (tokens <= t.front()) return c.losses.front();
  if (tokens >= t.back()) return c.losses.back();
  const auto it = std::lower_bound(t.begin(), t.end(), tokens);
  const size_t i = static_cast<size_t>(it - t.begin());
  if (t[i] == tokens || i == 0) return c.losses[i];
  const double f = (tokens - t[i - 1]) / (t[i] - t[i - 1]);
  return c.losses[i - 1] + f * (c.losses[i] - c.losses[i - 1]);
}

namespace {

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return end > begin ? s / static_cast<double>(end - begin) : std::nan("");
}

}  // namespace

VerifyResult verify_curve(const Curve& baseline, const Curve& candidate, const VerifyRules& rules) {
  VerifyResult r;
  if (baseline.losses.empty() || baseline.tokens.size() != baseline.losses.size()) {
    r.reason = "baseline has no loss curve";
    return r;
  }
  if (candidate.losses.empty() || candidate.tokens.size() != candidate.losses.size()) {
    r.reason = "candidate has no loss curve";
    return r;
  }
  for (size_t i = 0; i < candidate.losses.size(); ++i) {
    if (!std::isfinite(candidate.losses[i])) {
      r.reason = fmt::format("non-finite loss (NaN/inf) at step {} ({:.0f} tokens)", i + 1,
                             candidate.tokens[i]);
      return r;
    }
  }
  const double lo = std::max(baseline.tokens.front(), candidate.tokens.front());
  const double hi = std::min(baseline.tokens.back(), candidate.tokens.back());
  const double span = baseline.tokens.back() - baseline.tokens.front();
  if (hi < lo || (span > 0 && (hi - lo) < rules.min_overlap * span)) {
    r.reason = fmt::format("curves overlap on too few tokens ({:.0f}..{:.0f} of {:.0f}..{:.0f})",
                           lo, hi, baseline.tokens.front(), baseline.tokens.back());
    return r;
  }
  std::vector<double> at, base, cand;
  for (size_t i = 0; i < baseline.tokens.size(); ++i) {
    const double t = baseline.tokens[i];
    if (t < lo || t > hi || !std::isfinite(baseline.losses[i])) continue;
    at.push_back(t);
    base.push_back(baseline.losses[i]);
    cand.push_back(interpolate_loss(candidate, t));
  }
  const size_t n = at.size();
  r.compared_points = static_cast<int>(n);
  if (n == 0) {
    r.reason = "no comparable points";
    return r;
  }
  const size_t tail =
      std::max<size_t>(1, static_cast<size_t>(std::lround(rules.tail_fraction * n)));
  r.base_final = mean(base, n - tail, n);
  r.cand_final = mean(cand, n - tail, n);
  r.limit = r.base_final * (1 + rules.rel_tol) + rules.abs_tol;

  const size_t skip = static_cast<size_t>(std::floor(rules.spike_skip * n));
  for (size_t i = skip; i < n; ++i) {
    const double bound = base[i] * (1 + rules.spike_rel) + rules.spike_abs;
    if (cand[i] > bound) {
      r.reason = fmt::format(
          "loss spike: {:.4f} at {:.0f} tokens against the baseline's {:.4f} (bound {:.4f})",
          cand[i], at[i], base[i], bound);
      return r;
    }
  }
  if (n >= 2 * tail) {
    const double before = mean(cand, n - 2 * tail, n - tail);
    if (r.cand_final > before * (1 + rules.diverge_rel) + rules.abs_tol) {
      r.reason = fmt::format("diverging: the last {} points average {:.4f}, the {} before {:.4f}",
                             tail, r.cand_final, tail, before);
      return r;
    }
  }
  if (r.cand_final > candidate.losses.front()) {
    r.reason = fmt::format("diverged: final smoothed loss {:.4f} is above the first loss {:.4f}",
                           r.cand_final, candidate.losses.front());
    return r;
  }
  if (r.cand_final > r.limit) {
    r.reason = fmt::format(
        "final smoothed loss {:.4f} exceeds the tolerance {:.4f} (baseline {:.4f} x {:.2f} + "
        "{:.2f})",
        r.cand_final, r.limit, r.base_final, 1 + rules.rel_tol, rules.abs_tol);
    return r;
  }
  r.accepted = true;
  r.reason = fmt::format(
      "final smoothed loss {:.4f} within {:.4f} (baseline {:.4f}); no NaN, "
      "spike or divergence over {} points",
      r.cand_final, r.limit, r.base_final, n);
  return r;
}

VerifyResult verify_converges(const Curve& c, const VerifyRules& rules) {
  VerifyResult r;
  const size_t n = c.losses.size();
  if (n < 2 || c.tokens.size() != n) {
    r.reason = "no loss curve of at least two steps";
    return r;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(c.losses[i])) {
      r.reason = fmt::format("non-finite loss (NaN/inf) at step {}", i + 1);
      return r;
    }
  }
  const size_t tail =
      std::max<size_t>(1, static_cast<size_t>(std::lround(rules.tail_fraction * n)));
  r.compared_points = static_cast<int>(n);
  r.base_final = c.losses.front();
  r.cand_final = mean(c.losses, n - tail, n);
  r.limit = r.base_final - rules.abs_tol;
  if (n >= 2 * tail) {
    const double before = mean(c.losses, n - 2 * tail, n - tail);
    if (r.cand_final > before * (1 + rules.diverge_rel) + rules.abs_tol) {
      r.reason = fmt::format("diverging: the last {} points average {:.4f}, the {} before {:.4f}",
                             tail, r.cand_final, tail, before);
      return r;
    }
  }
  if (r.cand_final > r.limit) {
    r.reason = fmt::format("not converging: smoothed final loss {:.4f}, first loss {:.4f}",
                           r.cand_final, r.base_final);
    return r;
  }
  r.accepted = true;
  r.reason = fmt::format(
      "converges: smoothed final loss {:.4f} from a first loss of {:.4f}; no NaN or divergence "
      "over {} steps",
      r.cand_final, r.base_final, n);
  return r;
}

std::string describe_rules(const VerifyRules& v) {
  return fmt::format(
      "compared at the baseline's token points (candidate linearly interpolated; overlap >= "
      "{:.0f}%); smoothed final loss = mean of the last {:.0f}% of points; accepted if "
      "<= baseline x {:.2f} + {:.2f}; rejected on any NaN/inf, on a spike (candidate > baseline "
      "x {:.2f} + {:.2f} at equal tokens after the first {:.0f}% of points), or divergence (tail "
      "mean > the preceding window's x {:.2f} + {:.2f}, or above its own first loss)",
      v.min_overlap * 100, v.tail_fraction * 100, 1 + v.rel_tol, v.abs_tol, 1 + v.spike_rel,
      v.spike_abs, v.spike_skip * 100, 1 + v.diverge_rel, v.abs_tol);
}

}  // namespace ft::tuner
