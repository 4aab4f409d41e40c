// host_tracer.cpp: RangeKind -> Category mapping, step spans and per-step counters.
#include "ft/profiler/host_tracer.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cstring>

#include "ft/profiler/classifier.h"

namespace ft::profiler {
namespace {

int64_t system_ns(const rusage& ru) {
  return static_cast<int64_t>(ru.ru_stime.tv_sec) * 1000000000 +
         int64_t{ru.ru_stime.tv_usec} * 1000;
}

}  // namespace

Category category_of(RangeKind kind) {
  switch (kind) {
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

uint8_t alloc_flags_of(const char* name) {
  if (name == nullptr) return 0;
  if (std::strcmp(name, "alloc.slow_path") == 0) return kSlowPath;
  if (std::strcmp(name, "alloc.retry") == 0) return kRetry;
  if (std::strcmp(name, "alloc.oom") == 0) return kOom;
  return 0;
}

HostTracer::~HostTracer() { uninstall(); }

bool HostTracer::install() {
  if (installed_) return true;
  if (range_sink() != nullptr) return false;
  set_range_sink(this);
  installed_ = true;
  return true;
}

void HostTracer::uninstall() {
  if (!installed_) return;
  if (range_sink() == this) set_range_sink(nullptr);
  installed_ = false;
}

void HostTracer::begin(const char* name, RangeKind kind, int64_t arg) noexcept {
  if (kind == RangeKind::kStep) {
    // The step span is named as Kineto names it; begin() decides whether it is kept.
    const char* step_name = name;
    if (recorder_.active()) {
      try {
        step_name = recorder_.intern(fmt::format("ProfilerStep#{}", arg));
      } catch (...) {
        step_name = name;
      }
    }
    step_name_ = step_name;
    recorder_.begin(step_name, Category::kStep, arg);
    return;
  }
  if (kind == RangeKind::kAlloc) {
    recorder_.begin(name, Category::kAlloc, -1, arg > 0 ? static_cast<uint64_t>(arg) : 0,
                    alloc_flags_of(name));
    return;
  }
  recorder_.begin(name, category_of(kind), arg);
}

void HostTracer::end(const char* name, RangeKind kind) noexcept {
  if (kind == RangeKind::kStep && step_name_ != nullptr) {
    recorder_.end(step_name_);
    step_name_ = nullptr;
    return;
  }
  recorder_.end(name);
}

void HostTracer::instant(const char* name, RangeKind kind, int64_t arg) noexcept {
  if (kind == RangeKind::kAlloc) {
    recorder_.instant(name, Category::kAlloc, -1, arg > 0 ? static_cast<uint64_t>(arg) : 0,
                      alloc_flags_of(name));
    return;
  }
  recorder_.instant(name, category_of(kind), arg);
}

// getrusage(RUSAGE_SELF) sums over the process's threads and, on a loaded machine, measured
// 10-30 ms in half of the calls (a thread of the group waiting for a CPU), so it is sampled
// between steps (here and in flush()), never inside a step span: one sample ends step N's fault
// and kernel-time counters and starts step N+1's.
void HostTracer::sample_rusage() noexcept {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) {
    pending_ = false;
    return;
  }
  if (pending_ && recorder_.active()) {  // still attributed to the step that ended
    recorder_.counter(kCounterMinorFaults, static_cast<double>(ru.ru_minflt - minflt0_));
    recorder_.counter(kCounterMajorFaults, static_cast<double>(ru.ru_majflt - majflt0_));
    recorder_.counter(kCounterSystemNs, static_cast<double>(system_ns(ru) - system_ns0_));
  }
  pending_ = false;
  minflt0_ = ru.ru_minflt;
  majflt0_ = ru.ru_majflt;
  system_ns0_ = system_ns(ru);
}

void HostTracer::on_step_begin(int64_t step) noexcept {
  sample_rusage();
  recorder_.set_step(step);
}

void HostTracer::on_step_end(const StepMetrics& m) noexcept {
  if (!recorder_.active()) return;
  // Counter names are the classifier's (ft/profiler/classifier.h): one list for both sides.
  recorder_.counter(kCounterLoss, m.loss);
  recorder_.counter(kCounterLr, m.lr);
  recorder_.counter(kCounterGradNorm, m.grad_norm);
  recorder_.counter(kCounterMemAllocated, static_cast<double>(m.mem_allocated));
  recorder_.counter(kCounterMemReserved, static_cast<double>(m.mem_reserved));
  recorder_.counter(kCounterMemPeak, static_cast<double>(m.mem_peak));
  recorder_.counter(kCounterTokensPerS, m.tokens_per_s);
  recorder_.counter(kCounterMfu, m.mfu);
  recorder_.counter(kCounterDataMs, m.data_ms);
  recorder_.counter(kCounterDataProduceMs, m.data_preprocess_ms);
  pending_ = true;  // page faults and kernel time follow at the next step begin or flush()
}

void HostTracer::flush() noexcept {
  if (pending_) sample_rusage();
}

}  // namespace ft::profiler
