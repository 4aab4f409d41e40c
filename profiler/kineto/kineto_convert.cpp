// kineto_convert.cpp: prepare's event conversion (kineto_convert.h): a plan counts what each part
// of a rank keeps, so that the parts convert on the machine's cores straight into their places.
#include "kineto_convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "cpu_work.h"
#include "ft/core/parallel.h"
#include "ft/core/prefault.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/kineto_reader.h"
#include "kineto_steps.h"

namespace ft::profiler::kineto {
namespace {

uint32_t rank_of(const Track& k) { return k.device ? k.pid / 256u : k.pid >> 24; }

// What prepare needs to know about a rank's names.
struct NameFacts {
  const StringTable* names;       // the rank's, which knows its step names
  std::vector<uint8_t> memory;    // "[memory]"
  std::vector<uint8_t> reserved;  // "[memory] Total Reserved"
  explicit NameFacts(const StringTable& n) : names(&n) {
    memory.resize(n.size());
    reserved.resize(n.size());
    for (uint32_t i = 0; i < n.size(); ++i) {
      memory[i] = n.at(i) == "[memory]";
      reserved[i] = n.at(i) == "[memory] Total Reserved";
    }
  }
  // is_step_span on the rank's records.
  bool is_step(const Event& e) const {
    return e.category == Category::kStep || names->is_profiler_step(e.name);
  }
};

// A device copy's facts that its host runtime call (cudaMemcpy*) takes over.
struct CopyFacts {
  Category category;
  uint64_t bytes;
  uint8_t flags;
};
using Copies = std::unordered_map<uint64_t, CopyFacts>;  // correlation id -> first device copy

// Host runtime memcpys (cudaMemcpy, cudaMemcpyAsync, ...) block for as long as their copy needs
// the host: they take the device copy's category, bytes and pinned/pageable flags, so the
// partition counts that host time as PCIe.
Copies device_copies(const KinetoTrace& t) {
  Copies copies;
  for (size_t i = 0; i < t.size(); ++i) {
    const KinetoRecord& rec = t.record(i);
    const auto cat = static_cast<Category>(rec.kind & 15);
    if ((cat != Category::kH2D && cat != Category::kD2H) || !t.track_of(i).device) continue;
    const Event e = t.event(i);
    if (e.id != 0) copies.emplace(e.id, CopyFacts{e.category, e.bytes, e.flags});
  }
  return copies;
}

void link_runtime_copy(const Copies& copies, Event* e) {
  if (copies.empty() || e->track.device || e->id == 0 || e->phase != Phase::kSpan) return;
  if (e->category != Category::kHost && e->category != Category::kSync) return;
  const auto it = copies.find(e->id);
  if (it == copies.end()) return;
  e->category = it->second.category;
  e->bytes = it->second.bytes;
  e->flags |= it->second.flags & (kPinned | kPageable);
}

using Spans = std::vector<std::pair<int64_t, int64_t>>;

// Stretches inside steps that the training thread's own classified spans do not cover.
Spans training_gaps(Spans steps, Spans own) {
  std::sort(steps.begin(), steps.end());
  std::sort(own.begin(), own.end());
  Spans gaps;
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
  return gaps;
}

// Calls fn(a, b) for each part of [ts, end) inside a gap.
template <typename Fn>
void clip_to_gaps(const Spans& gaps, int64_t ts, int64_t end, Fn fn) {
  auto it = std::upper_bound(gaps.begin(), gaps.end(), std::make_pair(ts, INT64_MAX));
  if (it != gaps.begin()) --it;
  for (; it != gaps.end() && it->first < end; ++it) {
    const int64_t a = std::max(it->first, ts), b = std::min(it->second, end);
    if (a < b) fn(a, b);
  }
}

using Shifts = std::unordered_map<size_t, int64_t>;  // split collective -> its wait

// The waiting part of split collective `idx` on `rank` ("comm sync: NAME" once named): from the
// call's start for `wait`; the call itself keeps the rest (shifted by `wait`).
Event split_wait(const KinetoTrace& t, size_t idx, int64_t wait, uint32_t rank) {
  Event s = t.event(idx);
  s.dur_ns = wait;
  s.track = rank_track(s.track, rank);
  s.bytes = 0;
  return s;
}

// A rank's events are converted in parts [bounds[k], bounds[k + 1]) on the machine's cores, each
// part writing to places known from the plan's exact counts and freeing its own record blocks
// as it passes them (the bounds are whole blocks).
struct RankPlan {
  std::vector<size_t> bounds;
  std::vector<size_t> kept, gap_copies;  // per part
  size_t wait_gap_copies = 0;            // of the split collectives' waits
};

std::vector<size_t> part_bounds(size_t n) {
  constexpr size_t kBlock = KinetoTrace::kBlockRecords;
  const size_t blocks = (n + kBlock - 1) / kBlock;
  const size_t parts = std::clamp<size_t>(blocks, 1, logical_cpus());
  std::vector<size_t> b(parts + 1);
  for (size_t k = 0; k <= parts; ++k) b[k] = std::min(n, blocks * k / parts * kBlock);
  return b;
}

// The classifier's view of the run: the training thread and what decides what is kept.
struct Plan {
  bool has_main = false;
  Track main;                        // merged track of the training thread
  size_t t0_rank = 0, t0_index = 0;  // the earliest event (the classifier's time origin)
  Spans gaps;                        // training-thread gaps that other threads' spans fill
  std::vector<RankPlan> ranks;
  size_t main_steps = 0;  // step spans on the training thread (memory counters: 2 per step)
};

// Whether a host event of the training process (merged track) is a source for the training
// gaps; `step`: it is a step span.
bool gap_source(const Plan& p, const Event& e, bool step) {
  return p.has_main && e.phase == Phase::kSpan && !e.track.device && e.track.pid == p.main.pid &&
         !(e.track == p.main) && e.dur_ns > 0 && !step;
}

// Whether the classifier reads a (linked, merged) event: partition_steps, classify_steps,
// diagnose and find_issues read device spans, counters, spans on the training thread, step spans
// on every host thread (to find the training thread) and PCIe copies anywhere. `reserved`: a
// "[memory] Total Reserved" sample, which the mem.reserved counters below stand for.
bool classifier_reads(const Plan& p, const Event& e, bool step, bool reserved) {
  if (e.track.device) return true;
  if (e.phase == Phase::kCounter) return !reserved;  // Total Reserved: per-step counters instead
  if (e.phase != Phase::kSpan) return false;
  return (p.has_main && e.track == p.main) || step || e.category == Category::kH2D ||
         e.category == Category::kD2H;
}

// What make_plan and the conversion read about each rank.
struct RankFacts {
  const KinetoTrace* trace;
  uint32_t rank;
  NameFacts names;
  Copies copies;
  Shifts shift;
  std::vector<std::pair<size_t, int64_t>> waits;  // split collectives (index, wait)
};

// Event i of a rank, decoded as *e, as prepare converts it but for its step and name: runtime
// copies linked, a split collective shifted past its wait (when `shifted`), the track the rank's.
void link_event(const RankFacts& f, size_t i, bool shifted, Event* e) {
  link_runtime_copy(f.copies, e);
  if (shifted && !f.shift.empty()) {
    const auto it = f.shift.find(i);
    if (it != f.shift.end()) e->ts_ns += it->second, e->dur_ns -= it->second;
  }
  e->track = rank_track(e->track, f.rank);
}

// The training thread, by the classifier's own rule over every rank's host step spans.
bool find_main(const std::vector<RankFacts>& ranks, Plan* p) {
  Trace steps;
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const KinetoTrace& t = *ranks[r].trace;
    for (size_t i = 0; i < t.size(); ++i) {
      const KinetoRecord& rec = t.record(i);
      if (rec.ts_ns < t0) t0 = rec.ts_ns, p->t0_rank = r, p->t0_index = i;
      if (static_cast<Phase>(rec.kind >> 4) != Phase::kSpan) continue;
      const Event e = t.event(i);
      if (e.track.device || !ranks[r].names.is_step(e)) continue;
      Event s;
      s.track = rank_track(e.track, ranks[r].rank);
      s.dur_ns = e.dur_ns;
      s.category = Category::kStep;
      steps.events.push_back(s);
    }
  }
  return find_training_track(steps, &p->main);
}

Plan make_plan(const std::vector<RankFacts>& ranks) {
  Plan p;
  p.has_main = find_main(ranks, &p);
  // Exact counts per part (each part writes its own place) and the training gaps.
  Spans step_spans, own;
  p.ranks.resize(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankFacts& f = ranks[r];
    RankPlan& rp = p.ranks[r];
    rp.bounds = part_bounds(f.trace->size());
    rp.kept.assign(rp.bounds.size() - 1, 0);
    rp.gap_copies.assign(rp.bounds.size() - 1, 0);
    for (size_t k = 0, i = 0; k + 1 < rp.bounds.size(); ++k) {
      for (; i < rp.bounds[k + 1]; ++i) {
        // Unshifted: a split call and its wait cover what the call covered.
        Event e = f.trace->event(i);
        link_event(f, i, /*shifted=*/false, &e);
        const bool step = f.names.is_step(e);
        rp.kept[k] += classifier_reads(p, e, step, f.names.reserved[e.name]) ||
                      (r == p.t0_rank && i == p.t0_index);
        if (!p.has_main || !(e.track == p.main) || e.phase != Phase::kSpan) continue;
        p.main_steps += step;
        if (e.dur_ns <= 0) continue;
        if (step) {
          step_spans.emplace_back(e.ts_ns, e.end_ns());
        } else if (wait_class_of(e.category) != WaitClass::kOther) {
          own.emplace_back(e.ts_ns, e.end_ns());  // user annotations ("## backward ##") do not
        }
      }
    }
  }
  p.gaps = training_gaps(std::move(step_spans), std::move(own));
  if (p.gaps.empty()) return p;
  auto count = [&](const Event& e, bool step, size_t* n) {
    if (gap_source(p, e, step))
      clip_to_gaps(p.gaps, e.ts_ns, e.end_ns(), [&](int64_t, int64_t) { ++*n; });
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankFacts& f = ranks[r];
    RankPlan& rp = p.ranks[r];
    for (size_t k = 0, i = 0; k + 1 < rp.bounds.size(); ++k) {
      for (; i < rp.bounds[k + 1]; ++i) {
        Event e = f.trace->event(i);
        link_event(f, i, /*shifted=*/true, &e);
        count(e, f.names.is_step(e), &rp.gap_copies[k]);
      }
    }
    for (const auto& [idx, wait] : f.waits)
      count(split_wait(*f.trace, idx, wait, f.rank), false, &rp.wait_gap_copies);
  }
  return p;
}

// [memory] samples of the training rank -> per-step mem.allocated / mem.reserved counters (the
// last sample at or before the step's end) and run.mem_peak / run.mem_reserved_peak.
struct MemorySamples {
  struct Step {
    int64_t a, b, n;
  };
  std::vector<Step> steps;  // the training thread's step spans
  std::vector<std::pair<int64_t, double>> alloc, reserved;
  double peak = 0, reserved_peak = 0;

  // Another part's samples, which follow these in file order.
  void append(MemorySamples&& o) {
    steps.insert(steps.end(), o.steps.begin(), o.steps.end());
    alloc.insert(alloc.end(), o.alloc.begin(), o.alloc.end());
    reserved.insert(reserved.end(), o.reserved.begin(), o.reserved.end());
    peak = std::max(peak, o.peak);
    reserved_peak = std::max(reserved_peak, o.reserved_peak);
  }

  // The counters, inserted into t->events at `at`.
  void emit(const Track& main, Trace* t, size_t at) {
    std::sort(steps.begin(), steps.end(), [](const Step& x, const Step& y) { return x.a < y.a; });
    const auto samples = static_cast<int64_t>(alloc.size());
    if (samples == 0) return;
    std::vector<Event> out;
    auto counters = [&](const char* name, std::vector<std::pair<int64_t, double>>* v) {
      // Kineto writes Total Reserved only when it changes, so a step's value is the last sample
      // at or before its end, wherever that sample lies.
      std::stable_sort(v->begin(), v->end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      const uint32_t id = t->names.intern(name);
      for (const Step& st : steps) {
        auto it =
            std::upper_bound(v->begin(), v->end(), st.b - 1,
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
        out.push_back(c);
      }
    };
    counters(kCounterMemAllocated, &alloc);
    counters(kCounterMemReserved, &reserved);
    t->events.insert(t->events.begin() + static_cast<std::ptrdiff_t>(at), out.begin(), out.end());
    t->metadata["run.mem_peak"] = fmt::format("{:.0f}", peak);
    t->metadata["run.mem_reserved_peak"] = fmt::format("{:.0f}", reserved_peak);
    t->metadata["run.memory_samples"] = std::to_string(samples);
    decltype(alloc)().swap(alloc);
    decltype(reserved)().swap(reserved);
  }
};

// Writes gap copies to their place (as many as the plan counted: checked).
struct GapWriter {
  Event* out;
  size_t planned, n = 0;
  // The parts of [e.ts, e.end) inside the training gaps, copied onto the training thread (nesting
  // is kept: a clipped child stays inside its clipped parent and wins the innermost rule).
  void copy(const Plan& p, const Event& e, int64_t step) {
    clip_to_gaps(p.gaps, e.ts_ns, e.end_ns(), [&](int64_t a, int64_t b) {
      if (n == planned) throw std::logic_error("kineto prepare: more gap copies than planned");
      Event& c = out[n++];
      c = e;
      c.step = step;
      c.track = p.main;
      c.ts_ns = a;
      c.dur_ns = b - a;
      // A whole copy stands for its call (the source thread's spans are left out): it keeps
      // the correlation id that links a launch to its device op; a clipped part does not.
      if (a != e.ts_ns || b != e.end_ns()) c.id = 0;
    });
  }
  void check() const {
    if (n != planned) throw std::logic_error("kineto prepare: fewer gap copies than planned");
  }
};

// What converting one rank reads; its parts share it.
struct RankInput {
  const RankFacts& f;
  KinetoTrace* records;                // f.trace, whose blocks the parts free (each its own)
  const std::vector<uint32_t>& remap;  // rank name id -> the merged trace's
  const StepIndex& steps;
  bool has_t0;  // the rank holds the earliest event
};

// One part of a rank: events [begin, end), their kept events and gap copies written in place.
struct PartOutput {
  size_t begin = 0, end = 0;
  Event* events = nullptr;
  size_t kept = 0;
  Event* gaps = nullptr;
  size_t gap_copies = 0;
  MemorySamples mem;  // the training rank's samples in the part
};

void convert_part(const Plan& plan, const RankInput& in, PartOutput* o) {
  const RankFacts& f = in.f;
  const KinetoTrace& t = *f.trace;
  const uint32_t main_rank = rank_of(plan.main);
  GapWriter gaps{o->gaps, o->gap_copies};
  size_t n = 0;
  for (size_t i = o->begin; i < o->end; ++i) {
    Event e = t.event(i);
    e.step = in.steps.step_of(e);
    link_event(f, i, /*shifted=*/true, &e);
    const bool is_memory = f.names.memory[e.name], is_reserved = f.names.reserved[e.name];
    const bool step = f.names.is_step(e);
    e.name = in.remap[e.name];
    if (plan.has_main && !e.track.device && rank_of(e.track) == main_rank) {
      MemorySamples& mem = o->mem;
      if (e.phase == Phase::kInstant && is_memory) {
        mem.alloc.emplace_back(e.ts_ns, e.value);
        mem.peak = std::max(mem.peak, e.value);
      } else if (e.phase == Phase::kCounter && is_reserved) {
        mem.reserved.emplace_back(e.ts_ns, e.value);
        mem.reserved_peak = std::max(mem.reserved_peak, e.value);
      }
      if (e.track == plan.main && e.phase == Phase::kSpan && step)
        mem.steps.push_back({e.ts_ns, e.end_ns(), e.step});
    }
    // PyTorch runs backward on the autograd engine's thread (and may use others): while the
    // training thread runs nothing classified (no span, or only user annotations such as
    // "## backward ##"), what the process's other host threads run is what it waits for.
    // Their spans, clipped to those gaps, are copied onto the training thread. A copy's step
    // is its own start's (a split call starts where its wait ended; a source is no step span,
    // so only its start decides: the name's id does not matter).
    if (!plan.gaps.empty() && gap_source(plan, e, step)) gaps.copy(plan, e, in.steps.step_of(e));
    if (classifier_reads(plan, e, step, is_reserved) || (in.has_t0 && i == plan.t0_index)) {
      if (n == o->kept) throw std::logic_error("kineto prepare: more events kept than planned");
      o->events[n++] = e;
    }
    if (((i + 1) & KinetoTrace::kBlockMask) == 0)
      in.records->release_block(i >> KinetoTrace::kBlockShift);
  }
  if (n != o->kept) throw std::logic_error("kineto prepare: fewer events kept than planned");
  gaps.check();
}

}  // namespace

void convert_ranks(std::vector<KinetoTrace>* ranks, const Waits& waits, Trace* out) {
  // Collectives with a synchronizing part become "comm sync: NAME" (the wait for late ranks,
  // placed after the rank's events) and NAME (the transfer, the group minimum).
  std::vector<RankFacts> facts;
  facts.reserve(ranks->size());
  for (size_t r = 0; r < ranks->size(); ++r) {
    KinetoTrace& t = (*ranks)[r];
    std::vector<std::pair<size_t, int64_t>> split_waits;
    Shifts shift;
    for (const auto& [idx, wait] : waits[r]) {
      const Event e = t.event(idx);
      if (wait <= 0 || wait >= e.dur_ns) continue;
      t.names.intern(kCommSyncPrefix + t.names.at(e.name));
      split_waits.emplace_back(idx, wait);
      shift.emplace(idx, wait);
    }
    facts.push_back({&t, static_cast<uint32_t>(trace_rank(t)), NameFacts(t.names), device_copies(t),
                     std::move(shift), std::move(split_waits)});
  }
  // The first rank's step index is built on another core while the plan walks the records
  // (both only read them).
  std::optional<StepIndex> first_steps;
  Plan plan;
  parallel_for(ranks->empty() ? 1 : 2, [&](size_t job) {
    if (job == 0) {
      plan = make_plan(facts);
    } else {
      first_steps.emplace((*ranks)[0]);
    }
  });

  // Where everything goes: every rank's kept events and then its split collectives' waits; the
  // memory counters (inserted below); the training-thread gap copies, in the same order.
  size_t events = 0, gaps = 0;
  for (size_t r = 0; r < ranks->size(); ++r) {
    for (size_t n : plan.ranks[r].kept) events += n;
    for (size_t n : plan.ranks[r].gap_copies) gaps += n;
    events += facts[r].waits.size();
    gaps += plan.ranks[r].wait_gap_copies;
  }
  out->events.reserve(events + gaps + 2 * plan.main_steps);
  // The parts write their events on the machine's cores, but resize fills the vector on this
  // one: its page faults are taken on all cores first.
  prefault_for_write(out->events.data(), (events + gaps) * sizeof(Event));
  out->events.resize(events + gaps);
  MemorySamples mem;
  size_t at = 0, gap_at = events;
  for (size_t r = 0; r < ranks->size(); ++r) {
    KinetoTrace& t = (*ranks)[r];
    const RankFacts& f = facts[r];
    const RankPlan& rp = plan.ranks[r];
    std::vector<uint32_t> remap(t.names.size());
    for (uint32_t i = 0; i < t.names.size(); ++i) remap[i] = out->names.intern(t.names.at(i));
    const StepIndex steps = r == 0 ? std::move(*first_steps) : StepIndex(t);
    // The waiting parts of split collectives, placed after the rank's events (made before the
    // parts free the records).
    std::vector<Event> waits_of_rank;
    for (const auto& [idx, wait] : f.waits) {
      Event s = split_wait(t, idx, wait, f.rank);
      s.step = steps.step_of(t.event(idx));
      s.name = remap[t.names.intern(kCommSyncPrefix + t.names.at(t.name_of(idx)))];
      waits_of_rank.push_back(s);
    }
    const RankInput in{f, &t, remap, steps, r == plan.t0_rank};
    const size_t parts = rp.bounds.size() - 1;
    std::vector<PartOutput> part(parts);
    for (size_t k = 0; k < parts; ++k) {
      part[k] = {rp.bounds[k],
                 rp.bounds[k + 1],
                 out->events.data() + at,
                 rp.kept[k],
                 out->events.data() + gap_at,
                 rp.gap_copies[k],
                 {}};
      at += rp.kept[k];
      gap_at += rp.gap_copies[k];
    }
    parallel_for(parts, [&](size_t k) { convert_part(plan, in, &part[k]); });
    for (PartOutput& o : part) mem.append(std::move(o.mem));
    // Those of host collectives (a CPU backend's thread) fill gaps as their collective does.
    GapWriter wait_gaps{out->events.data() + gap_at, rp.wait_gap_copies};
    for (const Event& s : waits_of_rank) {
      out->events[at++] = s;
      if (gap_source(plan, s, false)) wait_gaps.copy(plan, s, s.step);
    }
    wait_gaps.check();
    gap_at += rp.wait_gap_copies;
    t.release_all();
    for (const auto& [k, v] : t.tracks)
      out->tracks[rank_track(k, f.rank)] = "rank " + std::to_string(f.rank) + " " + v;
    for (const auto& [pid, v] : t.processes)
      out->processes[(f.rank << 24) | (pid & 0xffffffu)] =
          "rank " + std::to_string(f.rank) + " " + v;
    for (const auto& [k, v] : t.metadata)
      out->metadata["rank" + std::to_string(f.rank) + "." + k] = v;
    t = KinetoTrace{};
  }
  facts.clear();
  if (plan.has_main) {
    out->names.intern("[memory] Total Reserved");
    out->names.intern("[memory]");
    mem.emit(plan.main, out, events);
  }
  // Not the gap copies: a clipped copy may have lost its runtime calls.
  mark_cpu_work(out->events.data(), out->events.size() - gaps, out->names);
  out->metadata["run.gap_fill_spans"] = std::to_string(gaps);
}

}  // namespace ft::profiler::kineto
