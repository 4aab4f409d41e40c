// h2d_internal.h: the upload schedule over an abstract stream API (CUDA, or a CPU fake in tests).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ft/trainer/h2d.h"

namespace ft::trainer::h2d {

// An opaque stream or event handle (cudaStream_t / cudaEvent_t in the CUDA implementation).
using Handle = void*;

// The handful of runtime calls the uploader makes; trainer/cuda/h2d_cuda.cu maps them onto the
// CUDA runtime, tests onto a fake that records the dependency graph. Errors throw ft::Error.
class StreamApi {
 public:
  virtual ~StreamApi() = default;
  virtual Handle create_stream(const char* name) = 0;  // non-blocking, NVTX-named
  virtual void destroy_stream(Handle s) noexcept = 0;
  virtual void name_stream(Handle s, const char* name) noexcept = 0;
  virtual Handle create_event() = 0;  // timing disabled
  virtual void destroy_event(Handle e) noexcept = 0;
  virtual void record(Handle event, Handle stream) = 0;
  virtual void wait(Handle stream, Handle event) = 0;  // later work on `stream` waits for `event`
  virtual void copy_h2d(void* dst, const void* src, size_t bytes, Handle stream) = 0;  // async
  virtual void sync_event(Handle event) = 0;
  virtual bool query_event(Handle event) = 0;  // true when complete
  virtual void sync_stream(Handle stream) = 0;
  virtual void* alloc_device(size_t bytes) = 0;
  virtual void free_device(void* p) noexcept = 0;
  // Host memory: page-locked when `pinned`, else plain (64-byte aligned, pre-faulted).
  virtual void* alloc_host(size_t bytes, bool pinned) = 0;
  virtual void free_host(void* p, bool pinned) noexcept = 0;
  virtual void set_device(int device) = 0;  // makes `device` current on the calling thread
};

// A loader staging backend on `api`'s host memory (pinned or plain).
std::shared_ptr<data::StagingBackend> make_api_staging(std::shared_ptr<StreamApi> api, bool pinned);

// The uploader over any StreamApi. Pinned mode, upload of batch j into slot s = j % slots:
//   1. record event freed[(j-1) % slots] on the compute stream: the work enqueued so far, i.e.
//      batch j-1's, ends there (batch j-1 is valid until this call, see DeviceBatch);
//   2. when slot s held batch j-slots: wait on the host for that copy (normally long done) and
//      return its staging buffer; the copy stream waits on freed[s] (batch j-slots's compute);
//   3. copy (and payload) on the copy stream, record copied[s]; the compute stream waits on it.
// Pageable mode: sync the compute stream (a "h2d.wait_compute" sync range), copy on the compute
// stream, sync again, and return the staging buffer at once.
std::unique_ptr<BatchUploader> make_uploader(std::shared_ptr<StreamApi> api,
                                             const H2DOptions& options, Handle compute_stream);

}  // namespace ft::trainer::h2d
