// recorder.h: low-overhead event recording: per-thread ring buffers, a ns clock, a step window.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ft/profiler/event.h"
#include "ft/profiler/live_device.h"

namespace ft::profiler {

// CLOCK_MONOTONIC in nanoseconds: the clock of every event ft records.
int64_t now_ns() noexcept;

// Which steps to record: [first, last], both inclusive; first < 0 records the whole run.
struct StepWindow {
  int64_t first = -1;
  int64_t last = -1;
  bool whole_run() const { return first < 0; }
  bool contains(int64_t step) const { return whole_run() || (step >= first && step <= last); }
};
// Parses "A-B" (or "A" for one step) into a window; throws ConfigError on anything else.
StepWindow parse_step_window(std::string_view text);

struct RecorderOptions {
  // Capacity of each thread's ring buffer, in events (~100 bytes each). When a ring is full
  // the oldest events are overwritten and counted in Trace::dropped_events.
  size_t events_per_thread = size_t{1} << 16;
  size_t max_depth = 256;  // open ranges per thread; deeper begins are dropped (and counted)
  StepWindow window;
};

// Records events into per-thread ring buffers. The owning thread appends without a lock
// (one atomic flag guards the slot against a concurrent collect()); buffers are registered
// under a mutex on a thread's first event. Names passed to the hot-path calls must outlive
// the recorder (string literals, or pointers from intern()).
class Recorder {
 public:
  explicit Recorder(RecorderOptions options = {});
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Recording happens between start() and stop(), and only inside the step window.
  void start();
  void stop();
  bool started() const { return started_.load(std::memory_order_relaxed); }
  // Whether an event recorded now would be kept (started and the current step in the window).
  bool active() const { return active_.load(std::memory_order_relaxed); }
  // The step events are attributed to; opens/closes the window.
  void set_step(int64_t step);
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  const RecorderOptions& options() const { return options_; }

  // Hot path, all noexcept. begin/end nest per thread; the decision to keep a span is made
  // at begin(), so a span that opened inside the window is kept even if it closes after.
  void begin(const char* name, Category cat, int64_t arg = -1, uint64_t bytes = 0,
             uint8_t flags = 0) noexcept;
  // Closes the innermost open range named `name` (by pointer, then by text); unmatched ends
  // are ignored. Returns false when nothing matched.
  bool end(const char* name) noexcept;
  void instant(const char* name, Category cat, int64_t arg = -1, uint64_t bytes = 0,
               uint8_t flags = 0) noexcept;
  void counter(const char* name, double value) noexcept;
  // A complete event with explicit times (track and name are filled in by the recorder).
  void complete(const char* name, Category cat, int64_t ts_ns, int64_t dur_ns, int64_t arg = -1,
                uint64_t bytes = 0, uint8_t flags = 0) noexcept;

  // Returns a pointer to a stable copy of `s`, for dynamic names (slow: takes a mutex).
  const char* intern(std::string_view s);
  // Names the calling thread's track (default: pthread name, "main" for the main thread).
  void set_thread_name(std::string_view name);
  // The threads that recorded: OS tid and pthread_t (to match CUPTI's thread ids).
  std::vector<ThreadIds> threads();

  // Stops recording, waits for in-flight appends and returns everything recorded so far,
  // oldest first per thread. Can be called more than once; buffers are not cleared.
  Trace collect();

 private:
  struct Slot;
  struct ThreadBuffer;
  ThreadBuffer* buffer() noexcept;
  ThreadBuffer* register_thread() noexcept;
  void append(ThreadBuffer* b, const Slot& s) noexcept;
  void refresh_active();

  RecorderOptions options_;
  const uint64_t id_;  // unique per recorder: keys the thread-local buffer cache
  std::atomic<bool> started_{false};
  std::atomic<bool> active_{false};
  std::atomic<int64_t> step_{-1};
  std::mutex mu_;  // guards buffers_, names_
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
  std::vector<std::unique_ptr<std::string>> names_;
  std::unordered_map<std::string_view, const char*> name_index_;
  std::atomic<uint64_t> lost_registrations_{0};
};

}  // namespace ft::profiler
