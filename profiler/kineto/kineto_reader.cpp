// kineto_reader.cpp: maps Kineto / Chrome-trace JSON events onto ft's Trace while streaming.
#include "ft/profiler/kineto_reader.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>

#define XXH_INLINE_ALL  // inlined: names are short
#include <xxhash.h>

#include "event_chunks.h"
#include "event_object_reader.h"
#include "ft/core/error.h"
#include "ft/profiler/kineto_trace.h"
#include "json_stream.h"
#include "kineto_event_fields.h"
#include "kineto_names.h"

// GCC 12 reports a false -Wrestrict on inlined std::string assignments (GCC PR 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace ft::profiler {
namespace {

using kineto::JsonCursor;
using kineto::JsonNumber;
using kineto::JsonType;

constexpr uint32_t kStringIdBase = 0x80000000u;
constexpr size_t kMaxChunkBytes = 128 << 10;

// XXH3: every event's name is looked up (std::hash's was ~4% of the read).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }
};
using InternMap = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

using kineto::arg_key;
using kineto::ArgKey;
using kineto::event_key;
using kineto::EventKey;
using kineto::IdValue;
using kineto::RawEvent;

class Reader {
 public:
  Reader(JsonCursor* cur, const KinetoReadOptions& opt, std::string label)
      : cur_(cur), opt_(opt), label_(std::move(label)) {}

  KinetoTrace run() {
    trace_.source = "kineto";
    const JsonType t = cur_->peek();
    if (t == JsonType::kArray) {
      bare_array_ = true;
      read_events();
    } else if (t == JsonType::kObject) {
      read_top_object();
    } else if (t == JsonType::kEnd) {
      cur_->fail("empty input: expected a JSON object or array");
    } else {
      cur_->fail("expected a JSON object with traceEvents or an array of events");
    }
    cur_->expect_end();
    trace_.metadata["json_bytes"] = std::to_string(cur_->offset());
    if (!bare_array_ && !saw_events_) cur_->fail("no traceEvents array in the trace");
    finish();
    return std::move(trace_);
  }

 private:
  void read_top_object() {
    cur_->begin_object();
    while (cur_->next_key(&key_)) {
      if (key_ == "traceEvents") {
        if (cur_->peek() != JsonType::kArray) cur_->fail("traceEvents is not an array");
        saw_events_ = true;
        read_events();
      } else if (key_ == "distributedInfo") {
        read_distributed_info();
      } else if (key_ == "schemaVersion" || key_ == "displayTimeUnit" || key_ == "traceName") {
        trace_.metadata[key_] = scalar_text();
      } else {
        cur_->skip_value();
      }
    }
  }

  std::string scalar_text() {
    switch (cur_->peek()) {
      case JsonType::kString: {
        std::string s;
        cur_->read_string(&s);
        return s;
      }
      case JsonType::kNumber: {
        const JsonNumber n = cur_->read_number();
        return n.int_ok ? std::to_string(n.int_value) : std::to_string(n.value);
      }
      default:
        cur_->skip_value();
        return "";
    }
  }

  void read_distributed_info() {
    if (cur_->peek() != JsonType::kObject) {
      cur_->skip_value();
      return;
    }
    cur_->begin_object();
    std::string k;
    while (cur_->next_key(&k)) {
      if (k == "rank" && cur_->peek() == JsonType::kNumber) {
        const JsonNumber n = cur_->read_number();
        if (!n.int_ok || n.int_value < 0 || n.int_value > (1 << 24)) cur_->fail("bad rank");
        trace_.metadata["rank"] = std::to_string(n.int_value);
        trace_.metadata["has_rank"] = "1";
      } else if ((k == "world_size" || k == "backend") &&
                 (cur_->peek() == JsonType::kNumber || cur_->peek() == JsonType::kString)) {
        trace_.metadata["distributed." + k] = scalar_text();
      } else {
        cur_->skip_value();
      }
    }
  }

  void read_events() {
    cur_->begin_array();
    if (opt_.parallel_events) read_events_in_chunks();
    while (cur_->next_element()) {
      if (cur_->peek() != JsonType::kObject) {
        cur_->fail("trace event is not an object");
      }
      events_.read(cur_, &ev_);
      map_event(ev_);
    }
  }

  // The array's events through the chunk pipeline, mapped here in order; the cursor is then
  // replaced by one that reads on from the first byte the pipeline did not consume.
  void read_events_in_chunks() {
    std::string unread;
    const uint64_t offset = cur_->offset();
    std::string open = cur_->open_containers();
    const size_t buffer = cur_->buffer_bytes();
    std::unique_ptr<kineto::ByteSource> src = cur_->release(&unread);
    kineto::EventPipeline pipe(std::move(src), std::move(unread), offset,
                               std::min<size_t>(buffer, kMaxChunkBytes));
    bool any = false;
    while (const kineto::EventChunk* c = pipe.next()) {
      for (const RawEvent& e : c->events) map_event(e);
      any = any || !c->events.empty();
    }
    uint64_t rest_offset = 0;
    std::unique_ptr<kineto::ByteSource> rest = pipe.rest(&rest_offset);
    if (any) open.back() = '0';
    resumed_ =
        std::make_unique<JsonCursor>(std::move(rest), label_, buffer, rest_offset, std::move(open));
    cur_ = resumed_.get();
  }

  // kineto::classify_event, remembered per (name, source, device): names repeat.
  Category classify(kineto::SourceKind kind, uint32_t name_id, std::string_view name, bool device,
                    uint8_t* flags) {
    constexpr size_t kSlots = 32;  // 2 x the sources
    static_assert(static_cast<size_t>(kineto::Source::kOther) < kSlots / 2);
    const size_t slot = static_cast<size_t>(name_id) * kSlots +
                        static_cast<size_t>(kind.source) * 2 + (device ? 1 : 0);
    if (slot >= class_cache_.size()) class_cache_.resize((slot / kSlots + 64) * kSlots, 0);
    uint16_t& c = class_cache_[slot];
    if (c == 0) {
      uint8_t f = 0;
      const Category cat = kineto::classify_event(kind, name, device, &f);
      c = static_cast<uint16_t>(1 + static_cast<unsigned>(cat) + (unsigned{f} << 8));
    }
    *flags |= static_cast<uint8_t>(c >> 8);
    return static_cast<Category>((c & 0xff) - 1);
  }

  uint32_t intern(std::string_view s) {
    const auto it = names_.find(s);
    if (it != names_.end()) return it->second;
    const uint32_t id = trace_.names.intern(s);
    names_.emplace(std::string(s), id);
    return id;
  }

  uint32_t id_of(const IdValue& v, bool is_pid) {
    if (!v.present) return 0;
    if (!v.is_string) return static_cast<uint32_t>(v.num);
    const auto it = string_ids_.find(v.str);
    if (it != string_ids_.end()) return it->second;
    const uint32_t id = kStringIdBase + static_cast<uint32_t>(string_ids_.size());
    string_ids_.emplace(std::string(v.str), id);
    if (is_pid) trace_.processes[id] = std::string(v.str);
    return id;
  }

  void map_metadata(const RawEvent& ev_) {
    const uint32_t pid = id_of(ev_.pid, true);
    if (ev_.name == "process_name" && !ev_.arg_name.empty()) {
      trace_.processes[pid] = std::string(ev_.arg_name);
    } else if (ev_.name == "thread_name" && !ev_.arg_name.empty()) {
      const uint32_t tid = id_of(ev_.tid, false);
      host_thread_names_[(static_cast<uint64_t>(pid) << 32) | tid] = std::string(ev_.arg_name);
    }
  }

  void map_event(const RawEvent& ev_) {
    if (ev_.has_cat && ev_.ph == 'X') note_schema(ev_.cat);
    switch (ev_.ph) {
      case 'X':
        break;
      case 'M':
        map_metadata(ev_);
        return;
      case 'i':
      case 'I':
        if (ev_.name == "[memory]") {
          if (opt_.keep_memory && ev_.has_ts) map_memory(ev_);
          return;
        }
        if (!opt_.keep_instants || !ev_.has_ts) return;
        break;
      case 's':
      case 'f':
      case 't':
        if (opt_.keep_flows && ev_.has_ts && ev_.has_flow_id) map_flow(ev_);
        return;
      case 'C':
        if (ev_.has_ts) map_counter(ev_);
        return;
      default:
        return;  // B/E, async and object events are not used by ft's analyses
    }
    if (!ev_.has_ts) cur_->fail("event without ts");
    if (ev_.has_cat && ev_.cat == "Trace") return;  // the profiler's own span
    // Malformed but readable: counted for the report's warnings (the classifier leaves negative
    // durations out; the records keep them, as HTA does).
    if (ev_.ph == 'X' && ev_.dur_ns < 0) note_malformed("negative_durations", ev_.name);
    if (ev_.ts_ns < 0) note_malformed("negative_timestamps", ev_.name);
    Event e;
    e.ts_ns = ev_.ts_ns;
    e.dur_ns = ev_.ph == 'X' ? ev_.dur_ns : 0;
    e.phase = ev_.ph == 'X' ? Phase::kSpan : Phase::kInstant;
    e.name = intern(ev_.name);
    e.id = ev_.correlation > 0 ? static_cast<uint64_t>(ev_.correlation) : 0;
    e.arg = ev_.external_id;
    const kineto::SourceKind kind = kineto::classify_source(ev_.has_cat ? ev_.cat : "", ev_.name);
    const bool has_stream = ev_.stream_numeric && ev_.stream != -1;
    const bool device = has_stream || kind.device;
    e.track.device = device;
    if (!ev_.has_cat) e.flags |= kNoSourceCategory;
    if (device) {
      e.track.pid = ev_.has_device ? static_cast<uint32_t>(ev_.device) : id_of(ev_.pid, true);
      if (has_stream) {
        e.track.tid = static_cast<uint32_t>(ev_.stream);
      } else {
        e.track.tid = id_of(ev_.tid, false);
        e.flags |= kNoStream;
      }
    } else {
      e.track.pid = id_of(ev_.pid, true);
      e.track.tid = id_of(ev_.tid, false);
    }
    e.category = classify(kind, e.name, ev_.name, device, &e.flags);
    if (ev_.bytes >= 0) {
      e.bytes = static_cast<uint64_t>(ev_.bytes);
    } else if (ev_.in_nelems >= 0) {
      e.bytes = static_cast<uint64_t>(ev_.in_nelems) * kineto::dtype_size(ev_.dtype);
    }
    if (e.category == Category::kH2D || e.category == Category::kD2H) {
      if (ev_.direction == "HOST_TO_DEVICE") e.category = Category::kH2D;
      if (ev_.direction == "DEVICE_TO_HOST") e.category = Category::kD2H;
    }
    // A device span's value is its "memory bandwidth (GB/s)" (HTA's memory_bw_gbps, 0 when
    // absent as in HTA).
    if (device && ev_.has_mem_bw) e.value = ev_.mem_bw;
    if (device) device_tracks_.emplace(e.track, has_stream);
    trace_.append(e);
  }

  void map_memory(const RawEvent& ev_) {
    Event e;
    e.ts_ns = ev_.ts_ns;
    e.phase = Phase::kInstant;
    e.category = Category::kAlloc;
    e.name = intern("[memory]");
    e.track.pid = id_of(ev_.pid, true);
    e.track.tid = id_of(ev_.tid, false);
    e.arg = ev_.mem_bytes;
    e.bytes = ev_.mem_bytes < 0 ? uint64_t{0} - static_cast<uint64_t>(ev_.mem_bytes)
                                : static_cast<uint64_t>(ev_.mem_bytes);
    e.value = ev_.total_allocated;
    trace_.append(e);
    // Total Reserved changes rarely: a counter sample only when it does.
    if (ev_.total_reserved != last_reserved_) {
      last_reserved_ = ev_.total_reserved;
      const Track track = e.track;
      Event r;
      r.ts_ns = ev_.ts_ns;
      r.phase = Phase::kCounter;
      r.category = Category::kCounter;
      r.name = intern("[memory] Total Reserved");
      r.track = track;
      r.value = ev_.total_reserved;
      trace_.append(r);
    }
  }

  void map_flow(const RawEvent& ev_) {
    Event e;
    e.ts_ns = ev_.ts_ns;
    e.phase = ev_.ph == 's' ? Phase::kFlowStart : Phase::kFlowEnd;
    e.category = Category::kOther;
    e.name = intern(ev_.has_cat ? ev_.cat : ev_.name);
    e.id = ev_.flow_id;
    e.track.pid = id_of(ev_.pid, true);
    e.track.tid = id_of(ev_.tid, false);
    trace_.append(e);
  }

  void map_counter(const RawEvent& ev_) {
    Event e;
    e.ts_ns = ev_.ts_ns;
    e.phase = Phase::kCounter;
    e.category = Category::kCounter;
    e.name = intern(ev_.name);
    e.value = ev_.counter_value;
    e.track.pid = id_of(ev_.pid, true);
    e.track.tid = id_of(ev_.tid, false);
    trace_.append(e);
  }

  void note_schema(std::string_view cat) {
    if (cat == "Operator" || cat == "Runtime" || cat == "Kernel" || cat == "Memcpy" ||
        cat == "Memset") {
      saw_2021_ = true;
    } else {
      saw_current_ = true;
    }
  }

  void note_malformed(const char* what, std::string_view name) {
    const std::string key = std::string("input.") + what;
    auto& n = malformed_[key];
    if (n++ == 0) trace_.metadata[key + ".first"] = std::string(name);
  }

  void finish() {
    for (const auto& [key, n] : malformed_) trace_.metadata[key] = std::to_string(n);
    for (const auto& [track, has_stream] : device_tracks_) {
      trace_.tracks[track] = has_stream ? "stream " + std::to_string(track.tid)
                                        : "device " + std::to_string(track.pid) + " annotations";
    }
    for (const auto& [key, name] : host_thread_names_) {
      Track t;
      t.pid = static_cast<uint32_t>(key >> 32);
      t.tid = static_cast<uint32_t>(key);
      trace_.tracks[t] = name;
    }
    if (bare_array_ && !saw_current_ && !saw_2021_) {
      trace_.metadata["source_format"] = "autograd-legacy";
    } else if (saw_2021_ && !saw_current_) {
      trace_.metadata["source_format"] = "kineto-2021";
    } else {
      trace_.metadata["source_format"] = "kineto";
    }
    if (!trace_.metadata.count("has_rank")) {
      trace_.metadata["has_rank"] = "0";
      trace_.metadata["rank"] = "0";
    }
  }

  JsonCursor* cur_;
  std::unique_ptr<JsonCursor> resumed_;  // after the chunk pipeline
  const KinetoReadOptions& opt_;
  std::string label_;
  KinetoTrace trace_;
  RawEvent ev_;
  kineto::EventObjectReader events_;  // the streaming reader's events (ev_'s strings are its)
  std::string key_;
  InternMap names_;
  std::vector<uint16_t> class_cache_;  // classify(): 1 + category | flags << 8, 0 = not yet
  InternMap string_ids_;
  std::map<Track, bool> device_tracks_;
  std::map<uint64_t, std::string> host_thread_names_;
  double last_reserved_ = -1;
  bool bare_array_ = false, saw_events_ = false, saw_2021_ = false, saw_current_ = false;
  std::map<std::string, uint64_t> malformed_;  // "input.<what>" -> count
};

}  // namespace

KinetoTrace read_kineto_records(const std::string& path, const KinetoReadOptions& options) {
  JsonCursor cur(kineto::open_byte_source(path), path, options.buffer_bytes);
  Reader reader(&cur, options, path);
  KinetoTrace t = reader.run();
  t.metadata["path"] = path;
  return t;
}

KinetoTrace read_kineto_records_from_memory(const std::string& data, const std::string& label,
                                            const KinetoReadOptions& options) {
  JsonCursor cur(kineto::memory_byte_source(data), label, options.buffer_bytes);
  Reader reader(&cur, options, label);
  return reader.run();
}

Trace read_kineto_trace(const std::string& path, const KinetoReadOptions& options) {
  return to_trace(read_kineto_records(path, options), options.assign_steps);
}

Trace read_kineto_trace_from_memory(const std::string& data, const std::string& label,
                                    const KinetoReadOptions& options) {
  return to_trace(read_kineto_records_from_memory(data, label, options), options.assign_steps);
}

}  // namespace ft::profiler
