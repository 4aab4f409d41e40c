// staging_pool.h: a fixed set of staging buffers handed out and returned by the loader (private).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "ft/trainer/loader.h"

namespace ft::trainer::data {

class StagingPool {
 public:
  // Allocates `count` buffers of `bytes` each, once.
  StagingPool(std::shared_ptr<StagingBackend> backend, size_t bytes, int count);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A free buffer; with `wait`, blocks until one is returned. nullptr when none (or stopped).
  int32_t* acquire(bool wait);
  void release(int32_t* p) noexcept;
  // Wakes and fails every blocked acquire from now on.
  void stop() noexcept;
  StagingBackend& backend() { return *backend_; }
  size_t bytes() const { return bytes_; }
  size_t capacity() const { return all_.size(); }
  std::atomic<int> held_by_consumer{0};

 private:
  std::shared_ptr<StagingBackend> backend_;
  size_t bytes_;
  std::vector<int32_t*> all_, free_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace ft::trainer::data
