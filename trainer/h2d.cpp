// h2d.cpp: the batch uploader's schedule (slots, events, streams) over StreamApi, and its modes.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "h2d_internal.h"

namespace ft::trainer {

const char* h2d_mode_name(H2DMode m) { return m == H2DMode::kPageable ? "pageable" : "pinned"; }

H2DMode parse_h2d_mode(std::string_view s) {
  if (s == "pinned") return H2DMode::kPinned;
  if (s == "pageable") return H2DMode::kPageable;
  throw ConfigError(fmt::format("unknown --h2d '{}' (expected pinned or pageable)", s));
}

H2DOptions h2d_options(const TrainConfig& config, int device) {
  H2DOptions o;
  o.mode = parse_h2d_mode(config.h2d);
  o.device = device;
  o.batch_size = config.micro_batch;
  o.seq_len = config.seq_len;
  o.payload_bytes = static_cast<size_t>(config.h2d_payload_mb) << 20;
  return o;
}

namespace h2d {
namespace {

using Clock = std::chrono::steady_clock;

class ApiStaging final : public data::StagingBackend {
 public:
  ApiStaging(std::shared_ptr<StreamApi> api, bool pinned) : api_(std::move(api)), pinned_(pinned) {}
  void* allocate(size_t bytes) override { return api_->alloc_host(bytes, pinned_); }
  void deallocate(void* p, size_t) noexcept override { api_->free_host(p, pinned_); }
  std::string name() const override { return pinned_ ? "pinned" : "pageable"; }

 private:
  std::shared_ptr<StreamApi> api_;
  bool pinned_;
};

class Uploader final : public BatchUploader {
 public:
  Uploader(std::shared_ptr<StreamApi> api, const H2DOptions& o, Handle compute)
      : api_(std::move(api)), o_(o), compute_(compute) {
    if (o_.batch_size <= 0 || o_.seq_len <= 0) {
      throw ConfigError(fmt::format("h2d: batch size and sequence length must be > 0 (B={}, T={})",
                                    o_.batch_size, o_.seq_len));
    }
    if (o_.slots < 1 || o_.slots > 8) {
      throw ConfigError(fmt::format("h2d: slots {} must be in [1, 8]", o_.slots));
    }
    if (o_.mode == H2DMode::kPinned && o_.slots < 2) {
      throw ConfigError("h2d: pinned mode needs at least 2 slots to overlap copy and compute");
    }
    pinned_ = o_.mode == H2DMode::kPinned;
    staging_ = make_api_staging(api_, pinned_);
    // The payload's device copy starts 256-byte aligned after the tokens.
    payload_offset_ = (o_.batch_bytes() + 255) / 256 * 256;
    slot_bytes_ = payload_offset_ + o_.payload_bytes;
    try {
      api_->set_device(o_.device);
      api_->name_stream(compute_, "ft.compute");
      if (pinned_) copy_ = api_->create_stream("ft.h2d.copy");
      slots_.resize(static_cast<size_t>(o_.slots));
      for (Slot& s : slots_) {
        s.dev = api_->alloc_device(slot_bytes_);
        s.copied = api_->create_event();
        s.freed = api_->create_event();
      }
      if (o_.payload_bytes > 0) {
        payload_host_ = api_->alloc_host(o_.payload_bytes, pinned_);
        // A fixed pattern: real bytes to move (tests check them on the device).
        auto* p = static_cast<unsigned char*>(payload_host_);
        for (size_t i = 0; i < o_.payload_bytes; ++i) p[i] = h2d_payload_byte(i);
      }
    } catch (...) {
      release_resources();
      throw;
    }
  }

  ~Uploader() override {
    try {
      drain();
    } catch (...) {  // a CUDA error at teardown: nothing left to do but free what we can
    }
    release_resources();
  }

  std::shared_ptr<data::StagingBackend> staging() override { return staging_; }
  H2DMode mode() const override { return o_.mode; }
  H2DStats stats() const override {
    H2DStats s = stats_;
    s.pinned_bytes = 0;
    if (pinned_) {
      s.pinned_bytes = o_.payload_bytes;
      for (const Slot& sl : slots_) s.pinned_bytes += sl.own ? o_.batch_bytes() : 0;
    }
    s.device_bytes = slot_bytes_ * slots_.size();
    return s;
  }

  DeviceBatch upload(data::Batch&& batch) override {
    const auto t0 = Clock::now();
    FT_RANGE("h2d.upload", RangeKind::kH2D, batch.timing.index);
    if (batch.empty()) throw ConfigError("h2d: upload of an empty batch");
    if (batch.targets() != batch.inputs() + bt()) {
      throw ConfigError(fmt::format(
          "h2d: the batch's shape differs from the uploader's B={} T={} (loader options?)",
          o_.batch_size, o_.seq_len));
    }
    const int64_t index = batch.timing.index;
    const int32_t* src = batch.inputs();
    return finish(t0, copy(src, nullptr, index, &batch));
  }

  DeviceBatch upload_from(const int32_t* inputs, const int32_t* targets, int64_t index) override {
    const auto t0 = Clock::now();
    FT_RANGE("h2d.upload", RangeKind::kH2D, index);
    if (inputs == nullptr || targets == nullptr) throw ConfigError("h2d: upload of a null batch");
    return finish(t0, copy(inputs, targets, index, nullptr));
  }

  void drain() override {
    if (copy_) api_->sync_stream(copy_);
    for (Slot& s : slots_) s.host = data::Batch();
  }

 private:
  struct Slot {
    void* dev = nullptr;      // tokens, then the payload at payload_offset_
    void* own = nullptr;      // upload_from's page-locked copy of the tokens (pinned mode)
    Handle copied = nullptr;  // copy stream: this slot's copy is done
    Handle freed = nullptr;   // compute stream: the work reading this slot's batch is done
    bool copy_recorded = false, freed_recorded = false;
    data::Batch host;  // upload()'s staging buffer, held until its copy is done
  };

  size_t bt() const { return static_cast<size_t>(o_.batch_size) * o_.seq_len; }

  DeviceBatch finish(Clock::time_point t0, DeviceBatch out) {
    ++stats_.uploads;
    stats_.bytes += o_.batch_bytes() + o_.payload_bytes;
    stats_.host_blocked_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return out;
  }

  // Tokens from `inputs` (with targets right after them when `targets` is null, as in a loader
  // batch). `batch`, when given, is taken and held until its copy is done.
  DeviceBatch copy(const int32_t* inputs, const int32_t* targets, int64_t index,
                   data::Batch* batch) {
    api_->set_device(o_.device);
    const int64_t j = next_++;
    const size_t s = static_cast<size_t>(j % static_cast<int64_t>(slots_.size()));
    Slot& slot = slots_[s];
    auto* dev = static_cast<unsigned char*>(slot.dev);
    DeviceBatch out;
    out.inputs = reinterpret_cast<const int32_t*>(dev);
    out.targets = out.inputs + bt();
    out.payload = o_.payload_bytes ? dev + payload_offset_ : nullptr;
    out.index = index;
    out.slot = static_cast<int>(s);
    if (pinned_) {
      copy_pinned(j, slot, inputs, targets, batch);
    } else {
      copy_pageable(slot, inputs, targets);
      if (batch) *batch = data::Batch();  // on the device: the buffer goes back to the loader
    }
    return out;
  }

  void copy_pinned(int64_t j, Slot& slot, const int32_t* inputs, const int32_t* targets,
                   data::Batch* batch) {
    const size_t n = slots_.size();
    // 1. Batch j-1's work is everything enqueued on the compute stream before this call.
    if (j >= 1) {
      Slot& prev = slots_[static_cast<size_t>((j - 1) % static_cast<int64_t>(n))];
      api_->record(prev.freed, compute_);
      prev.freed_recorded = true;
    }
    // Staging buffers whose copies have finished go back to the loader early.
    for (Slot& s : slots_) {
      if (!s.host.empty() && &s != &slot && api_->query_event(s.copied)) s.host = data::Batch();
    }
    // 2. The slot's previous copy must be done before its host buffer is reused (returned to
    // the loader, or overwritten below), and its compute before the slot is overwritten (the
    // copy stream waits for that).
    if (slot.copy_recorded && (!slot.host.empty() || targets != nullptr)) {
      FT_RANGE("h2d.wait_slot", RangeKind::kSync);
      api_->sync_event(slot.copied);
      slot.host = data::Batch();
    }
    if (slot.freed_recorded) api_->wait(copy_, slot.freed);
    // 3. The copy, and the compute stream's wait for it.
    const void* src = inputs;
    if (targets != nullptr) {  // upload_from: through the slot's own page-locked buffer
      if (slot.own == nullptr) slot.own = api_->alloc_host(o_.batch_bytes(), true);
      auto* own = static_cast<int32_t*>(slot.own);
      std::memcpy(own, inputs, bt() * sizeof(int32_t));
      std::memcpy(own + bt(), targets, bt() * sizeof(int32_t));
      src = own;
    }
    api_->copy_h2d(slot.dev, src, o_.batch_bytes(), copy_);
    if (o_.payload_bytes) {
      api_->copy_h2d(static_cast<unsigned char*>(slot.dev) + payload_offset_, payload_host_,
                     o_.payload_bytes, copy_);
    }
    api_->record(slot.copied, copy_);
    slot.copy_recorded = true;
    api_->wait(compute_, slot.copied);
    if (batch) slot.host = std::move(*batch);
  }

  void copy_pageable(Slot& slot, const int32_t* inputs, const int32_t* targets) {
    {
      // Waiting for earlier compute is synchronisation, not PCIe time.
      FT_RANGE("h2d.wait_compute", RangeKind::kSync);
      api_->sync_stream(compute_);
    }
    auto* dev = static_cast<unsigned char*>(slot.dev);
    if (targets == nullptr) {
      api_->copy_h2d(dev, inputs, o_.batch_bytes(), compute_);
    } else {
      api_->copy_h2d(dev, inputs, bt() * sizeof(int32_t), compute_);
      api_->copy_h2d(dev + bt() * sizeof(int32_t), targets, bt() * sizeof(int32_t), compute_);
    }
    if (o_.payload_bytes) {
      api_->copy_h2d(dev + payload_offset_, payload_host_, o_.payload_bytes, compute_);
    }
    api_->sync_stream(compute_);
  }

  void release_resources() noexcept {
    for (Slot& s : slots_) {
      s.host = data::Batch();
      if (s.own) api_->free_host(s.own, true);
      if (s.dev) api_->free_device(s.dev);
      if (s.copied) api_->destroy_event(s.copied);
      if (s.freed) api_->destroy_event(s.freed);
      s = Slot();
    }
    slots_.clear();
    if (payload_host_) api_->free_host(payload_host_, pinned_);
    payload_host_ = nullptr;
    if (copy_) api_->destroy_stream(copy_);
    copy_ = nullptr;
  }

  std::shared_ptr<StreamApi> api_;
  H2DOptions o_;
  Handle compute_;
  Handle copy_ = nullptr;
  bool pinned_ = true;
  std::shared_ptr<data::StagingBackend> staging_;
  size_t payload_offset_ = 0, slot_bytes_ = 0;
  void* payload_host_ = nullptr;
  std::vector<Slot> slots_;
  int64_t next_ = 0;
  H2DStats stats_;
};

}  // namespace

std::shared_ptr<data::StagingBackend> make_api_staging(std::shared_ptr<StreamApi> api,
                                                       bool pinned) {
  return std::make_shared<ApiStaging>(std::move(api), pinned);
}

std::unique_ptr<BatchUploader> make_uploader(std::shared_ptr<StreamApi> api,
                                             const H2DOptions& options, Handle compute_stream) {
  if (!api) throw ConfigError("h2d: no stream API");
  return std::make_unique<Uploader>(std::move(api), options, compute_stream);
}

}  // namespace h2d

#if !FT_WITH_CUDA
std::unique_ptr<BatchUploader> make_batch_uploader(const H2DOptions&, void*) {
  throw ConfigError("--device cuda: ft was built without FT_WITH_CUDA (no host-to-device path)");
}
#endif

}  // namespace ft::trainer
