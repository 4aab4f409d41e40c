// device_allocator.h: stream-ordered caching allocator for device memory from a pluggable backend.
//
// Internal header (no CUDA types): the policy is plain C++ compiled into ft_trainer, so the
// CPU tests verify it against a fake backend that hands out address ranges. Rounding,
// best-fit reuse, split/coalesce, the OOM retry and statistics are the block pool shared
// with the host allocator (ft/core/block_pool.h); stream ordering is added here. The real
// backend (cudaMalloc, cudaEvent) is trainer/cuda/device_allocator.cu.
//
// Stream ordering (as PyTorch's CUDA caching allocator, with a cheaper cross-stream rule):
//  - every block belongs to the stream it was last allocated on;
//  - deallocate() makes a block reusable AT ONCE on that stream: later work on the same
//    stream is ordered after every use of the block;
//  - a free block of stream A may serve a request on stream B: the allocator records an
//    event on A and makes B wait for it (on the device, no host sync); the block then
//    belongs to B;
//  - record_stream(p, S) says p is also used by work on S; its deallocate() then records
//    an event on each such stream, and the block becomes reusable only once those events
//    have completed (polled on later allocations; a cache flush synchronizes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ft/core/allocator.h"

namespace ft {
struct PoolBlock;  // ft/core/block_pool.h
}  // namespace ft

namespace ft::trainer::gpu {

using StreamId = uintptr_t;  // a cudaStream_t as an integer (0: the legacy default stream)
using EventId = uintptr_t;   // a backend event handle (never 0)

// What the policy needs from the device. The CUDA implementation wraps cudaMalloc/cudaFree
// and events; the CPU tests use a fake.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A fresh device range of `bytes`, or nullptr when the device has no memory for it.
  virtual void* allocate(size_t bytes) = 0;
  // Returns a range from allocate(). The policy synchronizes before releasing.
  virtual void release(void* ptr, size_t bytes) = 0;
  // Waits for all work queued on the device.
  virtual void synchronize() = 0;
  // An event that completes when the work queued on `stream` so far has completed.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool event_done(EventId event) = 0;
  // Makes later work on `stream` wait (on the device) for `event`.
  virtual void stream_wait(StreamId stream, EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
  // e.g. "cudaMalloc on device 0 (NVIDIA H200): 12.0 GiB free of 139.8 GiB", for OOM reports.
  virtual std::string describe() = 0;
};

struct DeviceAllocatorOptions {
  size_t memory_limit = 0;        // budget on reserved bytes; 0 = the device's memory
  bool caching = true;            // false: a block whose segment becomes free is released at once
  size_t round_to = 512;          // request rounding (and alignment), a power of two >= 256
  size_t min_segment = 2u << 20;  // smallest segment mapped for small (< 1 MiB) requests
};

class DeviceCachingAllocator {
 public:
  explicit DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory,
                                  DeviceAllocatorOptions options = {});
  ~DeviceCachingAllocator();  // synchronizes and releases every segment
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // Device memory aligned to round_to, for work queued on `stream`. Throws
  // ft::OutOfMemoryError (naming `tag`, the request, reserved/allocated bytes and the
  // largest free block) when neither the cache, nor a new segment, nor a new segment after
  // flushing the cache can satisfy it.
  void* allocate(size_t bytes, StreamId stream, const char* tag = "");
  // Stream-ordered free (see the header comment). nullptr is ignored.
  void deallocate(void* ptr);
  // `ptr` (live) is also used by work queued on `stream`.
  void record_stream(void* ptr, StreamId stream);
  // Synchronizes the device and releases every wholly free segment.
  void release_cached();

  AllocatorStats stats() const;
  void reset_peak();
  void set_memory_limit(size_t bytes);
  const DeviceAllocatorOptions& options() const { return options_; }
  DeviceMemory& memory() { return *memory_; }
  // Cross-stream reuses so far (each one an event recorded + a device-side wait).
  uint64_t cross_stream_reuses() const;

 private:
  struct Impl;  // the shared block pool (ft/core/block_pool.h) plus the stream-ordering state
  PoolBlock* take_free_block(size_t size, bool large, StreamId stream);
  void process_pending_locked(bool all_done);
  size_t release_cached_locked();

  std::unique_ptr<DeviceMemory> memory_;
  DeviceAllocatorOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<Impl> impl_;  // after memory_: its pool releases segments through it
};

// The CUDA backend for `device` (trainer/cuda/device_allocator.cu; CUDA builds only).
std::unique_ptr<DeviceMemory> make_cuda_device_memory(int device);

// RAII device buffer of `count` T from a DeviceCachingAllocator.
template <typename T>
class DeviceBuffer : public OwnedArray<T, DeviceCachingAllocator> {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceCachingAllocator& alloc, size_t count, StreamId stream, const char* tag = "")
      : OwnedArray<T, DeviceCachingAllocator>(
            alloc, count, count ? alloc.allocate(count * sizeof(T), stream, tag) : nullptr) {}
  T* data() const { return this->get(); }
  size_t bytes() const { return this->size() * sizeof(T); }
};

}  // namespace ft::trainer::gpu
