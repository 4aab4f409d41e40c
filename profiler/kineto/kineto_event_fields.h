// kineto_event_fields.h: the fields of one Kineto event the reader maps, and its keys told apart
// by length first. Internal to profiler/kineto (kineto_reader.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ft::profiler::kineto {

// A pid/tid value: a number or a string.
struct IdValue {
  bool present = false;
  bool is_string = false;
  int64_t num = 0;
  std::string_view str;
};

// Fields of one event object that the mapping uses. Its strings view the reader's buffers (the
// streaming reader's own strings, or a parsed chunk's text).
struct RawEvent {
  char ph = 0;
  bool has_ts = false, has_dur = false, has_cat = false, has_flow_id = false;
  int64_t ts_ns = 0, dur_ns = 0;
  uint64_t flow_id = 0;
  std::string_view name, cat;
  IdValue pid, tid;
  // args
  bool stream_numeric = false;
  int64_t stream = -1;
  int64_t correlation = 0;
  int64_t external_id = -1;
  int64_t device = -1;
  bool has_device = false;
  int64_t bytes = -1;
  int64_t mem_bytes = 0;
  bool has_mem = false;
  double total_allocated = 0, total_reserved = 0;
  int64_t in_nelems = -1;
  std::string_view dtype, arg_name, direction;
  double counter_value = 0;
  bool has_counter_value = false;
  double mem_bw = 0;  // "memory bandwidth (GB/s)"
  bool has_mem_bw = false;
  void reset() {
    ph = 0;
    has_ts = has_dur = has_cat = has_flow_id = false;
    ts_ns = dur_ns = 0;
    flow_id = 0;
    name = cat = {};
    pid.present = tid.present = false;
    stream_numeric = false;
    stream = -1;
    correlation = 0;
    external_id = -1;
    device = -1;
    has_device = false;
    bytes = -1;
    mem_bytes = 0;
    has_mem = false;
    total_allocated = total_reserved = 0;
    in_nelems = -1;
    dtype = arg_name = direction = {};
    counter_value = 0;
    has_counter_value = false;
    mem_bw = 0;
    has_mem_bw = false;
  }
};

// Keys of an event object and of its args that the mapping reads, told apart by length first.
enum class EventKey { kPh, kTs, kDur, kName, kCat, kPid, kTid, kId, kArgs, kOther };
enum class ArgKey {
  kStream,
  kCorrelation,
  kExternalId,
  kDevice,
  kBytes,
  kMemBw,
  kMemBytes,
  kTotalAllocated,
  kTotalReserved,
  kInNelems,
  kDtype,
  kName,
  kDirection,
  kOther
};

inline EventKey event_key(std::string_view k) {
  switch (k.size()) {
    case 2:
      return k == "ph"   ? EventKey::kPh
             : k == "ts" ? EventKey::kTs
             : k == "id" ? EventKey::kId
                         : EventKey::kOther;
    case 3:
      return k == "dur"   ? EventKey::kDur
             : k == "cat" ? EventKey::kCat
             : k == "pid" ? EventKey::kPid
             : k == "tid" ? EventKey::kTid
                          : EventKey::kOther;
    case 4:
      return k == "name" ? EventKey::kName : k == "args" ? EventKey::kArgs : EventKey::kOther;
    default:
      return EventKey::kOther;
  }
}

inline ArgKey arg_key(std::string_view k) {
  switch (k.size()) {
    case 4:
      return k == "name" ? ArgKey::kName : ArgKey::kOther;
    case 5:
      return k == "bytes"   ? ArgKey::kBytes
             : k == "Bytes" ? ArgKey::kMemBytes
             : k == "dtype" ? ArgKey::kDtype
                            : ArgKey::kOther;
    case 6:
      return k == "stream" ? ArgKey::kStream : k == "device" ? ArgKey::kDevice : ArgKey::kOther;
    case 9:
      return k == "direction" ? ArgKey::kDirection : ArgKey::kOther;
    case 11:
      return k == "correlation"                           ? ArgKey::kCorrelation
             : (k == "External id" || k == "external id") ? ArgKey::kExternalId
             : k == "In msg size"                         ? ArgKey::kInNelems
                                                          : ArgKey::kOther;
    case 13:
      return k == "In msg nelems" ? ArgKey::kInNelems : ArgKey::kOther;
    case 14:
      return k == "Total Reserved" ? ArgKey::kTotalReserved : ArgKey::kOther;
    case 15:
      return k == "Total Allocated" ? ArgKey::kTotalAllocated : ArgKey::kOther;
    case 23:
      return k == "memory bandwidth (GB/s)" ? ArgKey::kMemBw : ArgKey::kOther;
    default:
      return ArgKey::kOther;
  }
}

}  // namespace ft::profiler::kineto
