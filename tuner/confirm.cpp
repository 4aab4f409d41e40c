// confirm.cpp: scoring of the confirmation round (alternating side-by-side re-measurement).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ft/tuner/search.h"

namespace ft::tuner {

int sign_test_wins(int n) {
  if (n <= 3) return n;
  // P(Binomial(n, 1/2) >= k) for decreasing k while it stays within kSignTestLevel.
  double tail = 0, choose = 1;  // C(n, i) for i = n, n-1, ...
  int k = n + 1;
  for (int i = n; i >= 0; --i) {
    if (i < n) choose = choose * (i + 1) / (n - i);
    const double next = tail + choose / std::ldexp(1.0, n);
    if (next > kSignTestLevel) break;
    tail = next;
    k = i;
  }
  return k;
}

namespace {

// The "faster beyond noise" rule over per-round ratios (candidate / reference): at least
// `min_rounds` rounds, ratio > 1 in sign_test_wins(n) of them, median > 1 + min_improvement.
bool ratios_beat(const std::vector<double>& ratios, double min_improvement, int min_rounds) {
  const int n = static_cast<int>(ratios.size());
  const int wins = static_cast<int>(
      std::count_if(ratios.begin(), ratios.end(), [](double x) { return x > 1.0; }));
  return n >= std::max(1, min_rounds) && wins >= sign_test_wins(n) &&
         median_of(ratios) > 1 + min_improvement;
}

}  // namespace

std::vector<size_t> confirm_order(size_t n, int round) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  if (round % 2 == 1) std::reverse(order.begin(), order.end());
  return order;
}

std::vector<size_t> score_confirmation(std::vector<ConfirmRow>* rows, double min_improvement,
                                       int min_rounds) {
  std::vector<size_t> ranked;
  if (rows->empty()) return ranked;
  const ConfirmRow& base = rows->front();
  for (size_t i = 0; i < rows->size(); ++i) {
    ConfirmRow& row = (*rows)[i];
    row.ratios.clear();
    std::vector<double> ran;
    for (size_t r = 0; r < row.tokens_per_s.size(); ++r) {
      const double t = row.tokens_per_s[r];
      if (t <= 0) continue;
      ran.push_back(t);
      const double b = r < base.tokens_per_s.size() ? base.tokens_per_s[r] : 0;
      if (b > 0) row.ratios.push_back(t / b);
    }
    row.median_tps = median_of(ran);
    row.median_ratio = median_of(row.ratios);
    row.ratio_spread = 0;
    if (row.ratios.size() >= 2 && row.median_ratio > 0) {
      const auto [lo, hi] = std::minmax_element(row.ratios.begin(), row.ratios.end());
      row.ratio_spread = (*hi - *lo) / row.median_ratio;
    }
    row.beats_baseline = i > 0 && ratios_beat(row.ratios, min_improvement, min_rounds);
    if (i > 0) ranked.push_back(i);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
    return (*rows)[a].median_ratio > (*rows)[b].median_ratio;
  });
  return ranked;
}

bool faster_beyond_noise(const ConfirmRow& a, const ConfirmRow& b, double min_improvement,
                         int min_rounds) {
  std::vector<double> ratios;  // a / b in the rounds where both ran
  const size_t n = std::min(a.tokens_per_s.size(), b.tokens_per_s.size());
  for (size_t r = 0; r < n; ++r) {
    if (a.tokens_per_s[r] > 0 && b.tokens_per_s[r] > 0) {
      ratios.push_back(a.tokens_per_s[r] / b.tokens_per_s[r]);
    }
  }
  return ratios_beat(ratios, min_improvement, min_rounds);
}

}  // namespace ft::tuner
