// activity_source.h: the interface of device activity backends (CUPTI) feeding a profile.
#pragma once

#include <memory>
#include <string>

#include "ft/profiler/event.h"

namespace ft::profiler {

// A source of device-side events (kernels, copies, memsets, syncs, runtime API calls).
// Its timestamps are on ft's clock (now_ns()). A source that cannot run says why and the
// profile continues host-only.
class ActivitySource {
 public:
  virtual ~ActivitySource() = default;
  virtual const char* name() const = 0;
  // Starts recording; false with *why ("not available: ...", "not supported: ...") otherwise.
  virtual bool start(std::string* why) noexcept = 0;
  // Stops recording and flushes what the backend still buffers.
  virtual void stop() noexcept = 0;
  // Appends the recorded events (names, tracks, processes) to `out` and adds the records the
  // backend dropped to out->dropped_events.
  virtual void collect(Trace* out) = 0;
};

// The CUPTI activity source. Without FT_WITH_CUPTI its start() reports "not supported".
std::unique_ptr<ActivitySource> make_cupti_source();

}  // namespace ft::profiler
