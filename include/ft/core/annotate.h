// annotate.h: the single place engine code marks phases (scoped ranges in the `ft` domain).
#pragma once

#include <cstdint>

namespace ft {

// Categories a range belongs to; the profiler classifies by them.
enum class RangeKind : uint8_t {
  kCompute, kData, kH2D, kD2H, kComm, kAlloc, kSync, kOptimizer, kHost, kStep, kOther
};

// A sink receives range begin/end events. The default is none, and then a
// range costs one relaxed atomic load. The profiler installs a sink (and NVTX
// when built with FT_WITH_NVTX). A sink must never throw.
class RangeSink {
 public:
  virtual ~RangeSink() = default;
  virtual void begin(const char* name, RangeKind kind, int64_t arg) noexcept = 0;
  virtual void end(const char* name, RangeKind kind) noexcept = 0;
  // A point event (allocator retry, OOM); ignored unless the sink overrides it.
  virtual void instant(const char* name, RangeKind kind, int64_t arg) noexcept {
    (void)name, (void)kind, (void)arg;
  }
};

void set_range_sink(RangeSink* sink) noexcept;
RangeSink* range_sink() noexcept;
// Enables NVTX push/pop alongside the sink (no-op without FT_WITH_NVTX).
void set_nvtx_enabled(bool on) noexcept;
bool nvtx_enabled() noexcept;
// Names a CUDA stream (a cudaStream_t passed as void*) for NVTX tools (Nsight Systems, CUPTI):
// nvtxNameCudaStreamA. A no-op without FT_WITH_NVTX and FT_WITH_CUDA.
void name_cuda_stream(void* stream, const char* name) noexcept;

namespace detail {
void range_begin_slow(const char* name, RangeKind kind, int64_t arg) noexcept;
void range_end_slow(const char* name, RangeKind kind) noexcept;
void instant_slow(const char* name, RangeKind kind, int64_t arg) noexcept;
extern bool g_ranges_active;  // true when a sink or NVTX is installed
}  // namespace detail

// Marks a point in time (an NVTX mark, and RangeSink::instant): `ft::mark("alloc.oom", ...)`.
inline void mark(const char* name, RangeKind kind, int64_t arg = -1) noexcept {
  if (detail::g_ranges_active) detail::instant_slow(name, kind, arg);
}

// Scoped range: `FT_RANGE("fwd.block", ft::RangeKind::kCompute, layer);`
class ScopedRange {
 public:
  ScopedRange(const char* name, RangeKind kind, int64_t arg = -1) noexcept
      : name_(name), kind_(kind), active_(detail::g_ranges_active) {
    if (active_) detail::range_begin_slow(name, kind, arg);
  }
  ~ScopedRange() {
    if (active_) detail::range_end_slow(name_, kind_);
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  const char* name_;
  RangeKind kind_;
  bool active_;
};

#define FT_RANGE_CONCAT2(a, b) a##b
#define FT_RANGE_CONCAT(a, b) FT_RANGE_CONCAT2(a, b)
#define FT_RANGE(...) ::ft::ScopedRange FT_RANGE_CONCAT(ft_range_, __LINE__)(__VA_ARGS__)

}  // namespace ft
