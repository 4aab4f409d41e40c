// kineto_steps.h: Event::step for imported Kineto events (ProfilerStep#N spans, launch links).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ft/profiler/kineto_trace.h"

namespace ft::profiler::kineto {

// The reader's step rule (kineto_reader.h): a ProfilerStep#N span has step N; every other host
// event takes the step whose host interval holds its ts; a device event takes the step of the
// first host event (file order) carrying its correlation id. Built from one trace's records.
class StepIndex {
 public:
  explicit StepIndex(const KinetoTrace& t);
  // Step of an event of that trace, as decoded by KinetoTrace::event.
  int64_t step_of(const Event& e) const;
  // Step number a span of this name carries itself (ProfilerStep#N of category kStep), else -1.
  int64_t own_step(const Event& e) const;
  // Frees the correlation links: step_of stays exact for host events only.
  void drop_links();

 private:
  struct Step {
    int64_t start, end, n;
  };
  struct Link {
    uint64_t id;
    uint32_t pos;   // file position: the first one wins among equal ids
    uint32_t step;  // index into steps_
  };
  size_t find_index(int64_t ts) const;  // the step holding ts, steps_.size() if none
  int64_t find(int64_t ts) const;

  std::vector<int64_t> name_step_;  // per name id: profiler_step_number
  std::vector<Step> steps_;         // host kStep spans by start
  std::vector<Link> links_;         // host events with an id inside a step, by (id, pos)
};

}  // namespace ft::profiler::kineto
