// live_device.cpp: CUPTI threads onto ft's host tracks, and API calls inside ft's wait ranges.
#include "ft/profiler/live_device.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "ft/profiler/classifier.h"
#include "ft/profiler/cupti_source.h"

namespace ft::profiler {
namespace {

constexpr uint32_t kNvtx = CuptiActivityParser::kNvtxTid;

// Host events that came from CUPTI: API calls and flow starts carry a correlation id and the
// full CUPTI thread id (any 32 bits); NVTX markers of other domains have id 0 and sit on
// kNvtxTid | (thread id & 0x1FFFFFFF) tracks. ft's own host events have id 0 and OS thread ids
// (below 2^22), so bit 29 tells a marker from them.
bool is_marker(const Event& e) { return !e.track.device && e.id == 0 && (e.track.tid & kNvtx); }
bool from_cupti(const Event& e) { return !e.track.device && (e.id != 0 || is_marker(e)); }
// The CUPTI thread id an event names (masked like the marker tracks for markers).
uint32_t cupti_tid(const Event& e) { return is_marker(e) ? e.track.tid & ~kNvtx : e.track.tid; }

bool is_ft_range(const Trace& t, const Event& e) {
  return !e.track.device && e.id == 0 && e.phase == Phase::kSpan && !(e.track.tid & kNvtx) &&
         !is_step_span(t, e);
}

bool is_api_call(const Event& e) { return !e.track.device && e.id != 0 && e.phase == Phase::kSpan; }

// Spans of one track sorted by start, with the running maximum of their ends: [a, b] is
// enclosed by some span iff max_end over the spans starting at or before a reaches b.
struct Cover {
  std::vector<int64_t> start, max_end;
  bool encloses(int64_t a, int64_t b) const {
    const auto it = std::upper_bound(start.begin(), start.end(), a);
    if (it == start.begin()) return false;
    return max_end[static_cast<size_t>(it - start.begin()) - 1] >= b;
  }
};

}  // namespace

int map_api_threads(Trace* t, const std::vector<ThreadIds>& threads) {
  // CUPTI id -> OS tid, for API calls (32-bit ids) and markers (29-bit ids).
  std::unordered_map<uint32_t, uint32_t> exact, exact_marker;
  std::set<uint32_t> known;
  for (const ThreadIds& th : threads) {
    for (const uint32_t id : {static_cast<uint32_t>(th.pthread), th.os_tid}) {
      exact[id] = th.os_tid;
      exact_marker[id & ~kNvtx & 0x1FFFFFFFu] = th.os_tid;
    }
    known.insert(th.os_tid);
  }
  // The CUPTI threads (keyed by pid, id, marker or not), and which of them map exactly.
  using Key = std::tuple<uint32_t, uint32_t, bool>;
  std::map<Key, uint32_t> mapping;  // -> os tid
  std::set<Key> unknown;
  for (const Event& e : t->events) {
    if (!from_cupti(e)) continue;
    const Key key{e.track.pid, cupti_tid(e), is_marker(e)};
    if (mapping.count(key) || unknown.count(key)) continue;
    const auto& table = is_marker(e) ? exact_marker : exact;
    const auto it = table.find(cupti_tid(e));
    if (it != table.end()) {
      mapping[key] = it->second;
    } else {
      unknown.insert(key);
    }
  }
  // By time: which recorded thread's ft ranges enclose the unknown thread's calls.
  if (!unknown.empty()) {
    std::map<Track, std::vector<std::pair<int64_t, int64_t>>> spans;
    for (const Event& e : t->events) {
      if (is_ft_range(*t, e) && known.count(e.track.tid)) {
        spans[e.track].emplace_back(e.ts_ns, e.end_ns());
      }
    }
    std::map<Track, Cover> covers;
    for (auto& [track, v] : spans) {
      std::sort(v.begin(), v.end());
      Cover& c = covers[track];
      int64_t m = INT64_MIN;
      for (const auto& [a, b] : v) {
        m = std::max(m, b);
        c.start.push_back(a);
        c.max_end.push_back(m);
      }
    }
    std::map<Key, std::map<uint32_t, int>> votes;
    std::map<Key, int> calls;
    for (const Event& e : t->events) {
      if (!is_api_call(e)) continue;
      const Key key{e.track.pid, e.track.tid, false};
      if (!unknown.count(key)) continue;
      ++calls[key];
      uint32_t owner = 0;
      int owners = 0;
      for (const auto& [track, c] : covers) {
        if (track.pid == e.track.pid && c.encloses(e.ts_ns, e.end_ns())) {
          owner = track.tid;
          ++owners;
        }
      }
      if (owners == 1) ++votes[key][owner];
    }
    for (const auto& [key, by_owner] : votes) {
      for (const auto& [owner, n] : by_owner) {
        if (calls[key] >= 3 && n * 10 >= calls[key] * 9) mapping[key] = owner;
      }
    }
  }
  int mapped = 0;
  for (const auto& [key, os] : mapping) mapped += std::get<1>(key) != os;
  if (mapping.empty()) return 0;
  for (Event& e : t->events) {
    if (!from_cupti(e)) continue;
    const bool marker = is_marker(e);
    const auto it = mapping.find(Key{e.track.pid, cupti_tid(e), marker});
    if (it != mapping.end()) e.track.tid = (marker ? kNvtx : 0u) | it->second;
  }
  // NVTX tracks named after the CUPTI id follow their thread.
  std::map<Track, std::string> renamed;
  for (auto& [track, name] : t->tracks) {
    Track k = track;
    if (!k.device && (k.tid & kNvtx)) {
      const auto it = mapping.find(Key{k.pid, k.tid & ~kNvtx, true});
      if (it != mapping.end()) k.tid = kNvtx | it->second;
    }
    renamed.emplace(k, name);
  }
  t->tracks = std::move(renamed);
  return mapped;
}

int attribute_api_calls(Trace* t) {
  // Per host track: ft ranges (properly nested scopes) and API calls, swept in time order with
  // a stack of the open ranges.
  std::map<Track, std::vector<size_t>> ranges, api;
  for (size_t i = 0; i < t->events.size(); ++i) {
    const Event& e = t->events[i];
    if (is_ft_range(*t, e)) ranges[e.track].push_back(i);
    if (is_api_call(e)) api[e.track].push_back(i);
  }
  int changed = 0;
  for (auto& [track, calls] : api) {
    auto rit = ranges.find(track);
    if (rit == ranges.end()) continue;
    std::vector<size_t>& rs = rit->second;
    auto by_start = [&](size_t a, size_t b) {
      const Event& x = t->events[a];
      const Event& y = t->events[b];
      if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
      return x.dur_ns > y.dur_ns;  // the enclosing range first
    };
    std::sort(rs.begin(), rs.end(), by_start);
    std::sort(calls.begin(), calls.end(), by_start);
    std::vector<size_t> open;
    size_t next = 0;
    for (size_t ci : calls) {
      Event& call = t->events[ci];
      while (next < rs.size() && t->events[rs[next]].ts_ns <= call.ts_ns) {
        const int64_t s = t->events[rs[next]].ts_ns;
        while (!open.empty() && t->events[open.back()].end_ns() <= s) open.pop_back();
        open.push_back(rs[next++]);
      }
      while (!open.empty() && t->events[open.back()].end_ns() <= call.ts_ns) open.pop_back();
      if (open.empty()) continue;
      const Event& inner = t->events[open.back()];
      if (call.category == Category::kH2D || call.category == Category::kD2H) continue;
      const Category c = inner.category;
      if (c == Category::kComm || c == Category::kData || c == Category::kH2D ||
          c == Category::kD2H) {
        if (call.category != c) {
          call.category = c;
          ++changed;
        }
      }
    }
  }
  return changed;
}

void prepare_live_device_events(Trace* t, const std::vector<ThreadIds>& threads) {
  map_api_threads(t, threads);
  attribute_api_calls(t);
}

}  // namespace ft::profiler
