// h2d.h: batches to the GPU: pinned staging and an async copy stream, or pageable sync copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ft/trainer/loader.h"
#include "ft/trainer/train_config.h"

namespace ft::trainer {

// How batches reach the device (ft-train --h2d).
//  - kPinned (default): the loader fills page-locked (cudaHostAlloc) staging buffers; each batch
//    is copied with cudaMemcpyAsync on a dedicated copy stream into one of two device slots, and
//    the compute stream waits on an event, so the copy of batch k+1 overlaps compute of batch k.
//  - kPageable: plain malloc'd staging buffers; each batch is copied on the compute stream after
//    the host waited for the compute stream to drain, and the host blocks until the copy is done
//    (what cudaMemcpy from pageable memory does). A knob for demonstrating the PCIe diagnosis.
enum class H2DMode : uint8_t { kPinned, kPageable };
const char* h2d_mode_name(H2DMode m);
H2DMode parse_h2d_mode(std::string_view s);  // "pinned" | "pageable"; throws ConfigError

struct H2DOptions {
  H2DMode mode = H2DMode::kPinned;
  int device = 0;            // CUDA device index
  int batch_size = 0;        // B
  int seq_len = 0;           // T: a batch holds inputs and targets, 2*B*T int32
  size_t payload_bytes = 0;  // extra side input copied with every batch (--h2d-payload-mb)
  int slots = 2;             // device buffers (2: double-buffered)
  size_t batch_bytes() const { return size_t{2} * batch_size * seq_len * sizeof(int32_t); }
};

// The uploader options of an ft-train run (--h2d, --h2d-payload-mb, --micro-batch, --seq-len).
H2DOptions h2d_options(const TrainConfig& config, int device);

// A batch on the device. Valid for compute-stream work enqueued before the next upload() call
// (that call may start refilling the slot once the compute stream has passed this point).
struct DeviceBatch {
  const int32_t* inputs = nullptr;   // (B, T) device memory
  const int32_t* targets = nullptr;  // (B, T) device memory
  const void* payload = nullptr;     // (payload_bytes) device memory, or null
  int64_t index = -1;                // loader batch index
  int slot = -1;
};

struct H2DStats {
  int64_t uploads = 0;
  uint64_t bytes = 0;           // host-to-device bytes (batches and payloads)
  int64_t host_blocked_ns = 0;  // time upload() spent blocked on the host
  uint64_t pinned_bytes = 0;    // page-locked host memory held by the uploader itself
  uint64_t device_bytes = 0;    // device slots
};

// Usage (training thread, which owns the CUDA device):
//   auto up = make_batch_uploader(opts, compute_stream);
//   loader_options.staging = up->staging();
//   for each micro-batch: loader.next(batch); DeviceBatch d = up->upload(std::move(batch));
//                         launch kernels reading d.inputs / d.targets on compute_stream;
class BatchUploader {
 public:
  virtual ~BatchUploader() = default;
  // The staging backend to give the loader (LoaderOptions::staging): page-locked buffers in
  // pinned mode, plain host memory in pageable mode.
  virtual std::shared_ptr<data::StagingBackend> staging() = 0;
  // Copies `batch` to the device and makes the compute stream wait for it. Takes the batch: its
  // staging buffer returns to the loader once its copy has finished. Pinned: returns as soon as
  // the copy is enqueued (it blocks only when the slot's previous copy is still in flight).
  // Pageable: returns when the data is on the device. Throws ConfigError for a batch of
  // another shape, ft::Error on a CUDA error.
  virtual DeviceBatch upload(data::Batch&& batch) = 0;
  // The same for an engine that only sees host pointers (inputs and targets, (B, T) each): in
  // pinned mode they are first copied into the uploader's own page-locked buffer of the slot
  // (a host memcpy of 2*B*T int32), so the caller may reuse its memory as soon as this returns.
  virtual DeviceBatch upload_from(const int32_t* inputs, const int32_t* targets,
                                  int64_t index = -1) = 0;
  // Blocks until every enqueued copy has finished and returns all staging buffers.
  virtual void drain() = 0;
  virtual H2DMode mode() const = 0;
  virtual H2DStats stats() const = 0;
};

// Byte i of the side-input payload (a fixed pattern, so tests can check it on the device).
inline unsigned char h2d_payload_byte(size_t i) {
  return static_cast<unsigned char>((i * 131) >> 3);
}

// `compute_stream` is the engine's cudaStream_t (nullptr: the legacy default stream). Names the
// copy and compute streams through NVTX ("ft.h2d.copy", "ft.compute"). Throws ConfigError when
// ft was built without CUDA or there is no device, ft::Error on a CUDA error.
std::unique_ptr<BatchUploader> make_batch_uploader(const H2DOptions& options, void* compute_stream);

}  // namespace ft::trainer
