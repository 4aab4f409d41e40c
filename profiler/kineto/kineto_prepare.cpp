// kineto_prepare.cpp: turns Kineto ranks into a classifier-ready Trace (copies, memory, comm).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "ft/profiler/classifier.h"
#include "ft/profiler/collectives.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"

namespace ft::profiler {
namespace {

// The first profiled step of a PyTorch run carries the profiler's own warm-up: left out of the
// totals and findings (RunInfo::warmup_excluded).
constexpr int kWarmupExcluded = 1;

using Waits = std::vector<std::unordered_map<size_t, int64_t>>;  // per rank: event index -> ns

// The k-th device kernel of a given collective name on each rank is one collective (the shared
// matcher, collectives.h, with the kernel name as the key).
CollectiveSplit match_kineto_collectives(const std::vector<Trace>& ranks, Waits* waits) {
  CollectiveSplit out;
  out.ranks = static_cast<int>(ranks.size());
  waits->assign(ranks.size(), {});
  if (ranks.size() < 2) return out;
  std::vector<std::vector<CollectiveCall>> calls(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Trace& t = ranks[r];
    for (size_t i = 0; i < t.events.size(); ++i) {
      const Event& e = t.events[i];
      if (!e.track.device || e.phase != Phase::kSpan || e.category != Category::kComm) continue;
      calls[r].push_back({t.names.at(e.name), e.ts_ns, e.dur_ns, i, 0});
    }
  }
  std::vector<int64_t> late_wait(ranks.size(), 0), late_count(ranks.size(), 0);
  for (const MatchedCollective& m : match_collectives(calls)) {
    for (size_t i = 0; i < m.calls.size(); ++i) {
      const auto& [r, c] = m.calls[i];
      out.transfer_ns += m.transfer_ns;
      out.sync_ns += m.sync_ns(i);
      if (m.sync_ns(i) > 0) (*waits)[static_cast<size_t>(r)][c->ref] = m.sync_ns(i);
    }
    late_wait[static_cast<size_t>(m.last)] += m.waited_ns;
    ++late_count[static_cast<size_t>(m.last)];
    ++out.collectives;
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (late_wait[r] > out.straggler_wait_ns) {
      out.straggler_wait_ns = late_wait[r];
      out.straggler_rank = trace_rank(ranks[r]);
      out.straggler_late = late_count[r];
    }
  }
  return out;
}

// Host runtime memcpys (cudaMemcpy, cudaMemcpyAsync, ...) block for as long as their copy needs
// the host: they take the device copy's category, bytes and pinned/pageable flags, so the
// partition counts that host time as PCIe.
void link_runtime_copies(Trace* t) {
  std::unordered_map<uint64_t, const Event*> copies;
  for (const Event& e : t->events) {
    if (e.track.device && e.id != 0 &&
        (e.category == Category::kH2D || e.category == Category::kD2H)) {
      copies.emplace(e.id, &e);
    }
  }
  if (copies.empty()) return;
  std::vector<std::pair<size_t, const Event*>> fix;
  for (size_t i = 0; i < t->events.size(); ++i) {
    const Event& e = t->events[i];
    if (e.track.device || e.id == 0 || e.phase != Phase::kSpan) continue;
    if (e.category != Category::kHost && e.category != Category::kSync) continue;
    const auto it = copies.find(e.id);
    if (it != copies.end()) fix.emplace_back(i, it->second);
  }
  for (const auto& [i, copy] : fix) {
    Event& e = t->events[i];
    e.category = copy->category;
    e.bytes = copy->bytes;
    e.flags |= copy->flags & (kPinned | kPageable);
  }
}

// Splits each collective with a synchronizing part into "comm sync: NAME" (first, the wait for
// late ranks) and NAME (the transfer, the group minimum).
void split_comm_events(Trace* t, const std::unordered_map<size_t, int64_t>& waits) {
  std::vector<Event> added;
  for (const auto& [idx, wait] : waits) {
    Event& e = t->events[idx];
    if (wait <= 0 || wait >= e.dur_ns) continue;
    Event s = e;
    s.dur_ns = wait;
    s.name = t->names.intern(kCommSyncPrefix + t->names.at(e.name));
    s.bytes = 0;
    e.ts_ns += wait;
    e.dur_ns -= wait;
    added.push_back(s);
  }
  t->events.insert(t->events.end(), added.begin(), added.end());
}

uint32_t rank_of(const Track& k) { return k.device ? k.pid / 256u : k.pid >> 24; }

// PyTorch runs backward on the autograd engine's thread (and may use others): while the
// training thread runs nothing classified (no span, or only user annotations such as
// "## backward ##"), what the process's other host threads run is what it waits for. Their spans,
// clipped to the training thread's uncovered stretches inside steps, are copied onto the training
// thread (nesting is kept: a clipped child stays inside its clipped parent and still wins the
// innermost rule). Returns the copies added.
int64_t fill_training_gaps(Trace* t) {
  Track main;
  if (!find_training_track(*t, &main)) return 0;
  std::vector<std::pair<int64_t, int64_t>> steps, own;
  for (const Event& e : t->events) {
    if (e.phase != Phase::kSpan || !(e.track == main) || e.dur_ns <= 0) continue;
    if (is_step_span(*t, e)) {
      steps.emplace_back(e.ts_ns, e.end_ns());
    } else if (wait_class_of(e.category) != WaitClass::kOther) {
      own.emplace_back(e.ts_ns, e.end_ns());  // user annotations ("## backward ##") do not cover
    }
  }
  std::sort(steps.begin(), steps.end());
  std::sort(own.begin(), own.end());
  // Gaps: inside steps, not covered by the training thread's own spans.
  std::vector<std::pair<int64_t, int64_t>> gaps;
  size_t j = 0;
  for (const auto& [a, b] : steps) {
    while (j < own.size() && own[j].second <= a) ++j;
    int64_t cur = a;
    for (size_t k = j; k < own.size() && own[k].first < b; ++k) {
      if (own[k].first > cur) gaps.emplace_back(cur, own[k].first);
      cur = std::max(cur, own[k].second);
    }
    if (cur < b) gaps.emplace_back(cur, b);
  }
  if (gaps.empty()) return 0;
  std::vector<Event> added;
  for (const Event& e : t->events) {
    if (e.phase != Phase::kSpan || e.track.device || e.track.pid != main.pid || e.track == main ||
        e.dur_ns <= 0 || is_step_span(*t, e)) {
      continue;
    }
    auto it = std::upper_bound(gaps.begin(), gaps.end(), std::make_pair(e.ts_ns, INT64_MAX));
    if (it != gaps.begin()) --it;
    for (; it != gaps.end() && it->first < e.end_ns(); ++it) {
      const int64_t a = std::max(it->first, e.ts_ns), b = std::min(it->second, e.end_ns());
      if (a >= b) continue;
      Event c = e;
      c.track = main;
      c.ts_ns = a;
      c.dur_ns = b - a;
      c.id = 0;  // the copy is not the runtime call a device event correlates with
      added.push_back(c);
    }
  }
  t->events.insert(t->events.end(), added.begin(), added.end());
  return static_cast<int64_t>(added.size());
}

// [memory] samples of the training rank -> per-step mem.allocated / mem.reserved counters (the
// last sample at or before the step's end) and run.mem_peak / run.mem_reserved_peak.
void add_memory_counters(Trace* t) {
  Track main;
  if (!find_training_track(*t, &main)) return;
  const uint32_t rank = rank_of(main);
  struct Step {
    int64_t a, b, n;
  };
  std::vector<Step> steps;
  for (const Event& e : t->events) {
    if (e.phase == Phase::kSpan && e.track == main && is_step_span(*t, e))
      steps.push_back({e.ts_ns, e.end_ns(), e.step});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& x, const Step& y) { return x.a < y.a; });
  const uint32_t reserved_name = t->names.intern("[memory] Total Reserved");
  const uint32_t memory_name = t->names.intern("[memory]");
  // (ts, value) samples in time order; Kineto writes Total Reserved only when it changes, so a
  // step's value is the last sample at or before its end, wherever that sample lies.
  std::vector<std::pair<int64_t, double>> alloc, reserved;
  double peak = 0, reserved_peak = 0;
  for (const Event& e : t->events) {
    if (rank_of(e.track) != rank || e.track.device) continue;
    if (e.phase == Phase::kInstant && e.name == memory_name) {
      alloc.emplace_back(e.ts_ns, e.value);
      peak = std::max(peak, e.value);
    } else if (e.phase == Phase::kCounter && e.name == reserved_name) {
      reserved.emplace_back(e.ts_ns, e.value);
      reserved_peak = std::max(reserved_peak, e.value);
    }
  }
  const auto samples = static_cast<int64_t>(alloc.size());
  if (samples == 0) return;
  auto emit = [&](const char* name, std::vector<std::pair<int64_t, double>>* v) {
    std::stable_sort(v->begin(), v->end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    const uint32_t id = t->names.intern(name);
    for (const Step& st : steps) {
      auto it = std::upper_bound(v->begin(), v->end(), st.b - 1,
                                 [](int64_t ts, const auto& sample) { return ts < sample.first; });
      if (it == v->begin()) continue;  // no sample yet
      --it;
      Event c;
      c.ts_ns = std::max(it->first, st.a);
      c.step = st.n;
      c.value = it->second;
      c.phase = Phase::kCounter;
      c.category = Category::kCounter;
      c.name = id;
      c.track = main;
      t->events.push_back(c);
    }
  };
  emit(kCounterMemAllocated, &alloc);
  emit(kCounterMemReserved, &reserved);
  t->metadata["run.mem_peak"] = fmt::format("{:.0f}", peak);
  t->metadata["run.mem_reserved_peak"] = fmt::format("{:.0f}", reserved_peak);
  t->metadata["run.memory_samples"] = std::to_string(samples);
}

}  // namespace

CollectiveSplit split_collectives(const std::vector<Trace>& ranks) {
  Waits waits;
  return match_kineto_collectives(ranks, &waits);
}

Trace prepare_kineto_trace(std::vector<Trace> ranks) {
  Waits waits;
  const CollectiveSplit split = match_kineto_collectives(ranks, &waits);
  std::map<std::string, std::string> first_meta;
  if (!ranks.empty()) first_meta = ranks[0].metadata;
  for (size_t r = 0; r < ranks.size(); ++r) {
    link_runtime_copies(&ranks[r]);
    split_comm_events(&ranks[r], waits[r]);
  }
  Trace t = merge_ranks(std::move(ranks));
  std::string format = "kineto";
  const auto fit = first_meta.find("source_format");
  if (fit != first_meta.end()) format = fit->second;
  t.source = fmt::format("kineto trace ({})", format);
  t.metadata["source_format"] = format;
  t.metadata["run.warmup_excluded"] = std::to_string(kWarmupExcluded);
  add_memory_counters(&t);
  t.metadata["run.gap_fill_spans"] = std::to_string(fill_training_gaps(&t));
  if (split.ranks > 1) {
    t.metadata["run.comm_collectives"] = std::to_string(split.collectives);
    t.metadata["run.comm_transfer_ns"] = std::to_string(split.transfer_ns);
    t.metadata["run.comm_sync_ns"] = std::to_string(split.sync_ns);
    if (split.straggler_rank >= 0) {
      t.metadata["run.straggler_rank"] = std::to_string(split.straggler_rank);
      t.metadata["run.straggler_wait_ns"] = std::to_string(split.straggler_wait_ns);
      t.metadata["run.straggler_late"] = std::to_string(split.straggler_late);
    }
  }
  return t;
}

}  // namespace ft::profiler
