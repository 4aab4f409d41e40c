// page_fault_cost.cpp: measures what a first-touch page fault costs on this machine, for 4 KiB
// pages and for transparent huge pages.
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "ft/profiler/classifier.h"

namespace ft::profiler {
namespace {

int64_t thread_minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

struct Touch {
  double ns = 0;       // time to touch every 4 KiB of the mapping
  int64_t faults = 0;  // minor faults that took
};

// Maps `bytes` (2 MiB aligned), advises it, touches every 4 KiB once and unmaps it. Returns
// {0, 0} when the mapping fails.
Touch touch_fresh(size_t bytes, int advice) {
  const size_t map = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return {};
  const auto addr = reinterpret_cast<uintptr_t>(raw);
  auto* p = reinterpret_cast<volatile char*>((addr + kHugePageBytes - 1) & ~(kHugePageBytes - 1));
  madvise(const_cast<char*>(p), bytes, advice);  // advisory: failure leaves the default policy
  Touch t;
  const int64_t f0 = thread_minor_faults();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t off = 0; off < bytes; off += 4096) p[off] = 1;
  const auto t1 = std::chrono::steady_clock::now();
  t.faults = thread_minor_faults() - f0;
  t.ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  munmap(raw, map);
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

PageFaultCosts measure_page_fault_costs(size_t small_bytes, size_t huge_bytes, int repeats) {
  PageFaultCosts c;
  std::vector<double> small, huge;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const Touch s = touch_fresh(small_bytes, MADV_NOHUGEPAGE);
    c.small_faults += s.faults;
    if (s.faults > 0) small.push_back(s.ns / static_cast<double>(s.faults));
    // The engine allocator's policy: segments >= 2 MiB are advised MADV_HUGEPAGE. A fault that
    // maps a huge page is one per 2 MiB; with THP refused (or off) faults stay one per 4 KiB,
    // and the mapping is not counted as huge.
    const Touch h = touch_fresh(huge_bytes, MADV_HUGEPAGE);
    const int64_t pages = static_cast<int64_t>(huge_bytes / 4096);
    if (h.faults > 0 && h.faults * 8 <= pages) {
      c.huge_faults += h.faults;
      huge.push_back(h.ns / static_cast<double>(h.faults));
    }
  }
  c.small_ns = median(small);
  c.huge_ns = median(huge);
  return c;
}

}  // namespace ft::profiler
