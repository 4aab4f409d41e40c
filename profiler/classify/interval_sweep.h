// interval_sweep.h: splits a time range into segments, each labelled by the winning interval
// that covers it (the smallest ordering key). Internal to profiler/classify.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ft::profiler::sweep {

struct Interval {
  int64_t a = 0, b = 0;            // [a, b)
  int label = -1;                  // caller's label
  int64_t k1 = 0, k2 = 0, k3 = 0;  // ordering key: the smallest (k1, k2, k3) covers the instant
};

struct Segment {
  int64_t a = 0, b = 0;
  int label = -1;  // -1: nothing covers it
};

// Splits [lo, hi) into segments, each labelled by the winning covering interval (label -1:
// nothing covers it). Adjacent segments with one label are merged.
std::vector<Segment> sweep(std::vector<Interval> ivs, int64_t lo, int64_t hi);

// A span [a, b) of a thread's trace, in half an Interval's bytes: its key is its own
// unclamped extent, the innermost winning (the latest start, then the shortest), then the
// lowest prio. As an Interval {a, b, label, -a, b - a, prio}.
struct SpanInterval {
  int64_t a = 0, b = 0;
  int32_t label = -1;
  int32_t prio = 0;
};
std::vector<Segment> sweep_spans(std::vector<SpanInterval> ivs, int64_t lo, int64_t hi);
// The same segments, in order, handed to fn one at a time instead of held.
void sweep_spans_each(std::vector<SpanInterval> ivs, int64_t lo, int64_t hi,
                      const std::function<void(const Segment&)>& fn);

}  // namespace ft::profiler::sweep
