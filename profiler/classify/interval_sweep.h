// interval_sweep.h: splits a time range into segments, each labelled by the winning interval
// that covers it (the smallest ordering key). Internal to profiler/classify.
#pragma once

#include <cstdint>
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

}  // namespace ft::profiler::sweep
