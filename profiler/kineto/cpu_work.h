// cpu_work.h: marks the host CPU operators of an imported trace that compute on the CPU (kCpuWork).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ft/profiler/event.h"

namespace ft::profiler::kineto {

// Flags kCpuWork on the host CPU operators (kCompute/kOptimizer spans) among events[0, n) that
// last at least kCpuWorkMinNs, hold no runtime call (kHost, kSync or kAlloc span) of their
// thread at any depth, and are not views, metadata, allocation, autograd wrappers or Python
// frames (by name).
// Only when the trace has device events: a CPU-only trace has no dispatch to tell apart.
// Returns how many it flagged.
size_t mark_cpu_work(Event* events, size_t n, const StringTable& names);

}  // namespace ft::profiler::kineto
