// interval_sweep.cpp: the labelled sweep over covering intervals (interval_sweep.h).
#include "interval_sweep.h"

#include <algorithm>
#include <utility>

namespace ft::profiler::sweep {
namespace {

// Edges as sortable 64-bit words: (time - lo) << 25 | end/start bit << 24 | interval index. The
// order of edges at one instant does not matter (all are applied before the next segment).
constexpr int kIndexBits = 24;
constexpr int64_t kMaxSpan = int64_t{1} << (63 - kIndexBits - 1);
constexpr uint64_t kLowMask = (uint64_t{1} << (kIndexBits + 1)) - 1;  // start bit and index

// LSD radix sort on the time bits only (from bit kIndexBits + 1, in 11-bit digits, up to the
// highest set bit): edges at one instant may come in any order, so the start bit and the index
// below need no pass. For the hundreds of thousands of edges of a step, 3 scatter passes
// instead of a sort (or of 7 byte passes).
void sort_by_time(std::vector<uint64_t>* v) {
  if (v->size() < 256) {
    std::sort(v->begin(), v->end());
    return;
  }
  constexpr int kFirst = kIndexBits + 1, kDigit = 11;
  constexpr size_t kBuckets = size_t{1} << kDigit;
  uint64_t any = 0;
  for (const uint64_t w : *v) any |= w;
  const int bits = 64 - __builtin_clzll(any | 1);
  const int passes = bits > kFirst ? (bits - kFirst + kDigit - 1) / kDigit : 0;
  std::vector<uint32_t> counts(static_cast<size_t>(passes) * kBuckets, 0);
  for (const uint64_t w : *v) {
    for (int d = 0; d < passes; ++d)
      ++counts[d * kBuckets + ((w >> (kFirst + kDigit * d)) & (kBuckets - 1))];
  }
  std::vector<uint64_t> tmp(v->size());
  for (int d = 0; d < passes; ++d) {
    uint32_t* c = &counts[d * kBuckets];
    const int shift = kFirst + kDigit * d;
    if (c[((*v)[0] >> shift) & (kBuckets - 1)] == v->size()) continue;  // one digit: no move
    uint32_t sum = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      const uint32_t here = c[b];
      c[b] = sum;
      sum += here;
    }
    for (const uint64_t w : *v) tmp[c[(w >> shift) & (kBuckets - 1)]++] = w;
    v->swap(tmp);
  }
}

// The edges in time order as 64-bit words; `decode` turns one into (time, +i+1 start / -(i+1)
// end). Within the word form's range (a span under 2^38 ns, under 2^24 intervals) the words
// hold (time - lo) << 25 | start bit << 24 | index and are radix-sorted by time; otherwise the
// words are indices into a pair-sorted edge list.
struct Edges {
  std::vector<uint64_t> words;
  std::vector<std::pair<int64_t, int>> pairs;  // the fallback's edges
  int64_t lo = 0;
  std::pair<int64_t, int> decode(uint64_t w) const {
    if (!pairs.empty()) return pairs[w];
    constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
    const int i = static_cast<int>(w & kIndexMask);
    return {lo + static_cast<int64_t>(w >> (kIndexBits + 1)),
            (w >> kIndexBits & 1) != 0 ? i + 1 : -i - 1};
  }
};

Edges sorted_edges(const std::vector<Interval>& ivs, int64_t lo, int64_t hi) {
  Edges out;
  out.lo = lo;
  if (hi - lo < kMaxSpan && ivs.size() < (size_t{1} << kIndexBits)) {
    // Starts and ends apart: callers mostly pass intervals by start, whose starts need no sort.
    std::vector<uint64_t> starts, ends;
    starts.reserve(ivs.size());
    ends.reserve(ivs.size());
    bool by_start = true;
    for (size_t i = 0; i < ivs.size(); ++i) {
      if (ivs[i].a >= ivs[i].b) continue;
      const uint64_t a = static_cast<uint64_t>(ivs[i].a - lo) << (kIndexBits + 1);
      by_start = by_start && (starts.empty() || a >= (starts.back() & ~kLowMask));
      starts.push_back(a | uint64_t{1} << kIndexBits | i);
      ends.push_back(static_cast<uint64_t>(ivs[i].b - lo) << (kIndexBits + 1) | i);
    }
    if (!by_start) sort_by_time(&starts);
    sort_by_time(&ends);
    out.words.resize(starts.size() + ends.size());
    std::merge(starts.begin(), starts.end(), ends.begin(), ends.end(), out.words.begin(),
               [](uint64_t x, uint64_t y) { return (x & ~kLowMask) < (y & ~kLowMask); });
    return out;
  }
  out.words.reserve(2 * ivs.size());
  for (size_t i = 0; i < ivs.size(); ++i) {
    if (ivs[i].a >= ivs[i].b) continue;
    out.pairs.emplace_back(ivs[i].a, static_cast<int>(i) + 1);
    out.pairs.emplace_back(ivs[i].b, -static_cast<int>(i) - 1);
  }
  std::sort(out.pairs.begin(), out.pairs.end());
  for (size_t k = 0; k < out.pairs.size(); ++k) out.words.push_back(k);
  return out;
}

}  // namespace

std::vector<Segment> sweep(std::vector<Interval> ivs, int64_t lo, int64_t hi) {
  std::vector<Segment> out;
  for (Interval& iv : ivs) {
    iv.a = std::max(iv.a, lo);
    iv.b = std::min(iv.b, hi);
  }
  const Edges edges = sorted_edges(ivs, lo, hi);
  const size_t n_edges = edges.words.size();
  // A segment starts at lo or at an edge: at most n_edges + 1 (growing by doubling would
  // overshoot the peak by up to half again).
  out.reserve(n_edges + 1);
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
  while (e < n_edges) {
    const int64_t now = edges.decode(edges.words[e]).first;
    emit(now);
    for (std::pair<int64_t, int> edge;
         e < n_edges && (edge = edges.decode(edges.words[e])).first == now; ++e) {
      const int code = edge.second;
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
