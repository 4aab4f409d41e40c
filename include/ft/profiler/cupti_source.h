// cupti_source.h: CUPTI activity records -> ft events (parsing kept apart from CUPTI calls).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::profiler {

// Turns CUPTI activity records into ft events. parse() takes a `const CUpti_Activity*` (typed
// void* so that no CUDA header leaks into ft's headers) of kind CONCURRENT_KERNEL / KERNEL,
// MEMCPY, MEMSET, SYNCHRONIZATION, RUNTIME, DRIVER or MARKER, as the real source receives them
// from cuptiActivityGetNextRecord and as tests build them. Not thread-safe; the source locks.
//
// Tracks: device d, stream s -> Track{d, s, device}; syncs -> Track{d, kSyncTid | s, device};
// runtime/driver calls -> the calling host thread; NVTX markers of other domains than "ft"
// (ft's own are recorded by the host tracer) -> Track{pid, kNvtxTid | tid}. Runtime calls
// start flows ("ac2g", id = correlation id) that end at the kernel / copy / memset.
//
// Categories of live records: NCCL kernels are kComm (the device split counts them as
// communication, not busy compute); API calls are classified by name (api_category), and a
// memcpy call takes its device copy's category, bytes and pinned/pageable flags (matched by
// correlation id), so the host time it blocks counts as PCIe.
class CuptiActivityParser {
 public:
  static constexpr uint32_t kSyncTid = 1u << 30;
  static constexpr uint32_t kNvtxTid = 1u << 29;
  // Name of a runtime (driver == false) or driver API callback id.
  using ApiNameFn = std::function<std::string(bool driver, uint32_t cbid)>;

  explicit CuptiActivityParser(ApiNameFn api_name = {});
  // kComm for NCCL kernels ("nccl" in the name), else kCompute.
  static Category kernel_category(std::string_view name);
  // Runtime/driver API call by name: *Synchronize -> kSync (flag kSynchronous); allocation and
  // release (Malloc, Free, HostAlloc, MemAlloc, HostRegister) -> kAlloc; everything else
  // (launches, queries, stream/event calls, memcpys before linking) -> kHost. A memcpy without
  // "Async" in its name gets kSynchronous.
  static Category api_category(std::string_view name, uint8_t* flags);
  // Returns false for a kind ft does not handle (counted in skipped()), or without CUPTI.
  bool parse(const void* record);
  // Records CUPTI reported as dropped (cuptiActivityGetNumDroppedRecords).
  void add_dropped(uint64_t n) { dropped_ += n; }
  // CUPTI's thread ids (pthread_t based) -> OS thread ids, for host tracks.
  void map_thread(uint32_t cupti_tid, uint32_t os_tid) { thread_map_[cupti_tid] = os_tid; }

  uint64_t parsed() const { return parsed_; }
  uint64_t skipped() const { return skipped_; }
  uint64_t dropped() const { return dropped_; }
  // Moves the parsed events into `out` (names re-interned, flows paired, unmatched marker
  // starts discarded) and adds dropped() to out->dropped_events. The parser is then empty.
  void drain(Trace* out);

  // CUPTI-free builders used by parse(); public so the builders are testable on any build.
  void add_device_op(const std::string& name, Category c, uint32_t device, uint32_t stream,
                     uint64_t start, uint64_t end, uint32_t correlation, uint64_t bytes,
                     uint8_t flags);
  void add_api_call(const std::string& name, bool driver, uint32_t pid, uint32_t tid,
                    uint64_t start, uint64_t end, uint32_t correlation);
  void add_sync(const std::string& name, uint32_t device, uint32_t stream, uint64_t start,
                uint64_t end, uint32_t correlation);
  // flags: 1 start, 2 end, 4 instant (CUPTI_ACTIVITY_FLAG_MARKER_*); names only on start.
  void add_marker(int kind, uint32_t id, uint64_t ts, uint32_t pid, uint32_t tid, const char* name,
                  const char* domain);

 private:
  struct ApiCall {
    size_t event;  // index into events_
    bool driver;
  };
  struct OpenMarker {
    uint64_t ts;
    uint32_t pid, tid;
    uint32_t name;
  };
  uint32_t name_id(const std::string& s) { return names_.intern(s); }

  ApiNameFn api_name_;
  StringTable names_;
  std::vector<Event> events_;
  std::map<Track, std::string> tracks_;
  std::map<uint32_t, std::string> processes_;
  std::unordered_map<uint32_t, std::vector<ApiCall>> api_by_correlation_;
  std::unordered_map<uint32_t, OpenMarker> open_markers_;
  std::unordered_map<uint32_t, uint32_t> thread_map_;
  uint64_t parsed_ = 0, skipped_ = 0, dropped_ = 0;
};

}  // namespace ft::profiler
