// host_tracer.h: turns the engine's FT_RANGE scopes and step callbacks into recorded events.
#pragma once

#include <cstdint>

#include "ft/core/annotate.h"
#include "ft/profiler/recorder.h"
#include "ft/core/step_observer.h"

namespace ft::profiler {

Category category_of(RangeKind kind);
// Allocator flags from a kAlloc range name: alloc.slow_path, alloc.retry, alloc.oom.
uint8_t alloc_flags_of(const char* name);

// A RangeSink (spans and instants from FT_RANGE / ft::mark) and a StepObserver (step window,
// ProfilerStep#N spans, per-step counters named in classifier.h: loss, lr, grad_norm, memory,
// tokens/s, MFU, page faults, kernel CPU time). Never throws into the engine: anything that fails
// is counted or dropped.
class HostTracer final : public RangeSink, public StepObserver {
 public:
  explicit HostTracer(Recorder& recorder) : recorder_(recorder) {}
  ~HostTracer() override;
  HostTracer(const HostTracer&) = delete;
  HostTracer& operator=(const HostTracer&) = delete;

  // Installs this tracer as the process's range sink. Returns false (and installs nothing)
  // when another sink is installed.
  bool install();
  void uninstall();

  void begin(const char* name, RangeKind kind, int64_t arg) noexcept override;
  void end(const char* name, RangeKind kind) noexcept override;
  void instant(const char* name, RangeKind kind, int64_t arg) noexcept override;

  void on_step_begin(int64_t step) noexcept override;
  void on_step_end(const StepMetrics& m) noexcept override;
  // Records the last step's page-fault and kernel-time counters (sampled between steps); call
  // before the recorder stops (Session::stop does).
  void flush() noexcept;

 private:
  void sample_rusage() noexcept;

  Recorder& recorder_;
  bool installed_ = false;
  const char* step_name_ = nullptr;  // "ProfilerStep#N" of the open step (training thread)
  long minflt0_ = 0, majflt0_ = 0;   // getrusage at step begin
  int64_t system_ns0_ = 0;           // kernel CPU time at step begin
  bool pending_ = false;             // a recorded step awaits its getrusage counters
};

}  // namespace ft::profiler
