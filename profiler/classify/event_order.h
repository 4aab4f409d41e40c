// event_order.h: total orders on event pointers, so that no result depends on how a sort breaks
// ties (events of one start and length: a profiler writes the enclosing one first). Internal to
// profiler/classify.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::profiler {

// Sorts *v by `before` (a strict total order, so the result is the same whichever sort runs).
// Events collected in trace order come in a few sorted runs (each thread's or device's events in
// file order, a prepared trace's gap copies after them: 6 runs of 94k spans on df_index_resolver's
// training thread), which are merged; many runs are sorted.
template <typename Before>
void sort_events(std::vector<const Event*>* v, Before before) {
  constexpr size_t kMaxRuns = 64;
  std::vector<size_t> bounds = {0};
  for (size_t i = 1; i < v->size(); ++i) {
    if (!before((*v)[i], (*v)[i - 1])) continue;
    if (bounds.size() == kMaxRuns) {
      std::sort(v->begin(), v->end(), before);
      return;
    }
    bounds.push_back(i);
  }
  bounds.push_back(v->size());
  // Pairs of neighbouring runs merged until one is left.
  while (bounds.size() > 2) {
    std::vector<size_t> merged = {0};
    for (size_t k = 0; k + 1 < bounds.size(); k += 2) {
      const size_t end = k + 2 < bounds.size() ? bounds[k + 2] : bounds[k + 1];
      if (k + 2 < bounds.size())
        std::inplace_merge(v->begin() + static_cast<std::ptrdiff_t>(bounds[k]),
                           v->begin() + static_cast<std::ptrdiff_t>(bounds[k + 1]),
                           v->begin() + static_cast<std::ptrdiff_t>(end), before);
      merged.push_back(end);
    }
    bounds = std::move(merged);
  }
}

// By start, then by place in the trace.
inline void sort_by_start(std::vector<const Event*>* v) {
  sort_events(v, [](const Event* a, const Event* b) {
    return a->ts_ns != b->ts_ns ? a->ts_ns < b->ts_ns : a < b;
  });
}

// By start, the longer first at one start (an enclosing span before what it holds), then by
// place in the trace (a parent before its child of the same extent).
inline void sort_outer_first(std::vector<const Event*>* v) {
  sort_events(v, [](const Event* a, const Event* b) {
    return a->ts_ns != b->ts_ns     ? a->ts_ns < b->ts_ns
           : a->dur_ns != b->dur_ns ? a->dur_ns > b->dur_ns
                                    : a < b;
  });
}

}  // namespace ft::profiler
