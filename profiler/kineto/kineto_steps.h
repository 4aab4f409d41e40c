// kineto_steps.h: Event::step for imported Kineto events (ProfilerStep#N spans, launch links).
#pragma once

#include <cstdint>
#include <string>
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

// A trace without ProfilerStep spans gets iterations of its own (docs/classification.md, "Traces
// without ProfilerStep"): on the host thread whose outermost spans cover the most time, the
// outermost nesting level where a name repeats, spans at least half of that level's time range
// and is evenly spaced gives one "ProfilerStep#k" span (Category::kStep) per instance, appended to
// `t`: the instance itself when the instances cover at least half their range (an annotation),
// else from each instance to the next (an op called once per iteration). Names marking warm-up
// lose to any other; then the rarest name wins, then the longest in total. Without such a name
// the whole trace is one window. Returns how the iterations were found, for the report; a trace
// that has ProfilerStep spans is left as it is.
std::string synthesize_iterations(KinetoTrace* t);

}  // namespace ft::profiler::kineto
