// temp_recorder.h: TEMPORARY in-branch recorder (an ft::RangeSink that builds a Trace) until prof's
// recorder is merged.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "ft/core/annotate.h"
#include "ft/profiler/event.h"

namespace ft::diagnose {

// Records every FT_RANGE as a complete span on its thread's track, and per-step minor page
// faults and kernel CPU time (getrusage, whole process) as "page_faults.minor" and
// "cpu.system_ns" counters. Not bounded: meant for
// the short windows ft-diagnose profiles. Replace with prof's recorder at merge.
class TempRecorder : public RangeSink {
 public:
  TempRecorder();
  ~TempRecorder() override;
  void begin(const char* name, RangeKind kind, int64_t arg) noexcept override;
  void end(const char* name, RangeKind kind) noexcept override;
  // A counter sample at the current time on the training thread's track.
  void counter(const char* name, int64_t step, double value);
  static int64_t now_ns();
  // Moves the recorded trace out (call after set_range_sink(nullptr)).
  profiler::Trace take();

 private:
  uint32_t thread_id();
  std::mutex mu_;
  profiler::Trace trace_;
  std::atomic<int64_t> current_step_{-1};
  std::atomic<uint32_t> next_tid_{1};
  uint32_t pid_ = 0;
  std::atomic<uint32_t> main_tid_{0};
  int64_t faults_at_step_begin_ = 0;
  int64_t system_ns_at_step_begin_ = 0;
};

}  // namespace ft::diagnose
