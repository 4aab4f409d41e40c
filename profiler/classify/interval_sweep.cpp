// interval_sweep.cpp: the labelled sweep over covering intervals (interval_sweep.h).
#include "interval_sweep.h"

#include <algorithm>
#include <set>
#include <utility>

namespace ft::profiler::sweep {

std::vector<Segment> sweep(std::vector<Interval> ivs, int64_t lo, int64_t hi) {
  std::vector<Segment> out;
  std::vector<std::pair<int64_t, int>> edges;  // (time, +i+1 start / -(i+1) end)
  edges.reserve(2 * ivs.size());
  for (size_t i = 0; i < ivs.size(); ++i) {
    ivs[i].a = std::max(ivs[i].a, lo);
    ivs[i].b = std::min(ivs[i].b, hi);
    if (ivs[i].a >= ivs[i].b) continue;
    edges.emplace_back(ivs[i].a, static_cast<int>(i) + 1);
    edges.emplace_back(ivs[i].b, -static_cast<int>(i) - 1);
  }
  std::sort(edges.begin(), edges.end());
  auto less = [&](int x, int y) {
    const Interval& p = ivs[x];
    const Interval& q = ivs[y];
    if (p.k1 != q.k1) return p.k1 < q.k1;
    if (p.k2 != q.k2) return p.k2 < q.k2;
    if (p.k3 != q.k3) return p.k3 < q.k3;
    return x < y;
  };
  std::set<int, decltype(less)> active(less);
  int64_t t = lo;
  size_t e = 0;
  auto emit = [&](int64_t until) {
    if (until <= t) return;
    const int label = active.empty() ? -1 : ivs[*active.begin()].label;
    if (!out.empty() && out.back().label == label && out.back().b == t) {
      out.back().b = until;
    } else {
      out.push_back({t, until, label});
    }
    t = until;
  };
  while (e < edges.size()) {
    const int64_t now = edges[e].first;
    emit(now);
    for (; e < edges.size() && edges[e].first == now; ++e) {
      const int code = edges[e].second;
      if (code > 0) {
        active.insert(code - 1);
      } else {
        active.erase(-code - 1);
      }
    }
  }
  emit(hi);
  return out;
}

}  // namespace ft::profiler::sweep
