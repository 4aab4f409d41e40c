// session.cpp: starts/stops the host tracer and the device source; merges their events.
#include "ft/profiler/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

namespace ft::profiler {

Session::Session(SessionOptions options)
    : options_(options), recorder_(options.recorder), tracer_(recorder_) {}

Session::~Session() {
  stop();
  tracer_.uninstall();
}

void Session::note(const std::string& msg) const {
  if (!options_.quiet) fmt::print(stderr, "ft-profiler: {}\n", msg);
}

void Session::start() {
  host_installed_ = tracer_.install();
  if (!host_installed_) note("another range sink is installed; engine ranges are not recorded");
  recorder_.start();
  if (!options_.device_activity) return;
  if (options_.recorder.window.whole_run()) {
    start_device();
  } else {
    device_pending_ = true;
    device_status_ = fmt::format("not started: the run ended before step {}",
                                 options_.recorder.window.first);
  }
}

void Session::start_device() noexcept {
  device_pending_ = false;
  try {
    device_ = make_cupti_source();
    std::string why;
    if (device_->start(&why)) {
      device_status_ = "recording";
      device_running_ = true;
    } else {
      device_status_ = why;
      device_.reset();
      note(fmt::format("device activity {}; profiling the host only", why));
    }
  } catch (const std::exception& e) {
    device_status_ = std::string("not available: ") + e.what();
    device_.reset();
    note(fmt::format("device activity {}; profiling the host only", device_status_));
  } catch (...) {
    device_status_ = "not available: unknown error";
    device_.reset();
  }
}

void Session::stop_device() noexcept {
  if (device_ && device_running_) device_->stop();
  device_running_ = false;
}

void Session::StepHook::on_step_begin(int64_t step) noexcept {
  const StepWindow& w = s_.options_.recorder.window;
  if (s_.device_pending_ && w.contains(step)) s_.start_device();
  if (s_.device_running_ && !w.whole_run() && step > w.last) s_.stop_device();
  s_.tracer_.on_step_begin(step);
}

void Session::StepHook::on_step_end(const StepMetrics& m) noexcept {
  s_.tracer_.on_step_end(m);
}

void Session::stop() {
  tracer_.flush();
  recorder_.stop();
  stop_device();
}

Trace Session::collect() {
  stop();
  Trace t = recorder_.collect();
  t.metadata["device_activity"] = device_status_;
  if (device_) {
    Trace dev;
    try {
      device_->collect(&dev);
    } catch (const std::exception& e) {  // never fatal: the profile keeps what it has
      note(fmt::format("device activity could not be collected ({}); profiling the host only",
                       e.what()));
      t.metadata["device_activity"] = std::string("failed: ") + e.what();
      dev = Trace();
    }
    // In a step window, keep the device events that overlap the recorded steps.
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (!options_.recorder.window.whole_run()) {
      lo = INT64_MAX;
      hi = INT64_MIN;
      for (const Event& e : t.events) {
        if (e.category == Category::kStep && e.phase == Phase::kSpan) {
          lo = std::min(lo, e.ts_ns);
          hi = std::max(hi, e.end_ns());
        }
      }
    }
    for (const auto& [track, name] : dev.tracks) t.tracks.emplace(track, name);
    for (const auto& [pid, name] : dev.processes) t.processes.emplace(pid, name);
    t.dropped_events += dev.dropped_events;
    for (const auto& [k, v] : dev.metadata) t.metadata[k] = v;
    for (Event e : dev.events) {
      if (e.end_ns() < lo || e.ts_ns > hi) continue;
      e.name = t.names.intern(dev.names.at(e.name));
      t.events.push_back(e);
    }
    prepare_live_device_events(&t, recorder_.threads());
    drop_unpaired_flows(&t);
  }
  return t;
}

void drop_unpaired_flows(Trace* t) {
  std::unordered_map<uint64_t, int> seen;  // bit 0: start seen, bit 1: end seen
  for (const Event& e : t->events) {
    if (e.phase == Phase::kFlowStart) seen[e.id] |= 1;
    if (e.phase == Phase::kFlowEnd) seen[e.id] |= 2;
  }
  std::erase_if(t->events, [&](const Event& e) {
    return (e.phase == Phase::kFlowStart || e.phase == Phase::kFlowEnd) && seen[e.id] != 3;
  });
}

bool enable_nvtx_if_tool_attached() {
  const char* inj = std::getenv("NVTX_INJECTION64_PATH");
  if (inj == nullptr || inj[0] == 0) return false;
  set_nvtx_enabled(true);
  return nvtx_enabled();
}

}  // namespace ft::profiler
