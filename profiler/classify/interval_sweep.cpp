// interval_sweep.cpp: the labelled sweep over covering intervals (interval_sweep.h).
#include "interval_sweep.h"

#include <algorithm>
#include <functional>
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

// Edges of the n intervals whose clamped ends span(i) gives ({a, b}; a >= b: none).
template <class Span>
Edges sorted_edges(size_t n, int64_t lo, int64_t hi, Span span) {
  Edges out;
  out.lo = lo;
  if (hi - lo < kMaxSpan && n < (size_t{1} << kIndexBits)) {
    // Starts and ends apart: callers mostly pass intervals by start, whose starts need no sort.
    std::vector<uint64_t> starts, ends;
    starts.reserve(n);
    ends.reserve(n);
    bool by_start = true;
    for (size_t i = 0; i < n; ++i) {
      const auto [a, b] = span(i);
      if (a >= b) continue;
      const uint64_t w = static_cast<uint64_t>(a - lo) << (kIndexBits + 1);
      by_start = by_start && (starts.empty() || w >= (starts.back() & ~kLowMask));
      starts.push_back(w | uint64_t{1} << kIndexBits | i);
      ends.push_back(static_cast<uint64_t>(b - lo) << (kIndexBits + 1) | i);
    }
    if (!by_start) sort_by_time(&starts);
    sort_by_time(&ends);
    out.words.resize(starts.size() + ends.size());
    std::merge(starts.begin(), starts.end(), ends.begin(), ends.end(), out.words.begin(),
               [](uint64_t x, uint64_t y) { return (x & ~kLowMask) < (y & ~kLowMask); });
    return out;
  }
  out.words.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const auto [a, b] = span(i);
    if (a >= b) continue;
    out.pairs.emplace_back(a, static_cast<int>(i) + 1);
    out.pairs.emplace_back(b, -static_cast<int>(i) - 1);
  }
  std::sort(out.pairs.begin(), out.pairs.end());
  for (size_t k = 0; k < out.pairs.size(); ++k) out.words.push_back(k);
  return out;
}

// The sweep over n intervals: span(i) their clamped ends, after(x, y) whether x ranks below y,
// label_of(i) their labels. Segments go to sink.add, merged with a same-labelled neighbour;
// sink.expect(k) hears first that there are at most k.
template <class Span, class After, class LabelOf, class Sink>
void sweep_core(size_t n, int64_t lo, int64_t hi, Span span, After after, LabelOf label_of,
                Sink& sink) {
  const Edges edges = sorted_edges(n, lo, hi, span);
  const size_t n_edges = edges.words.size();
  sink.expect(n_edges + 1);  // a segment starts at lo or at an edge
  // The covering intervals as a min-heap on the key; an ended interval leaves the heap lazily,
  // when it reaches the top.
  std::vector<int> heap;
  std::vector<char> ended(n, 0);
  int64_t t = lo;
  Segment pending{lo, lo, -2};  // the last segment, held until the next one differs
  auto emit = [&](int64_t until) {
    if (until <= t) return;
    while (!heap.empty() && ended[heap.front()]) {
      std::pop_heap(heap.begin(), heap.end(), after);
      heap.pop_back();
    }
    const int label = heap.empty() ? -1 : label_of(heap.front());
    if (pending.label == label && pending.b == t) {
      pending.b = until;
    } else {
      if (pending.label != -2) sink.add(pending);
      pending = {t, until, label};
    }
    t = until;
  };
  size_t e = 0;
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
  if (pending.label != -2) sink.add(pending);
}

struct VectorSink {
  std::vector<Segment>* out;
  void expect(size_t k) { out->reserve(k); }  // growing by doubling would overshoot the peak
  void add(const Segment& s) { out->push_back(s); }
};
struct CallbackSink {
  const std::function<void(const Segment&)>& fn;
  void expect(size_t) {}
  void add(const Segment& s) { fn(s); }
};

// A span interval's place: the latest start ranks first, then the shortest, then the lowest
// prio, then the first given (the keys of the unclamped span).
auto span_after(const std::vector<SpanInterval>& ivs) {
  return [&ivs](int x, int y) {
    const SpanInterval& p = ivs[x];
    const SpanInterval& q = ivs[y];
    if (p.a != q.a) return p.a < q.a;
    if (p.b - p.a != q.b - q.a) return p.b - p.a > q.b - q.a;
    if (p.prio != q.prio) return p.prio > q.prio;
    return x > y;
  };
}

template <class Sink>
void sweep_spans_into(const std::vector<SpanInterval>& ivs, int64_t lo, int64_t hi, Sink& sink) {
  sweep_core(
      ivs.size(), lo, hi,
      [&](size_t i) { return std::pair(std::max(ivs[i].a, lo), std::min(ivs[i].b, hi)); },
      span_after(ivs), [&](int i) { return ivs[i].label; }, sink);
}

}  // namespace

std::vector<Segment> sweep(std::vector<Interval> ivs, int64_t lo, int64_t hi) {
  std::vector<Segment> out;
  VectorSink sink{&out};
  auto after = [&](int x, int y) {
    const Interval& p = ivs[x];
    const Interval& q = ivs[y];
    if (p.k1 != q.k1) return p.k1 > q.k1;
    if (p.k2 != q.k2) return p.k2 > q.k2;
    if (p.k3 != q.k3) return p.k3 > q.k3;
    return x > y;
  };
  sweep_core(
      ivs.size(), lo, hi,
      [&](size_t i) { return std::pair(std::max(ivs[i].a, lo), std::min(ivs[i].b, hi)); }, after,
      [&](int i) { return ivs[i].label; }, sink);
  return out;
}

std::vector<Segment> sweep_spans(std::vector<SpanInterval> ivs, int64_t lo, int64_t hi) {
  std::vector<Segment> out;
  VectorSink sink{&out};
  sweep_spans_into(ivs, lo, hi, sink);
  return out;
}

void sweep_spans_each(std::vector<SpanInterval> ivs, int64_t lo, int64_t hi,
                      const std::function<void(const Segment&)>& fn) {
  CallbackSink sink{fn};
  sweep_spans_into(ivs, lo, hi, sink);
}

}  // namespace ft::profiler::sweep
