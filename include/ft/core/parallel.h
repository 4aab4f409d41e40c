// parallel.h: run independent jobs 0..n-1 on the machine's cores (rank files, per-rank analyses).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace ft {

// The machine's logical CPUs (at least 1), read once: std::thread::hardware_concurrency reads a
// sysfs file on every call.
inline unsigned logical_cpus() {
  static const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  return n;
}

// Calls fn(i) for every i in [0, n) on up to min(n, max_threads) threads (0: the logical CPUs),
// each taking the next index; the calling thread works too. If calls throw, every other call
// still runs, and the exception of the lowest index is rethrown (as a sequential loop that
// stopped there would report).
template <typename Fn>
void parallel_for(size_t n, Fn&& fn, size_t max_threads = 0) {
  if (n == 0) return;
  if (max_threads == 0) max_threads = logical_cpus();
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(n, max_threads); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace ft
