// session.h: one profiling session: recorder + host tracer + device activity, and its Trace.
#pragma once

#include <memory>
#include <string>

#include "ft/profiler/activity_source.h"
#include "ft/profiler/host_tracer.h"
#include "ft/profiler/recorder.h"

namespace ft::profiler {

struct SessionOptions {
  RecorderOptions recorder;
  bool device_activity = true;  // try the CUPTI source (host-only when unavailable)
  bool quiet = false;           // no "ft-profiler:" notes on stderr
};

// Usage: Session s(opts); s.start(); trainer.set_observer(s.observer()); ...train...;
// Trace t = s.collect(); write_trace_json(t, path). Nothing here throws into the training
// loop; problems are logged (stderr) and the profile degrades (e.g. to host-only).
//
// The device source (CUPTI) records only around the profiled steps: for a step window A-B it
// starts at step A's begin and stops (flushing its buffers) at the begin of the first step after
// B, or at stop(); for the whole run it starts with the session. Both happen on the training
// thread between step spans. collect() moves CUPTI's API calls onto ft's host threads and gives
// those inside ft's wait ranges the wait's class (live_device.h).
class Session {
 public:
  explicit Session(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();
  void stop();
  // Stops, then merges host and device events; metadata says what the device source did.
  Trace collect();

  StepObserver* observer() { return &hook_; }
  Recorder& recorder() { return recorder_; }
  // "recording", "not available: <reason>", "not supported: <reason>" or "off".
  const std::string& device_status() const { return device_status_; }

 private:
  // Forwards steps to the host tracer and starts/stops the device source at the window's edges.
  class StepHook final : public StepObserver {
   public:
    explicit StepHook(Session& s) : s_(s) {}
    void on_step_begin(int64_t step) noexcept override;
    void on_step_end(const StepMetrics& m) noexcept override;

   private:
    Session& s_;
  };
  void note(const std::string& msg) const;
  void start_device() noexcept;
  void stop_device() noexcept;

  SessionOptions options_;
  Recorder recorder_;
  HostTracer tracer_;
  StepHook hook_{*this};
  std::unique_ptr<ActivitySource> device_;
  std::string device_status_ = "off";
  bool host_installed_ = false;
  bool device_pending_ = false;  // waiting for the window's first step
  bool device_running_ = false;
};

// Removes flow starts without an end and ends without a start (e.g. cut by a step window).
void drop_unpaired_flows(Trace* t);

// Enables NVTX ranges when a tool (Nsight Systems, CUPTI) is attached through
// NVTX_INJECTION64_PATH; returns whether it did.
bool enable_nvtx_if_tool_attached();

}  // namespace ft::profiler
