// event.h: ft's trace event model (spans, instants, counters, flows on host and device tracks).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft::profiler {

// What an event is about. The host categories mirror ft::RangeKind (core/annotate.h); the
// device ones come from CUPTI or an imported Kineto trace.
enum class Category : uint8_t {
  kCompute,    // host compute, or a device kernel
  kData,       // loader wait / preprocessing
  kH2D,        // host-to-device copy (flags: kPinned / kPageable, bytes)
  kD2H,        // device-to-host copy
  kD2D,        // device-to-device copy
  kMemset,     // device memset
  kComm,       // collective or point-to-point (bytes, peers)
  kAlloc,      // allocator slow path, retry, OOM
  kSync,       // synchronisation (stream/event/device sync, barrier)
  kOptimizer,  // optimizer update
  kHost,       // host/launch overhead, runtime API calls
  kStep,       // a training step (ProfilerStep#N)
  kCounter,    // counter samples (loss, lr, grad-norm, memory)
  kOther,
};
const char* category_name(Category c);            // "compute", "data", "h2d", ...
bool parse_category(std::string_view s, Category* out);

enum class Phase : uint8_t {
  kSpan,       // complete event: ts, dur
  kInstant,    // ts only
  kCounter,    // ts, value
  kFlowStart,  // ts, flow id (e.g. launch -> kernel)
  kFlowEnd,
};

// A track: a host thread (pid, tid) or a device stream (device, stream).
struct Track {
  uint32_t pid = 0;
  uint32_t tid = 0;
  bool device = false;
  bool operator<(const Track& o) const {
    return device != o.device ? device < o.device : pid != o.pid ? pid < o.pid : tid < o.tid;
  }
  bool operator==(const Track& o) const = default;
};

// Event flags.
enum EventFlags : uint8_t {
  kPinned = 1 << 0,       // copy from/to page-locked memory
  kPageable = 1 << 1,     // copy from/to pageable memory (silently synchronous on CUDA)
  kSynchronous = 1 << 2,  // a synchronous copy/memset/collective
  kSlowPath = 1 << 3,     // allocator: went to the OS / device allocator
  // The same bit on a host CPU operator (kCompute/kOptimizer) of an imported GPU trace: it
  // launches no device work (no runtime call inside it) and lasts at least kCpuWorkMinNs: the
  // program's own CPU computation (tensor math on CPU tensors, input preparation), not dispatch.
  kCpuWork = 1 << 3,
  kRetry = 1 << 4,     // allocator: freed the cache and retried
  kOom = 1 << 5,       // allocator: out of memory
  kNoStream = 1 << 6,  // imported device event without a stream (gpu_user_annotation, ctx sync)
  kNoSourceCategory = 1 << 7,  // imported event had no source category (legacy autograd JSON)
};

// kCpuWork's length bar: a CPU operator this long with no runtime call inside is the program's
// own CPU work; the dispatch of a device operator costs a few µs and launches inside it.
inline constexpr int64_t kCpuWorkMinNs = 50000;

// One event, plain data: per-thread buffers hold these directly.
struct Event {
  int64_t ts_ns = 0;   // monotonic clock (CLOCK_MONOTONIC) ns, or trace time for imports
  int64_t dur_ns = 0;  // spans only
  int64_t step = -1;   // training step the event belongs to, -1 if unknown
  int64_t arg = -1;    // free integer argument (layer index, chunk row, peer rank, ...)
  uint64_t bytes = 0;  // copies, collectives, allocations
  double value = 0.0;  // counters
  uint64_t id = 0;     // flow / correlation id (0 = none)
  Track track;
  uint32_t name = 0;  // index into Trace::names
  Phase phase = Phase::kSpan;
  Category category = Category::kOther;
  uint8_t flags = 0;  // EventFlags
  int64_t end_ns() const { return ts_ns + dur_ns; }
};

// b - a in ns as a double: exact (then rounded once) when the int64 difference fits, else the
// difference of the doubles (malformed traces' times can lie 2^63 ns apart).
inline double exact_gap(int64_t b, int64_t a) {
  int64_t d = 0;
  if (!__builtin_sub_overflow(b, a, &d)) return static_cast<double>(d);
  return static_cast<double>(b) - static_cast<double>(a);
}

// Kineto's step markers: a span named "ProfilerStep#N" counts as step N whatever its category.
inline constexpr const char* kProfilerStep = "ProfilerStep#";

// Interned event names: events carry a 32-bit index.
class StringTable {
 public:
  uint32_t intern(std::string_view s);
  const std::string& at(uint32_t i) const { return strings_.at(i); }
  size_t size() const { return strings_.size(); }
  // Whether name i starts with kProfilerStep (known at intern: the classifier asks per event).
  bool is_profiler_step(uint32_t i) const { return i < step_.size() && step_[i] != 0; }

 private:
  std::vector<std::string> strings_;
  std::vector<uint8_t> step_;
  std::unordered_map<std::string, uint32_t> index_;
};

// A recorded or imported trace: what the classifier, the reports and the trace writers consume.
struct Trace {
  StringTable names;
  std::vector<Event> events;            // any order; consumers sort as they need
  std::map<Track, std::string> tracks;  // display names ("main", "loader worker 0", "stream 7")
  std::map<uint32_t, std::string> processes;  // pid -> name
  uint64_t dropped_events = 0;          // lost to bounded buffers (reported, never silent)
  std::string source;                   // "ft", "kineto", ...
  std::map<std::string, std::string> metadata;  // config, environment, versions
};

}  // namespace ft::profiler
