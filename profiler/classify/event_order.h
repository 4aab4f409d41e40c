// event_order.h: total orders on event pointers, so that no result depends on how a sort breaks
// ties (events of one start and length: a profiler writes the enclosing one first). Internal to
// profiler/classify.
#pragma once

#include <algorithm>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::profiler {

// By start, then by place in the trace. Events collected in trace order mostly are in this order
// already: then nothing is sorted.
inline void sort_by_start(std::vector<const Event*>* v) {
  auto before = [](const Event* a, const Event* b) {
    return a->ts_ns != b->ts_ns ? a->ts_ns < b->ts_ns : a < b;
  };
  if (!std::is_sorted(v->begin(), v->end(), before)) std::sort(v->begin(), v->end(), before);
}

// By start, the longer first at one start (an enclosing span before what it holds), then by
// place in the trace (a parent before its child of the same extent).
inline void sort_outer_first(std::vector<const Event*>* v) {
  auto before = [](const Event* a, const Event* b) {
    return a->ts_ns != b->ts_ns     ? a->ts_ns < b->ts_ns
           : a->dur_ns != b->dur_ns ? a->dur_ns > b->dur_ns
                                    : a < b;
  };
  if (!std::is_sorted(v->begin(), v->end(), before)) std::sort(v->begin(), v->end(), before);
}

}  // namespace ft::profiler
