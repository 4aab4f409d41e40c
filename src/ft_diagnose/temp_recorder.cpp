// temp_recorder.cpp: TEMPORARY range-sink recorder (swap for prof's recorder at merge).
#include "temp_recorder.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace ft::diagnose {
namespace {

using profiler::Category;

struct Open {
  int64_t ts;
  const char* name;
  RangeKind kind;
  int64_t arg;
};
thread_local std::vector<Open> t_stack;
thread_local uint32_t t_tid = 0;
thread_local const TempRecorder* t_owner = nullptr;

Category category_of(RangeKind k) {
  switch (k) {
    case RangeKind::kCompute:
      return Category::kCompute;
    case RangeKind::kData:
      return Category::kData;
    case RangeKind::kH2D:
      return Category::kH2D;
    case RangeKind::kD2H:
      return Category::kD2H;
    case RangeKind::kComm:
      return Category::kComm;
    case RangeKind::kAlloc:
      return Category::kAlloc;
    case RangeKind::kSync:
      return Category::kSync;
    case RangeKind::kOptimizer:
      return Category::kOptimizer;
    case RangeKind::kHost:
      return Category::kHost;
    case RangeKind::kStep:
      return Category::kStep;
    case RangeKind::kOther:
      return Category::kOther;
  }
  return Category::kOther;
}

int64_t process_minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

int64_t process_system_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_stime.tv_sec) * 1000000000 + ru.ru_stime.tv_usec * 1000;
}

}  // namespace

TempRecorder::TempRecorder() : pid_(static_cast<uint32_t>(::getpid())) {
  trace_.source = "ft-diagnose run";
  trace_.processes[pid_] = "ft-train (in ft-diagnose)";
}

TempRecorder::~TempRecorder() = default;

int64_t TempRecorder::now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

uint32_t TempRecorder::thread_id() {
  if (t_owner != this) {
    t_owner = this;
    t_tid = next_tid_++;
    t_stack.clear();
  }
  return t_tid;
}

void TempRecorder::begin(const char* name, RangeKind kind, int64_t arg) noexcept {
  const uint32_t tid = thread_id();
  if (kind == RangeKind::kStep) {
    current_step_ = arg;
    main_tid_ = tid;
    faults_at_step_begin_ = process_minor_faults();
    system_ns_at_step_begin_ = process_system_ns();
  }
  try {
    t_stack.push_back({now_ns(), name, kind, arg});
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    ++trace_.dropped_events;  // out of memory: this range is not recorded
  }
}

void TempRecorder::end(const char* name, RangeKind kind) noexcept {
  const int64_t t = now_ns();
  const uint32_t tid = thread_id();
  if (t_stack.empty()) return;  // began before the sink was installed
  const Open o = t_stack.back();
  t_stack.pop_back();
  (void)name;
  std::lock_guard<std::mutex> lock(mu_);
  try {
    profiler::Event ev;
    ev.ts_ns = o.ts;
    ev.dur_ns = t - o.ts;
    ev.arg = o.arg;
    ev.step = kind == RangeKind::kStep ? o.arg : current_step_.load();
    ev.track = {pid_, tid, false};
    ev.name = trace_.names.intern(o.name);
    ev.phase = profiler::Phase::kSpan;
    ev.category = category_of(o.kind);
    const std::string n = o.name;
    if (n == "alloc.retry") ev.flags |= profiler::kRetry;
    if (n == "alloc.oom") ev.flags |= profiler::kOom;
    if (n == "alloc.segment_map") ev.flags |= profiler::kSlowPath;
    trace_.events.push_back(ev);
    if (!trace_.tracks.count(ev.track)) {
      trace_.tracks[ev.track] = tid == main_tid_ ? "main" : "thread " + std::to_string(tid);
    }
    if (kind == RangeKind::kStep) {
      profiler::Event f;
      f.ts_ns = t;
      f.step = o.arg;
      f.value = static_cast<double>(process_minor_faults() - faults_at_step_begin_);
      f.track = ev.track;
      f.name = trace_.names.intern("page_faults.minor");
      f.phase = profiler::Phase::kCounter;
      f.category = Category::kCounter;
      trace_.events.push_back(f);
      f.value = static_cast<double>(process_system_ns() - system_ns_at_step_begin_);
      f.name = trace_.names.intern("cpu.system_ns");
      trace_.events.push_back(f);
    }
  } catch (...) {
    ++trace_.dropped_events;
  }
}

void TempRecorder::counter(const char* name, int64_t step, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  profiler::Event ev;
  ev.ts_ns = now_ns();
  ev.step = step;
  ev.value = value;
  ev.track = {pid_, main_tid_, false};
  ev.name = trace_.names.intern(name);
  ev.phase = profiler::Phase::kCounter;
  ev.category = Category::kCounter;
  trace_.events.push_back(ev);
}

profiler::Trace TempRecorder::take() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(trace_);
}

}  // namespace ft::diagnose
