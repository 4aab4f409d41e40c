// cupti_parser.cpp: the CUPTI-free half of the activity parser (event building, flow pairing),
// and the "not supported" source used when ft is built without FT_WITH_CUPTI.
#include <fmt/format.h>

#include <unordered_set>

#include "ft/profiler/activity_source.h"
#include "ft/profiler/cupti_source.h"

namespace ft::profiler {

CuptiActivityParser::CuptiActivityParser(ApiNameFn api_name) : api_name_(std::move(api_name)) {}

Category CuptiActivityParser::kernel_category(std::string_view name) {
  return name.find("nccl") != std::string_view::npos ? Category::kComm : Category::kCompute;
}

Category CuptiActivityParser::api_category(std::string_view name, uint8_t* flags) {
  auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (has("Synchronize")) {
    *flags |= kSynchronous;
    return Category::kSync;
  }
  if (has("Memcpy") || has("memcpy")) {
    if (!has("Async")) *flags |= kSynchronous;
    return Category::kHost;  // becomes kH2D / kD2H when its device copy is seen (drain)
  }
  if (has("Malloc") || has("Free") || has("HostAlloc") || has("MemAlloc") ||
      has("HostRegister") || has("HostUnregister")) {
    return Category::kAlloc;
  }
  return Category::kHost;
}

void CuptiActivityParser::add_device_op(const std::string& name, Category c, uint32_t device,
                                        uint32_t stream, uint64_t start, uint64_t end,
                                        uint32_t correlation, uint64_t bytes, uint8_t flags) {
  Event e;
  e.ts_ns = static_cast<int64_t>(start);
  e.dur_ns = end > start ? static_cast<int64_t>(end - start) : 0;
  e.track = Track{device, stream, true};
  e.name = name_id(name);
  e.category = c;
  e.bytes = bytes;
  e.flags = flags;
  e.id = correlation;
  events_.push_back(e);
  tracks_.emplace(e.track, fmt::format("stream {}", stream));
  processes_.emplace(device, fmt::format("GPU {}", device));
  if (correlation != 0) {
    Event f = e;  // the flow arrives where the device work starts
    f.phase = Phase::kFlowEnd;
    f.dur_ns = 0;
    f.name = name_id("ac2g");
    f.category = Category::kOther;
    f.bytes = 0;
    f.flags = 0;
    events_.push_back(f);
  }
}

void CuptiActivityParser::add_api_call(const std::string& name, bool driver, uint32_t pid,
                                       uint32_t tid, uint64_t start, uint64_t end,
                                       uint32_t correlation) {
  Event e;
  e.ts_ns = static_cast<int64_t>(start);
  e.dur_ns = end > start ? static_cast<int64_t>(end - start) : 0;
  e.track = Track{pid, tid, false};
  e.name = name_id(name);
  e.category = api_category(name, &e.flags);
  e.id = correlation;
  api_by_correlation_[correlation].push_back({events_.size(), driver});
  events_.push_back(e);
}

void CuptiActivityParser::add_sync(const std::string& name, uint32_t device, uint32_t stream,
                                   uint64_t start, uint64_t end, uint32_t correlation) {
  Event e;
  e.ts_ns = static_cast<int64_t>(start);
  e.dur_ns = end > start ? static_cast<int64_t>(end - start) : 0;
  // Syncs overlap the stream's kernels, so they get their own track to keep nesting valid.
  const uint32_t s = stream == 0xFFFFFFFFu ? 0x0FFFFFFFu : (stream & 0x0FFFFFFFu);
  e.track = Track{device, kSyncTid | s, true};
  e.name = name_id(name);
  e.category = Category::kSync;
  e.id = correlation;
  events_.push_back(e);
  tracks_.emplace(e.track, stream == 0xFFFFFFFFu ? std::string("sync (context)")
                                                 : fmt::format("sync (stream {})", stream));
  processes_.emplace(device, fmt::format("GPU {}", device));
}

void CuptiActivityParser::add_marker(int kind, uint32_t id, uint64_t ts, uint32_t pid, uint32_t tid,
                                     const char* name, const char* domain) {
  const bool start = kind & 1, finish = kind & 2, instant = kind & 4;
  if ((start || instant) && domain != nullptr && std::string_view(domain) == "ft") {
    return;  // ft's own ranges come from the host tracer
  }
  if (start) {
    open_markers_[id] = OpenMarker{ts, pid, tid, name_id(name ? name : "")};
  } else if (finish) {
    const auto it = open_markers_.find(id);
    if (it == open_markers_.end()) return;  // an "ft" range, or its start was never seen
    Event e;
    e.ts_ns = static_cast<int64_t>(it->second.ts);
    e.dur_ns = ts > it->second.ts ? static_cast<int64_t>(ts - it->second.ts) : 0;
    e.track = Track{it->second.pid, kNvtxTid | (it->second.tid & 0x1FFFFFFFu), false};
    e.name = it->second.name;
    e.category = Category::kOther;
    events_.push_back(e);
    tracks_.emplace(e.track, fmt::format("nvtx (thread {})", it->second.tid));
    open_markers_.erase(it);
  } else if (instant) {
    Event e;
    e.ts_ns = static_cast<int64_t>(ts);
    e.phase = Phase::kInstant;
    e.track = Track{pid, kNvtxTid | (tid & 0x1FFFFFFFu), false};
    e.name = name_id(name ? name : "");
    e.category = Category::kOther;
    events_.push_back(e);
    tracks_.emplace(e.track, fmt::format("nvtx (thread {})", tid));
  }
}

void CuptiActivityParser::drain(Trace* out) {
  // Flow starts: at the runtime call of each correlation id that reached the device (the
  // driver call when the runtime one is absent, e.g. libraries calling the driver directly).
  std::unordered_set<uint64_t> device_ids;
  for (const Event& e : events_) {
    if (e.phase == Phase::kFlowEnd) device_ids.insert(e.id);
  }
  // A memcpy call blocks the host for as long as its copy needs the host: it takes the device
  // copy's category, bytes and pinned/pageable flags, so the partition counts it as PCIe.
  for (const Event& d : events_) {
    if (!d.track.device || d.phase != Phase::kSpan || d.id == 0 ||
        (d.category != Category::kH2D && d.category != Category::kD2H)) {
      continue;
    }
    const auto it = api_by_correlation_.find(static_cast<uint32_t>(d.id));
    if (it == api_by_correlation_.end()) continue;
    for (const ApiCall& c : it->second) {
      Event& a = events_[c.event];
      if (a.category != Category::kHost) continue;  // a sync or allocation call keeps its class
      a.category = d.category;
      a.bytes = d.bytes;
      a.flags |= d.flags & (kPinned | kPageable);
    }
  }
  std::vector<Event> flows;
  for (const auto& [corr, calls] : api_by_correlation_) {
    if (!device_ids.count(corr)) continue;
    const ApiCall* pick = nullptr;
    for (const ApiCall& c : calls) {
      if (pick == nullptr || (pick->driver && !c.driver)) pick = &c;
    }
    Event f = events_[pick->event];
    f.phase = Phase::kFlowStart;
    f.dur_ns = 0;
    f.name = name_id("ac2g");
    f.category = Category::kOther;
    flows.push_back(f);
  }
  std::unordered_set<uint64_t> started;
  for (const Event& f : flows) started.insert(f.id);
  std::unordered_map<uint32_t, uint32_t> marker_map;  // thread_map_ on 29-bit marker ids
  for (const auto& [cupti, os] : thread_map_) marker_map[cupti & 0x1FFFFFFFu] = os;
  for (Event e : events_) {
    if (e.phase == Phase::kFlowEnd && !started.count(e.id)) continue;
    if (!e.track.device) {
      // Markers sit on kNvtxTid | (id & 0x1FFFFFFF); API calls keep CUPTI's full 32-bit id.
      const bool marker = e.id == 0 && (e.track.tid & kNvtxTid);
      const auto& table = marker ? marker_map : thread_map_;
      const auto it = table.find(marker ? (e.track.tid & ~kNvtxTid) : e.track.tid);
      if (it != table.end()) e.track.tid = (marker ? kNvtxTid : 0u) | it->second;
    }
    e.name = out->names.intern(names_.at(e.name));
    out->events.push_back(e);
  }
  for (Event f : flows) {
    const auto it = thread_map_.find(f.track.tid);
    if (it != thread_map_.end()) f.track.tid = it->second;
    f.name = out->names.intern(names_.at(f.name));
    out->events.push_back(f);
  }
  for (const auto& [track, name] : tracks_) out->tracks.emplace(track, name);
  for (const auto& [pid, name] : processes_) out->processes.emplace(pid, name);
  out->dropped_events += dropped_;
  out->metadata["cupti.records"] = std::to_string(parsed_);
  out->metadata["cupti.skipped_records"] = std::to_string(skipped_);
  out->metadata["cupti.dropped_records"] = std::to_string(dropped_);
  events_.clear();
  api_by_correlation_.clear();
  open_markers_.clear();
  dropped_ = 0;
}

#if !FT_WITH_CUPTI
bool CuptiActivityParser::parse(const void*) {
  ++skipped_;
  return false;
}

namespace {
class UnsupportedSource final : public ActivitySource {
 public:
  const char* name() const override { return "cupti"; }
  bool start(std::string* why) noexcept override {
    if (why) *why = "not supported: ft was built without FT_WITH_CUPTI";
    return false;
  }
  void stop() noexcept override {}
  void collect(Trace*) override {}
};
}  // namespace

std::unique_ptr<ActivitySource> make_cupti_source() {
  return std::make_unique<UnsupportedSource>();
}
#endif

}  // namespace ft::profiler
