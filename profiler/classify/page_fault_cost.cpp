// page_fault_cost.cpp: measures what one first-touch page fault costs on this machine.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/profiler/classifier.h"

namespace ft::profiler {
namespace {
int64_t thread_minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}
}  // namespace

double measure_page_fault_ns(size_t bytes, int repeats, int64_t* faults_seen) {
  AllocatorOptions options;
  options.caching = false;  // every buffer is a fresh mapping, as in a non-caching run
  CachingAllocator alloc(options);
  std::vector<double> costs;
  int64_t total_faults = 0;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    auto* p = static_cast<volatile char*>(alloc.allocate(bytes, "page_fault_probe"));
    const int64_t f0 = thread_minor_faults();
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off < bytes; off += 4096) p[off] = 1;
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t faults = thread_minor_faults() - f0;
    alloc.deallocate(const_cast<char*>(p));
    total_faults += faults;
    if (faults > 0) {
      costs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / faults);
    }
  }
  if (faults_seen) *faults_seen = total_faults;
  if (costs.empty()) return 0;
  std::sort(costs.begin(), costs.end());
  return costs[costs.size() / 2];
}

}  // namespace ft::profiler
