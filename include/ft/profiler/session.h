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

  trainer::StepObserver* observer() { return &tracer_; }
  Recorder& recorder() { return recorder_; }
  // "recording", "not available: <reason>", "not supported: <reason>" or "off".
  const std::string& device_status() const { return device_status_; }

 private:
  void note(const std::string& msg) const;

  SessionOptions options_;
  Recorder recorder_;
  HostTracer tracer_;
  std::unique_ptr<ActivitySource> device_;
  std::string device_status_ = "off";
  bool host_installed_ = false;
};

// Removes flow starts without an end and ends without a start (e.g. cut by a step window).
void drop_unpaired_flows(Trace* t);

// Enables NVTX ranges when a tool (Nsight Systems, CUPTI) is attached through
// NVTX_INJECTION64_PATH; returns whether it did.
bool enable_nvtx_if_tool_attached();

}  // namespace ft::profiler
