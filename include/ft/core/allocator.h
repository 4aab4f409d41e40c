// allocator.h: the caching host allocator every tensor goes through, with a budget and statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ft {

class BlockPool;  // ft/core/block_pool.h

// Allocator statistics, in bytes unless noted.
struct AllocatorStats {
  size_t allocated = 0;        // bytes held by live blocks (rounded sizes, plus any unsplit tail)
  size_t requested = 0;        // bytes asked for by live blocks (unrounded)
  size_t reserved = 0;         // bytes held from the OS in segments
  size_t peak_allocated = 0;   // high-water mark of `allocated`
  size_t peak_reserved = 0;    // high-water mark of `reserved`
  size_t segments = 0;         // live segments
  size_t largest_free_block = 0;  // largest cached free block inside reserved segments
  uint64_t num_allocs = 0;        // successful allocations
  uint64_t num_frees = 0;
  uint64_t slow_path_allocs = 0;  // allocations that had to map a new segment
  uint64_t cache_flush_retries = 0;  // times the cache was released and the request retried
  uint64_t ooms = 0;              // requests that failed
  uint64_t segment_maps = 0;      // total segments ever mapped
  uint64_t segment_unmaps = 0;    // total segments ever returned to the OS
  // 1 - largest_free_block / (reserved - allocated); 0 when nothing is free.
  double fragmentation() const;
};

// Policy knobs, chosen to make allocator behaviour observable and tunable.
struct AllocatorOptions {
  size_t memory_limit = 0;         // budget on reserved bytes; 0 = unlimited
  bool caching = true;             // false: every free returns memory to the OS (models a no-cache allocator)
  size_t min_segment = 2u << 20;   // smallest segment mapped for small requests
  size_t round_to = 512;           // block sizes are rounded up to this many bytes (alignment too)
  bool huge_pages = true;          // madvise(MADV_HUGEPAGE) on segments >= 2 MiB
  bool split_large = true;         // false: never split a cached block (wasteful policy, for experiments)
};

// A best-fit caching allocator over mmapped segments. Blocks are split on
// allocation and coalesced with free neighbours on release. When a new segment
// would exceed the budget, cached free segments are released and the request
// retried once; failing that, OutOfMemoryError names the request, the free
// bytes and the fragmentation. Thread-safe.
class CachingAllocator {
 public:
  explicit CachingAllocator(AllocatorOptions options = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns memory aligned to 64 bytes. `tag` names the request in OOM errors.
  void* allocate(size_t bytes, const char* tag = "");
  void deallocate(void* ptr);
  // Returns all wholly free segments to the OS.
  void release_cached();

  AllocatorStats stats() const;
  void reset_peak();
  const AllocatorOptions& options() const { return options_; }
  // Sets the budget on reserved bytes (0 = unlimited). Lowering it below
  // `reserved` releases wholly free cached segments; live blocks are untouched.
  void set_memory_limit(size_t bytes);

 private:
  size_t release_cached_locked();

  AllocatorOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<BlockPool> pool_;  // the shared block policy over mmapped segments
};

// The process-wide allocator used by the engine.
CachingAllocator& default_allocator();

// Move-only ownership of `count` T taken from an allocator with deallocate(void*): what
// Buffer and the device allocator's DeviceBuffer share.
template <typename T, typename Alloc>
class OwnedArray {
 public:
  OwnedArray() = default;
  ~OwnedArray() { reset(); }
  OwnedArray(OwnedArray&& o) noexcept : alloc_(o.alloc_), count_(o.count_), ptr_(o.ptr_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  OwnedArray& operator=(OwnedArray&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = o.alloc_;
      count_ = o.count_;
      ptr_ = o.ptr_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  OwnedArray(const OwnedArray&) = delete;
  OwnedArray& operator=(const OwnedArray&) = delete;

  void reset() noexcept {
    if (ptr_) alloc_->deallocate(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  size_t size() const { return count_; }

 protected:
  OwnedArray(Alloc& alloc, size_t count, void* ptr)
      : alloc_(&alloc), count_(count), ptr_(static_cast<T*>(ptr)) {}
  T* get() const { return ptr_; }

 private:
  Alloc* alloc_ = nullptr;
  size_t count_ = 0;
  T* ptr_ = nullptr;
};

// RAII buffer from an allocator: `Buffer<float> x(alloc, n, "tag")`.
template <typename T>
class Buffer : public OwnedArray<T, CachingAllocator> {
 public:
  Buffer() = default;
  Buffer(CachingAllocator& alloc, size_t count, const char* tag = "")
      : OwnedArray<T, CachingAllocator>(
            alloc, count, count ? alloc.allocate(count * sizeof(T), tag) : nullptr) {}

  T* data() { return this->get(); }
  const T* data() const { return this->get(); }
  T& operator[](size_t i) { return this->get()[i]; }
  const T& operator[](size_t i) const { return this->get()[i]; }
};

// Parses "512M", "2G", "1048576" into bytes; throws ConfigError.
size_t parse_bytes(const std::string& text);
std::string format_bytes(size_t bytes);

}  // namespace ft
