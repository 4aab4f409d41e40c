// kineto_trace.h: compact in-memory form of one imported Kineto trace file (32 bytes per event).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ft/profiler/event.h"

namespace ft::profiler {

// One imported event in 32 bytes (Event is 80): full ts, then the fields this event uses in
// 32-bit form. Events whose values do not fit (durations past 4.29 s, ids past 2^32, ...) are
// kept whole in a side table, so decoding is always exact.
struct KinetoRecord {
  int64_t ts_ns = 0;
  uint32_t name_layout = 0;  // name << 2 | layout
  uint16_t track = 0;        // index into the trace's track table
  uint8_t kind = 0;          // phase << 4 | category
  uint8_t flags = 0;         // EventFlags
  uint32_t w[4] = {0, 0, 0, 0};
};
static_assert(sizeof(KinetoRecord) == 32, "KinetoRecord must stay 32 bytes");

// A Kineto trace file as read (read_kineto_records): events in file order, held in 1 MiB blocks
// of records that are mapped and unmapped directly (release_until gives them back to the system
// as a consumer walks past them, so converting never holds two full copies). Event::step is not
// stored: to_trace and prepare_kineto_trace derive it (ProfilerStep#N spans, see kineto_reader.h).
class KinetoTrace {
 public:
  KinetoTrace() = default;
  KinetoTrace(KinetoTrace&& o) noexcept;
  KinetoTrace& operator=(KinetoTrace&& o) noexcept;
  KinetoTrace(const KinetoTrace&) = delete;
  KinetoTrace& operator=(const KinetoTrace&) = delete;
  ~KinetoTrace();

  size_t size() const { return size_; }
  // Appends `e` (its step is ignored). Throws FormatError past 65536 distinct tracks.
  void append(const Event& e);
  // Event i, exactly as appended, with step = -1. Requires i >= released(). Inline: the
  // preparation decodes every record several times.
  Event event(size_t i) const {
    const KinetoRecord& r = record(i);
    const uint32_t layout = r.name_layout & 3;
    if (layout == kWideLayout) return wide_[r.w[0]];
    Event e;
    e.ts_ns = r.ts_ns;
    e.name = r.name_layout >> 2;
    e.track = track_keys_[r.track];
    e.phase = static_cast<Phase>(r.kind >> 4);
    e.category = static_cast<Category>(r.kind & 15);
    e.flags = r.flags;
    if (layout == kSpanLayout) {
      e.dur_ns = r.w[0];
      e.id = r.w[1];
      e.arg = static_cast<int32_t>(r.w[2]);
      e.bytes = r.w[3];
    } else {
      const uint64_t bits = (static_cast<uint64_t>(r.w[1]) << 32) | r.w[0];
      std::memcpy(&e.value, &bits, sizeof e.value);
      e.arg = static_cast<int64_t>((static_cast<uint64_t>(r.w[3]) << 32) | r.w[2]);
      e.bytes = layout == kSampleAbsLayout ? magnitude(e.arg) : 0;
    }
    return e;
  }
  const KinetoRecord& record(size_t i) const { return blocks_[i >> kBlockShift][i & kBlockMask]; }
  uint32_t name_of(size_t i) const { return record(i).name_layout >> 2; }
  const Track& track_of(size_t i) const { return track_keys_[record(i).track]; }

  // Frees the blocks that hold only events before `i` (events [0, i) may no longer be read).
  void release_until(size_t i);
  void release_all() { release_until(size_); }
  // Frees block b alone (its events may no longer be read): threads that convert parts of the
  // trace, each of whole blocks, free their own blocks as they go.
  void release_block(size_t b);
  size_t released() const { return released_blocks_ << kBlockShift; }
  size_t resident_bytes() const;  // record blocks and side table currently held

  StringTable names;
  std::map<Track, std::string> tracks;        // as Trace::tracks
  std::map<uint32_t, std::string> processes;  // as Trace::processes
  std::string source;
  std::map<std::string, std::string> metadata;  // as Trace::metadata (see kineto_reader.h)

  static constexpr size_t kBlockShift = 15;  // 32768 records = 1 MiB per block
  static constexpr size_t kBlockRecords = size_t{1} << kBlockShift;
  static constexpr size_t kBlockMask = kBlockRecords - 1;

 private:
  // How a record's four 32-bit words are used.
  enum Layout : uint32_t {
    kSpanLayout = 0,       // dur, id, arg (int32), bytes; value 0
    kSampleAbsLayout = 1,  // value (double), arg (int64); bytes = |arg|; dur 0, id 0
    kSampleLayout = 2,     // value (double), arg (int64); bytes 0; dur 0, id 0
    kWideLayout = 3,       // w[0] indexes the side table of whole events
  };
  static uint64_t magnitude(int64_t v) {
    return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  }
  uint16_t track_index(const Track& t);
  void free_blocks();

  std::vector<KinetoRecord*> blocks_;  // mmap'd, kBlockRecords each; null once released
  size_t size_ = 0;
  size_t released_blocks_ = 0;
  std::vector<Event> wide_;  // events that do not fit a record (layout kWide)
  std::vector<Track> track_keys_;
  std::map<Track, uint16_t> track_index_;
  uint16_t last_track_ = 0;  // the previous event's track, tried first
};

// Trace::events from a KinetoTrace (the reader's event mapping plus Event::step when
// `assign_steps`), releasing the records as it goes.
Trace to_trace(KinetoTrace&& kt, bool assign_steps = true);

}  // namespace ft::profiler
