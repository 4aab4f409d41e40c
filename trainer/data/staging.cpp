// staging.cpp: the reusable pool of batch staging buffers and its plain host-memory backend.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "ft/core/error.h"
#include "staging_pool.h"

namespace ft::trainer::data {
namespace {

class HostStaging : public StagingBackend {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);  // fault the pages in now, not on the first batch
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { std::free(p); }
  std::string name() const override { return "host"; }
};

}  // namespace

std::shared_ptr<StagingBackend> make_host_staging() { return std::make_shared<HostStaging>(); }

StagingPool::StagingPool(std::shared_ptr<StagingBackend> backend, size_t bytes, int count)
    : backend_(std::move(backend)), bytes_(bytes) {
  if (!backend_) backend_ = make_host_staging();
  if (count <= 0) throw ConfigError(fmt::format("staging pool needs buffers (got {})", count));
  try {
    for (int i = 0; i < count; ++i) {
      all_.push_back(static_cast<int32_t*>(backend_->allocate(bytes_)));
      free_.push_back(all_.back());
    }
  } catch (...) {
    for (int32_t* p : all_) backend_->deallocate(p, bytes_);
    throw;
  }
}

StagingPool::~StagingPool() {
  for (int32_t* p : all_) backend_->deallocate(p, bytes_);
}

int32_t* StagingPool::acquire(bool wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (wait) cv_.wait(lock, [&] { return !free_.empty() || stopped_; });
  if (free_.empty() || stopped_) return nullptr;
  int32_t* p = free_.back();
  free_.pop_back();
  return p;
}

void StagingPool::release(int32_t* p) noexcept {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(p);
  }
  cv_.notify_all();
}

void StagingPool::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

}  // namespace ft::trainer::data
