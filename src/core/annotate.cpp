// annotate.cpp: range dispatch to the installed sink and, when built with it, NVTX3.
#include "ft/core/annotate.h"

#include <atomic>

#if FT_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace ft {
namespace {
std::atomic<RangeSink*> g_sink{nullptr};
std::atomic<bool> g_nvtx{false};
#if FT_WITH_NVTX
nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA("ft");
  return domain;
}
#endif
void refresh_active() {
  detail::g_ranges_active = g_sink.load() != nullptr || g_nvtx.load();
}
}  // namespace

namespace detail {
bool g_ranges_active = false;

void range_begin_slow(const char* name, RangeKind kind, int64_t arg) noexcept {
  if (RangeSink* s = g_sink.load(std::memory_order_acquire)) s->begin(name, kind, arg);
#if FT_WITH_NVTX
  if (g_nvtx.load(std::memory_order_relaxed)) {
    nvtxEventAttributes_t attr = {};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = name;
    attr.category = static_cast<uint32_t>(kind);
    if (arg >= 0) {
      attr.payloadType = NVTX_PAYLOAD_TYPE_INT64;
      attr.payload.llValue = arg;
    }
    nvtxDomainRangePushEx(nvtx_domain(), &attr);
  }
#endif
}

void range_end_slow(const char* name, RangeKind kind) noexcept {
#if FT_WITH_NVTX
  if (g_nvtx.load(std::memory_order_relaxed)) nvtxDomainRangePop(nvtx_domain());
#endif
  if (RangeSink* s = g_sink.load(std::memory_order_acquire)) s->end(name, kind);
}
void instant_slow(const char* name, RangeKind kind, int64_t arg) noexcept {
#if FT_WITH_NVTX
  if (g_nvtx.load(std::memory_order_relaxed)) {
    nvtxEventAttributes_t attr = {};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = name;
    attr.category = static_cast<uint32_t>(kind);
    if (arg >= 0) {
      attr.payloadType = NVTX_PAYLOAD_TYPE_INT64;
      attr.payload.llValue = arg;
    }
    nvtxDomainMarkEx(nvtx_domain(), &attr);
  }
#endif
  if (RangeSink* s = g_sink.load(std::memory_order_acquire)) s->instant(name, kind, arg);
}
}  // namespace detail

void set_range_sink(RangeSink* sink) noexcept {
  g_sink.store(sink, std::memory_order_release);
  refresh_active();
}
RangeSink* range_sink() noexcept { return g_sink.load(std::memory_order_acquire); }

void set_nvtx_enabled(bool on) noexcept {
#if FT_WITH_NVTX
  g_nvtx.store(on);
#else
  (void)on;
#endif
  refresh_active();
}
bool nvtx_enabled() noexcept { return g_nvtx.load(); }

}  // namespace ft
