// interval_sweep.cpp: the labelled sweep over covering intervals (interval_sweep.h).
#include "interval_sweep.h"

#include <algorithm>
#include <array>
#include <utility>

namespace ft::profiler::sweep {
namespace {

// Edges as sortable 64-bit words: (time - lo) << 25 | end/start bit << 24 | interval index. The
// order of edges at one instant does not matter (all are applied before the next segment).
constexpr int kIndexBits = 24;
constexpr int64_t kMaxSpan = int64_t{1} << (63 - kIndexBits - 1);

// LSD radix sort by bytes, skipping the bytes every word shares (the high bytes of small time
// offsets); for the hundreds of thousands of edges of a step, several times faster than a sort.
void radix_sort(std::vector<uint64_t>* v) {
  if (v->size() < 256) {
    std::sort(v->begin(), v->end());
    return;
  }
  std::vector<std::array<uint32_t, 256>> counts(8);
  for (auto& c : counts) c.fill(0);
  for (const uint64_t w : *v) {
    for (int d = 0; d < 8; ++d) ++counts[d][(w >> (8 * d)) & 0xff];
  }
  std::vector<uint64_t> tmp(v->size());
  for (int d = 0; d < 8; ++d) {
    auto& c = counts[d];
    if (c[((*v)[0] >> (8 * d)) & 0xff] == v->size()) continue;  // one value: nothing to move
    uint32_t sum = 0;
    for (uint32_t& x : c) {
      const uint32_t here = x;
      x = sum;
      sum += here;
    }
    for (const uint64_t w : *v) tmp[c[(w >> (8 * d)) & 0xff]++] = w;
    v->swap(tmp);
  }
}

// The edge times in order, with (+i+1 start / -(i+1) end) codes.
std::vector<std::pair<int64_t, int>> sorted_edges(const std::vector<Interval>& ivs, int64_t lo,
                                                  int64_t hi) {
  std::vector<std::pair<int64_t, int>> edges;
  edges.reserve(2 * ivs.size());
  if (hi - lo < kMaxSpan && ivs.size() < (size_t{1} << kIndexBits)) {
    std::vector<uint64_t> words;
    words.reserve(2 * ivs.size());
    for (size_t i = 0; i < ivs.size(); ++i) {
      if (ivs[i].a >= ivs[i].b) continue;
      words.push_back(static_cast<uint64_t>(ivs[i].a - lo) << (kIndexBits + 1) |
                      uint64_t{1} << kIndexBits | i);
      words.push_back(static_cast<uint64_t>(ivs[i].b - lo) << (kIndexBits + 1) | i);
    }
    radix_sort(&words);
    constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
    for (const uint64_t w : words) {
      const int i = static_cast<int>(w & kIndexMask);
      const bool start = (w >> kIndexBits & 1) != 0;
      edges.emplace_back(lo + static_cast<int64_t>(w >> (kIndexBits + 1)), start ? i + 1 : -i - 1);
    }
    return edges;
  }
  for (size_t i = 0; i < ivs.size(); ++i) {
    if (ivs[i].a >= ivs[i].b) continue;
    edges.emplace_back(ivs[i].a, static_cast<int>(i) + 1);
    edges.emplace_back(ivs[i].b, -static_cast<int>(i) - 1);
  }
  std::sort(edges.begin(), edges.end());
  return edges;
}

}  // namespace

std::vector<Segment> sweep(std::vector<Interval> ivs, int64_t lo, int64_t hi) {
  std::vector<Segment> out;
  for (Interval& iv : ivs) {
    iv.a = std::max(iv.a, lo);
    iv.b = std::min(iv.b, hi);
  }
  const std::vector<std::pair<int64_t, int>> edges = sorted_edges(ivs, lo, hi);
  // The covering intervals as a min-heap on the key; an ended interval leaves the heap lazily,
  // when it reaches the top.
  auto after = [&](int x, int y) {
    const Interval& p = ivs[x];
    const Interval& q = ivs[y];
    if (p.k1 != q.k1) return p.k1 > q.k1;
    if (p.k2 != q.k2) return p.k2 > q.k2;
    if (p.k3 != q.k3) return p.k3 > q.k3;
    return x > y;
  };
  std::vector<int> heap;
  std::vector<char> ended(ivs.size(), 0);
  int64_t t = lo;
  size_t e = 0;
  auto emit = [&](int64_t until) {
    if (until <= t) return;
    while (!heap.empty() && ended[heap.front()]) {
      std::pop_heap(heap.begin(), heap.end(), after);
      heap.pop_back();
    }
    const int label = heap.empty() ? -1 : ivs[heap.front()].label;
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
        heap.push_back(code - 1);
        std::push_heap(heap.begin(), heap.end(), after);
      } else {
        ended[-code - 1] = 1;
      }
    }
  }
  emit(hi);
  return out;
}

}  // namespace ft::profiler::sweep
