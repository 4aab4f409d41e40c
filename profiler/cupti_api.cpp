// cupti_api.cpp: the only file that includes cupti.h: record decoding and the CUPTI source.
#if FT_WITH_CUPTI
#include <cupti.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "ft/profiler/activity_source.h"
#include "ft/profiler/cupti_source.h"
#include "ft/profiler/recorder.h"
#include "ft/core/device_query.h"

namespace ft::profiler {
namespace {

uint8_t host_memory_flags(uint8_t kind) {
  if (kind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED) return kPinned;
  if (kind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE) return kPageable;
  return 0;
}

const char* memory_kind_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return "Pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return "Pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
      return "Device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
      return "Array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
      return "Managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
      return "Device Static";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return "Managed Static";
    default:
      return "Unknown";
  }
}

const char* sync_name(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    default:
      return "Synchronize";
  }
}

}  // namespace

bool CuptiActivityParser::parse(const void* raw) {
  const auto* record = static_cast<const CUpti_Activity*>(raw);
  if (record == nullptr) {
    ++skipped_;
    return false;
  }
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      const char* name = k->name ? k->name : "kernel";
      add_device_op(name, kernel_category(name), k->deviceId, k->streamId, k->start, k->end,
                    k->correlationId, 0, 0);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      Category c = Category::kD2D;
      const char* dir = "DtoD";
      uint8_t flags = 0;
      switch (m->copyKind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
          c = Category::kH2D, dir = "HtoD", flags = host_memory_flags(m->srcKind);
          break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
          c = Category::kD2H, dir = "DtoH", flags = host_memory_flags(m->dstKind);
          break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
          dir = "HtoH";
          break;
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
          dir = "PtoP";
          break;
        default:
          break;
      }
      if (!(m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC)) flags |= kSynchronous;
      add_device_op(fmt::format("Memcpy {} ({} -> {})", dir, memory_kind_name(m->srcKind),
                                memory_kind_name(m->dstKind)),
                    c, m->deviceId, m->streamId, m->start, m->end, m->correlationId, m->bytes,
                    flags);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      const uint8_t flags = (m->flags & CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC) ? 0 : kSynchronous;
      add_device_op(
          fmt::format("Memset ({})", memory_kind_name(static_cast<uint8_t>(m->memoryKind))),
          Category::kMemset, m->deviceId, m->streamId, m->start, m->end, m->correlationId, m->bytes,
          flags);
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
      add_sync(sync_name(s->type), 0, s->streamId, s->start, s->end, s->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
      std::string name = api_name_ ? api_name_(driver, a->cbid) : std::string();
      if (name.empty())
        name = fmt::format("{}#{}", driver ? "cuda_driver" : "cuda_runtime", a->cbid);
      add_api_call(name, driver, a->processId, a->threadId, a->start, a->end, a->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
      int kind = 0;
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) kind |= 1;
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) kind |= 2;
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) kind |= 4;
      uint32_t pid = 0, tid = 0;
      if (m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ||
          m->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS) {
        pid = m->objectId.pt.processId;
        tid = m->objectId.pt.threadId;
      }
      add_marker(kind, m->id, m->timestamp, pid, tid, m->name, m->domain);
      break;
    }
    default:
      ++skipped_;
      return false;
  }
  ++parsed_;
  return true;
}

namespace {

constexpr size_t kBufferBytes = size_t{4} << 20;  // CUPTI suggests 1-10 MB
constexpr size_t kMaxBuffers = 64;                // at most 256 MiB outstanding
constexpr size_t kAlign = ACTIVITY_RECORD_ALIGNMENT;

uint64_t CUPTIAPI ft_timestamp() { return static_cast<uint64_t>(now_ns()); }

class CuptiSource;
std::atomic<CuptiSource*> g_source{nullptr};

std::string api_callback_name(bool driver, uint32_t cbid) {
  const char* name = nullptr;
  const auto domain = driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
  if (cuptiGetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && name) return name;
  return {};
}

class CuptiSource final : public ActivitySource {
 public:
  CuptiSource() : parser_(api_callback_name) {}
  ~CuptiSource() override { stop(); }
  const char* name() const override { return "cupti"; }

  bool start(std::string* why) noexcept override {
    try {
      std::string reason;
      if (ft::cuda_devices(&reason).empty()) {
        if (why)
          *why = "not available: " + (reason.empty() ? std::string("no CUDA device") : reason);
        return false;
      }
      CuptiSource* expected = nullptr;
      if (!g_source.compare_exchange_strong(expected, this)) {
        if (why) *why = "not available: another CUPTI session is running";
        return false;
      }
      if (!check(cuptiActivityRegisterTimestampCallback(ft_timestamp), "register timestamp", why) ||
          !check(cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed),
                 "register buffer callbacks", why)) {
        g_source.store(nullptr);
        return false;
      }
      parser_.map_thread(static_cast<uint32_t>(pthread_self()),
                         static_cast<uint32_t>(syscall(SYS_gettid)));
      if (!check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels",
                 why)) {
        g_source.store(nullptr);
        return false;
      }
      enabled_.push_back(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                   CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_RUNTIME,
                                   CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MARKER}) {
        if (cuptiActivityEnable(k) == CUPTI_SUCCESS) {
          enabled_.push_back(k);
        } else {
          missing_.push_back(static_cast<int>(k));  // degrade: record the other kinds
        }
      }
      running_ = true;
      return true;
    } catch (const std::exception& e) {
      if (why) *why = std::string("not available: ") + e.what();
      g_source.store(nullptr);
      return false;
    }
  }

  void stop() noexcept override {
    if (!running_) return;
    running_ = false;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (CUpti_ActivityKind k : enabled_) cuptiActivityDisable(k);
    enabled_.clear();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    CuptiSource* self = this;
    g_source.compare_exchange_strong(self, nullptr);
  }

  void collect(Trace* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    parser_.drain(out);
    if (!missing_.empty()) {
      std::string kinds;
      for (int k : missing_) {
        if (!kinds.empty()) kinds.push_back(',');
        kinds.append(std::to_string(k));
      }
      out->metadata["cupti.kinds_not_enabled"] = kinds;
    }
  }

 private:
  static bool check(CUptiResult r, const char* what, std::string* why) {
    if (r == CUPTI_SUCCESS) return true;
    const char* msg = nullptr;
    cuptiGetResultString(r, &msg);
    if (why) *why = fmt::format("not available: {}: {}", what, msg ? msg : "CUPTI error");
    return false;
  }

  static void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *max_records = 0;
    CuptiSource* s = g_source.load();
    if (s == nullptr || s->outstanding_.load() >= kMaxBuffers) {
      *buffer = nullptr;  // CUPTI drops records and counts them
      *size = 0;
      return;
    }
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    if (*buffer) s->outstanding_.fetch_add(1);
  }

  static void CUPTIAPI on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                                           size_t valid) {
    CuptiSource* s = g_source.load();
    if (s != nullptr && buffer != nullptr) {
      std::lock_guard<std::mutex> lock(s->mu_);
      CUpti_Activity* record = nullptr;
      // A callback from CUPTI's thread: nothing may escape it (an exception would terminate the
      // job). Records that cannot be parsed (out of memory) are counted as dropped.
      uint64_t lost = 0;
      while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        try {
          s->parser_.parse(record);
        } catch (...) {
          ++lost;
        }
      }
      s->parser_.add_dropped(lost);
      size_t dropped = 0;
      if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) {
        s->parser_.add_dropped(dropped);
      }
    }
    if (buffer != nullptr) {
      std::free(buffer);
      if (s != nullptr) s->outstanding_.fetch_sub(1);
    }
  }

  std::mutex mu_;
  CuptiActivityParser parser_;
  std::vector<CUpti_ActivityKind> enabled_;
  std::vector<int> missing_;
  std::atomic<size_t> outstanding_{0};
  bool running_ = false;
};

}  // namespace

std::unique_ptr<ActivitySource> make_cupti_source() { return std::make_unique<CuptiSource>(); }

}  // namespace ft::profiler
#endif  // FT_WITH_CUPTI
