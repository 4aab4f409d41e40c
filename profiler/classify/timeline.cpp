// timeline.cpp: a window of steady steps as spans per lane (Diagnosis::timeline).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_attribution.h"
#include "event_order.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/trace_diff.h"

namespace ft::profiler {
namespace {

constexpr size_t kNameChars = 120;        // names are cut here (at a UTF-8 boundary)
constexpr double kVisibleFraction = 2e3;  // spans under window / this are merged into runs

int cls(WaitClass c) { return static_cast<int>(c); }

// How the classifier sees a span: a device span by what keeps the device busy, a host span by
// what it blocks on or waits for.
int span_class(const Trace& trace, const Event& e, bool has_device) {
  const std::string& n = trace.names.at(e.name);
  if (e.track.device) {
    if (n.rfind(kCommSyncPrefix, 0) == 0) return cls(WaitClass::kSync);
    if (e.category == Category::kComm) return cls(WaitClass::kComm);
    if (e.category == Category::kH2D || e.category == Category::kD2H) return cls(WaitClass::kPcie);
    return cls(WaitClass::kCompute);
  }
  if (has_device) {
    // On a device trace, a host span is a wait only when it blocks (or waits for the loader
    // or the allocator); other runtime calls and CPU operators are host work.
    if (const int b = device_attribution::blocking_class(trace, e); b >= 0) return b;
    if (e.category == Category::kData) return cls(WaitClass::kData);
    if (e.category == Category::kAlloc) return cls(WaitClass::kMemory);
    return cls(WaitClass::kHost);
  }
  switch (e.category) {
    case Category::kData:
      return cls(WaitClass::kData);
    case Category::kAlloc:
      return cls(WaitClass::kMemory);
    case Category::kComm:
      return cls(WaitClass::kComm);
    case Category::kSync:
    case Category::kD2H:
      return cls(WaitClass::kSync);
    case Category::kH2D:
      return cls(WaitClass::kPcie);
    case Category::kCompute:
    case Category::kOptimizer:
      return cls(WaitClass::kCompute);
    default:
      return cls(WaitClass::kHost);
  }
}

// Host spans that are runtime calls or waits (row 1 when nested in an operator).
bool is_call_or_wait(const Event& e) {
  switch (e.category) {
    case Category::kHost:
    case Category::kSync:
    case Category::kH2D:
    case Category::kD2H:
    case Category::kD2D:
    case Category::kMemset:
    case Category::kAlloc:
    case Category::kData:
    case Category::kComm:
      return true;
    default:
      return false;
  }
}

std::string short_name(const std::string& n) {
  std::string s = hta_short_name(n);
  if (s.size() <= kNameChars) return s;
  size_t cut = kNameChars;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "…";
}

// The track's display name; the training thread's says so first.
std::string lane_name(const Trace& trace, const Track& t, bool main) {
  const auto it = trace.tracks.find(t);
  std::string n = it != trace.tracks.end() && !it->second.empty()
                      ? it->second
                      : (t.device ? "stream " : "thread ") + std::to_string(t.tid);
  return main ? "training thread: " + n : n;
}

struct Candidate {
  const Event* e;
  uint8_t row;
};

// A span or a run of short spans, clipped to the window.
struct Piece {
  uint16_t lane = 0;
  uint8_t row = 0, cls = 0;
  int64_t start = 0, end = 0;
  uint32_t name = 0;  // the trace's name (a single span)
  int64_t count = 0;  // spans it stands for
};

}  // namespace

Timeline build_timeline(const Trace& trace, const std::vector<const StepBreakdown*>& steady) {
  Timeline out;
  if (steady.empty()) return out;
  std::vector<const StepBreakdown*> by_wall = steady;
  const auto mid = by_wall.begin() + static_cast<std::ptrdiff_t>(by_wall.size() / 2);
  std::nth_element(by_wall.begin(), mid, by_wall.end(),
                   [](const auto* a, const auto* b) { return a->wall_ms < b->wall_ms; });
  const StepBreakdown* first = *mid;
  const StepBreakdown* last = first;
  for (const StepBreakdown* s : steady)
    if (s->step == first->step + 1) last = s;
  out.steps.push_back(first->step);
  if (last != first) out.steps.push_back(last->step);
  out.start_ms = first->start_ms;
  out.end_ms = last->start_ms + last->wall_ms;
  // The steps' times count from the first event (partition.cpp).
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const Event& ev : trace.events) t0 = std::min(t0, ev.ts_ns);
  const int64_t lo = t0 + std::llround(out.start_ms * 1e6);
  const int64_t hi = t0 + std::llround(out.end_ms * 1e6);
  Track main;
  const bool has_main = find_training_track(trace, &main);
  uint32_t device = 0;
  const bool has_device = has_main && device_attribution::primary_device(trace, main, &device);

  // Spans overlapping the window, per lane: host spans nested in nothing else on their thread
  // (row 0) or runtime calls and waits at any depth (row 1); the device's busy spans.
  std::map<Track, std::vector<const Event*>> host;
  std::map<Track, std::vector<Candidate>> lanes;
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan || e.dur_ns < 0 || e.end_ns() <= lo || e.ts_ns >= hi) continue;
    if (e.track.device) {
      if (has_device && e.track.pid == device && device_attribution::is_busy(e))
        lanes[e.track].push_back({&e, 0});
    } else if (!is_step_span(trace, e)) {
      host[e.track].push_back(&e);
    }
  }
  for (auto& [track, spans] : host) {
    sort_outer_first(&spans);
    int64_t outer_end = std::numeric_limits<int64_t>::min();
    for (const Event* e : spans) {
      if (e->ts_ns >= outer_end) {
        lanes[track].push_back({e, 0});
        outer_end = e->end_ns();
      } else if (is_call_or_wait(*e)) {
        lanes[track].push_back({e, 1});
      }
    }
  }
  // The lanes kept: the training thread, then the busiest others (time inside the window).
  std::vector<std::pair<double, Track>> busy;
  for (const auto& [track, spans] : lanes) {
    if (has_main && track == main) continue;
    double t = 0;
    for (const Candidate& c : spans)
      if (c.row == 0)
        t += static_cast<double>(std::min(c.e->end_ns(), hi) - std::max(c.e->ts_ns, lo));
    busy.emplace_back(t, track);
  }
  std::stable_sort(busy.begin(), busy.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Track> kept;
  if (has_main && lanes.count(main)) kept.push_back(main);
  for (const auto& [t, track] : busy)
    if (kept.size() < kTimelineLanes) kept.push_back(track);
  std::sort(kept.begin(), kept.end(), [&](const Track& a, const Track& b) {
    const bool ma = has_main && a == main, mb = has_main && b == main;
    return ma != mb ? ma : a < b;  // the training thread, host threads, then streams
  });
  for (const auto& [track, spans] : lanes)
    if (std::find(kept.begin(), kept.end(), track) == kept.end())
      out.hidden += static_cast<int64_t>(spans.size());
  // Per lane and row, in time order: spans too short to see (under 1/kVisibleFraction of the
  // window) that follow each other with the same class within that distance are drawn as one
  // run ("N spans"), so that a stream busy with many short kernels does not look idle.
  const auto min_ns = static_cast<int64_t>(static_cast<double>(hi - lo) / kVisibleFraction);
  std::vector<Piece> pieces;
  for (size_t i = 0; i < kept.size(); ++i) {
    out.lanes.push_back(lane_name(trace, kept[i], has_main && kept[i] == main));
    std::vector<Candidate>& spans = lanes[kept[i]];
    std::stable_sort(spans.begin(), spans.end(), [](const Candidate& a, const Candidate& b) {
      return a.row != b.row ? a.row < b.row : a.e->ts_ns < b.e->ts_ns;
    });
    Piece run;
    auto flush = [&] {
      if (run.count > 0) pieces.push_back(run);
      run = Piece{};
    };
    for (const Candidate& c : spans) {
      Piece p{static_cast<uint16_t>(i),
              c.row,
              static_cast<uint8_t>(span_class(trace, *c.e, has_device)),
              std::max(c.e->ts_ns, lo),
              std::min(c.e->end_ns(), hi),
              c.e->name,
              1};
      if (p.end - p.start >= min_ns) {
        flush();
        pieces.push_back(p);
      } else if (run.count > 0 && run.row == p.row && run.cls == p.cls &&
                 p.start - run.end < min_ns) {
        run.end = std::max(run.end, p.end);
        ++run.count;
      } else {
        flush();
        run = p;
      }
    }
    flush();
  }
  // Over the cap: the shortest go (counted as hidden).
  if (pieces.size() > kTimelineSpans) {
    std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return exact_gap(a.end, a.start) > exact_gap(b.end, b.start);
    });
    for (size_t k = kTimelineSpans; k < pieces.size(); ++k) out.hidden += pieces[k].count;
    pieces.resize(kTimelineSpans);
  }
  std::unordered_map<uint32_t, uint32_t> name_index;
  std::map<int64_t, uint32_t> run_names;  // by count
  for (const Piece& p : pieces) {
    TimelineSpan s;
    s.lane = p.lane;
    s.row = p.row;
    s.cls = p.cls;
    if (p.count == 1) {
      const auto [it, fresh] = name_index.emplace(p.name, static_cast<uint32_t>(out.names.size()));
      if (fresh) out.names.push_back(short_name(trace.names.at(p.name)));
      s.name = it->second;
    } else {
      const auto [it, fresh] = run_names.emplace(p.count, static_cast<uint32_t>(out.names.size()));
      if (fresh) out.names.push_back(std::to_string(p.count) + " short spans");
      s.name = it->second;
    }
    s.start_ms = std::max(0.0, exact_gap(p.start, lo) / 1e6);
    s.dur_ms = std::max(0.0, exact_gap(p.end, p.start) / 1e6);
    out.spans.push_back(s);
  }
  std::sort(out.spans.begin(), out.spans.end(), [](const TimelineSpan& a, const TimelineSpan& b) {
    return a.lane != b.lane ? a.lane < b.lane
           : a.row != b.row ? a.row < b.row
                            : a.start_ms < b.start_ms;
  });
  return out;
}

}  // namespace ft::profiler
