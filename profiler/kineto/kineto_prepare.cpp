// kineto_prepare.cpp: turns Kineto ranks into a classifier-ready Trace (copies, memory, comm).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "cpu_work.h"
#include "ft/core/parallel.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/collectives.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"
#include "kineto_steps.h"

namespace ft::profiler {
namespace {

// The first profiled step of a PyTorch run carries the profiler's own warm-up: left out of the
// totals and findings (RunInfo::warmup_excluded).
constexpr int kWarmupExcluded = 1;

using Waits = std::vector<std::unordered_map<size_t, int64_t>>;  // per rank: event index -> ns

// A host span that is a CPU collective's execution (gloo, MPI or UCC backends: "gloo:all_reduce"
// on the backend's thread). The ops that only enqueue it ("c10d::allreduce_") are not.
bool cpu_collective(const std::string& name) {
  return name.rfind("gloo:", 0) == 0 || name.rfind("mpi:", 0) == 0 || name.rfind("ucc:", 0) == 0;
}

// The same collective across ranks: device collective kernels (NCCL/RCCL) and CPU collectives
// alike, keyed by name and step, the k-th of a key on each rank being one collective (the shared
// matcher, collectives.h). The transfer is the shortest call; the rest of each call is waiting.
// The rank that arrived last is the one with the shortest call (a collective ends for everyone
// when the last rank joins): timestamps are not compared, since ranks' clocks (and the legacy
// format's per-window clocks) need not agree.
CollectiveSplit match_kineto_collectives(const std::vector<KinetoTrace>& ranks, Waits* waits) {
  CollectiveSplit out;
  out.ranks = static_cast<int>(ranks.size());
  waits->assign(ranks.size(), {});
  if (ranks.size() < 2) return out;
  std::vector<std::vector<CollectiveCall>> calls(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const KinetoTrace& t = ranks[r];
    std::vector<uint8_t> cpu(t.names.size());
    for (uint32_t n = 0; n < t.names.size(); ++n) cpu[n] = cpu_collective(t.names.at(n));
    const kineto::StepIndex steps(t);
    for (size_t i = 0; i < t.size(); ++i) {
      const KinetoRecord& rec = t.record(i);
      if (static_cast<Phase>(rec.kind >> 4) != Phase::kSpan ||
          static_cast<Category>(rec.kind & 15) != Category::kComm) {
        continue;
      }
      if (!t.track_of(i).device && !cpu[t.name_of(i)]) continue;
      const Event e = t.event(i);
      const int64_t step = steps.step_of(e);
      std::string key = t.names.at(e.name);
      if (step >= 0) key += " @step " + std::to_string(step);
      calls[r].push_back({std::move(key), e.ts_ns, e.dur_ns, i, 0});
    }
  }
  std::vector<int64_t> late_wait(ranks.size(), 0), late_count(ranks.size(), 0);
  for (const MatchedCollective& m : match_collectives(calls)) {
    size_t last = 0;
    for (size_t i = 0; i < m.calls.size(); ++i) {
      const auto& [r, c] = m.calls[i];
      out.transfer_ns += m.transfer_ns;
      out.sync_ns += m.sync_ns(i);
      if (m.sync_ns(i) > 0) (*waits)[static_cast<size_t>(r)][c->ref] = m.sync_ns(i);
      if (c->dur_ns < m.calls[last].second->dur_ns) last = i;
    }
    int64_t waited = 0;
    for (size_t i = 0; i < m.calls.size(); ++i) waited += i == last ? 0 : m.sync_ns(i);
    const auto lr = static_cast<size_t>(m.calls[last].first);
    late_wait[lr] += waited;
    late_count[lr] += waited > 0;
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

// The classifier's view of the run: the training thread and what decides what is kept.
struct Plan {
  bool has_main = false;
  Track main;                        // merged track of the training thread
  size_t t0_rank = 0, t0_index = 0;  // the earliest event (the classifier's time origin)
  Spans gaps;                        // training-thread gaps that other threads' spans fill
  // Exact sizes, so that no vector grows by doubling.
  size_t kept = 0, gap_copies = 0, main_steps = 0;
  size_t alloc_samples = 0, reserved_samples = 0;
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

Plan make_plan(const std::vector<KinetoTrace>& ranks, const std::vector<NameFacts>& facts,
               const std::vector<Copies>& copies) {
  Plan p;
  // The training thread, by the classifier's own rule over every rank's host step spans.
  Trace steps;
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const KinetoTrace& t = ranks[r];
    const auto rank = static_cast<uint32_t>(trace_rank(t));
    for (size_t i = 0; i < t.size(); ++i) {
      const KinetoRecord& rec = t.record(i);
      if (rec.ts_ns < t0) t0 = rec.ts_ns, p.t0_rank = r, p.t0_index = i;
      if (static_cast<Phase>(rec.kind >> 4) != Phase::kSpan) continue;
      const Event e = t.event(i);
      if (e.track.device || !facts[r].is_step(e)) continue;
      Event s;
      s.track = rank_track(e.track, rank);
      s.dur_ns = e.dur_ns;
      s.category = Category::kStep;
      steps.events.push_back(s);
    }
  }
  p.has_main = find_training_track(steps, &p.main);
  // Counts (exact reserve: the event vector never grows by doubling) and the training gaps.
  Spans step_spans, own;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const KinetoTrace& t = ranks[r];
    const auto rank = static_cast<uint32_t>(trace_rank(t));
    for (size_t i = 0; i < t.size(); ++i) {
      Event e = t.event(i);
      link_runtime_copy(copies[r], &e);
      e.track = rank_track(e.track, rank);
      const bool step = facts[r].is_step(e);
      p.kept += classifier_reads(p, e, step, facts[r].reserved[e.name]) ||
                (r == p.t0_rank && i == p.t0_index);
      if (p.has_main && !e.track.device && rank_of(e.track) == rank_of(p.main)) {
        p.alloc_samples += e.phase == Phase::kInstant && facts[r].memory[e.name];
        p.reserved_samples += e.phase == Phase::kCounter && facts[r].reserved[e.name];
      }
      if (!p.has_main || !(e.track == p.main) || e.phase != Phase::kSpan) continue;
      p.main_steps += step;
      if (e.dur_ns <= 0) continue;
      if (step) {
        step_spans.emplace_back(e.ts_ns, e.end_ns());
      } else if (wait_class_of(e.category) != WaitClass::kOther) {
        own.emplace_back(e.ts_ns, e.end_ns());  // user annotations ("## backward ##") do not cover
      }
    }
  }
  p.gaps = training_gaps(std::move(step_spans), std::move(own));
  if (p.gaps.empty()) return p;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const KinetoTrace& t = ranks[r];
    const auto rank = static_cast<uint32_t>(trace_rank(t));
    for (size_t i = 0; i < t.size(); ++i) {
      Event e = t.event(i);
      e.track = rank_track(e.track, rank);
      if (!gap_source(p, e, facts[r].is_step(e))) continue;
      clip_to_gaps(p.gaps, e.ts_ns, e.end_ns(), [&](int64_t, int64_t) { ++p.gap_copies; });
    }
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

  void emit(const Track& main, Trace* t) {
    std::sort(steps.begin(), steps.end(), [](const Step& x, const Step& y) { return x.a < y.a; });
    const auto samples = static_cast<int64_t>(alloc.size());
    if (samples == 0) return;
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
        t->events.push_back(c);
      }
    };
    counters(kCounterMemAllocated, &alloc);
    counters(kCounterMemReserved, &reserved);
    t->metadata["run.mem_peak"] = fmt::format("{:.0f}", peak);
    t->metadata["run.mem_reserved_peak"] = fmt::format("{:.0f}", reserved_peak);
    t->metadata["run.memory_samples"] = std::to_string(samples);
    decltype(alloc)().swap(alloc);
    decltype(reserved)().swap(reserved);
  }
};

}  // namespace

CollectiveSplit split_collectives(const std::vector<KinetoTrace>& ranks) {
  Waits waits;
  return match_kineto_collectives(ranks, &waits);
}

namespace {

// Steps for every rank (synthesize_iterations); returns the first rank's rule.
std::string find_iterations(std::vector<KinetoTrace>* ranks) {
  std::string iterations;
  for (KinetoTrace& t : *ranks) {
    t.metadata["iterations"] = kineto::synthesize_iterations(&t);
    if (iterations.empty()) iterations = t.metadata["iterations"];
  }
  return iterations;
}

// prepare_kineto_trace's body for `ranks`, with the cross-rank facts `waits` (per rank in
// `ranks`) and `split` (of all `world` ranks) already matched.
Trace prepare_matched(std::vector<KinetoTrace> ranks, const Waits& waits,
                      const CollectiveSplit& split, size_t world, const std::string& iterations) {
  Trace out;
  // How the first rank was identified (its metadata is cleared as it is converted).
  if (!ranks.empty()) {
    for (const char* k : {"rank_source", "windows", "window_paths", "rank_key"}) {
      const auto it = ranks[0].metadata.find(k);
      if (it != ranks[0].metadata.end()) out.metadata[std::string("run.") + k] = it->second;
    }
    out.metadata["rank"] = std::to_string(trace_rank(ranks[0]));
  }
  // Malformed events the reader counted ("input.<what>", and the first one's name), summed.
  for (const KinetoTrace& t : ranks) {
    for (const auto& [k, v] : t.metadata) {
      if (k.rfind("input.", 0) != 0) continue;
      if (k.ends_with(".first")) {
        out.metadata.emplace(k, v);
      } else {
        const int64_t before = out.metadata.count(k) ? std::stoll(out.metadata[k]) : 0;
        out.metadata[k] = std::to_string(before + std::stoll(v));
      }
    }
  }
  std::vector<NameFacts> facts;
  std::vector<Copies> copies;
  // Collectives with a synchronizing part become "comm sync: NAME" (the wait for late ranks,
  // appended after the rank's events) and NAME (the transfer, the group minimum).
  std::vector<std::vector<std::pair<size_t, int64_t>>> splits(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    KinetoTrace& t = ranks[r];
    for (const auto& [idx, wait] : waits[r]) {
      const Event e = t.event(idx);
      if (wait <= 0 || wait >= e.dur_ns) continue;
      t.names.intern(kCommSyncPrefix + t.names.at(e.name));
      splits[r].emplace_back(idx, wait);
    }
    facts.emplace_back(t.names);
    copies.push_back(device_copies(t));
  }
  // The first rank's step index is built on another core while the plan walks the records
  // (both only read them).
  std::optional<kineto::StepIndex> first_steps;
  Plan plan;
  parallel_for(ranks.empty() ? 1 : 2, [&](size_t job) {
    if (job == 0) {
      plan = make_plan(ranks, facts, copies);
    } else {
      first_steps.emplace(ranks[0]);
    }
  });

  out.source = "kineto";
  std::string format = "kineto";
  if (!ranks.empty()) {
    const auto fit = ranks[0].metadata.find("source_format");
    if (fit != ranks[0].metadata.end()) format = fit->second;
  }
  size_t total = plan.kept + plan.gap_copies + 2 * plan.main_steps;
  for (const auto& s : splits) total += s.size();
  out.events.reserve(total);
  // The training-thread gap copies: made as their sources are converted (each source's parts
  // inside the gaps), appended after every rank's events.
  std::vector<Event> gap_copies;
  gap_copies.reserve(plan.gap_copies);
  auto copy_into_gaps = [&](const Event& e, int64_t step) {
    clip_to_gaps(plan.gaps, e.ts_ns, e.end_ns(), [&](int64_t a, int64_t b) {
      Event c = e;
      c.step = step;
      c.track = plan.main;
      c.ts_ns = a;
      c.dur_ns = b - a;
      // A whole copy stands for its call (the source thread's spans are left out): it keeps
      // the correlation id that links a launch to its device op; a clipped part does not.
      if (a != e.ts_ns || b != e.end_ns()) c.id = 0;
      gap_copies.push_back(c);
    });
  };
  MemorySamples mem;
  mem.alloc.reserve(plan.alloc_samples);
  mem.reserved.reserve(plan.reserved_samples);
  mem.steps.reserve(plan.main_steps);
  const uint32_t main_rank = rank_of(plan.main);
  for (size_t r = 0; r < ranks.size(); ++r) {
    KinetoTrace& t = ranks[r];
    const auto rank = static_cast<uint32_t>(trace_rank(t));
    const NameFacts& nf = facts[r];
    std::vector<uint32_t> remap(t.names.size());
    for (uint32_t i = 0; i < t.names.size(); ++i) remap[i] = out.names.intern(t.names.at(i));
    kineto::StepIndex steps = r == 0 ? std::move(*first_steps) : kineto::StepIndex(t);
    std::unordered_map<size_t, int64_t> shift;  // split collective -> its wait
    std::vector<Event> added;
    for (const auto& [idx, wait] : splits[r]) {
      Event s = t.event(idx);
      s.step = steps.step_of(s);
      s.dur_ns = wait;
      s.name = remap[t.names.intern(kCommSyncPrefix + t.names.at(s.name))];
      s.track = rank_track(s.track, rank);
      s.bytes = 0;
      added.push_back(s);
      shift.emplace(idx, wait);
    }
    for (size_t i = 0; i < t.size(); ++i) {
      Event e = t.event(i);
      e.step = steps.step_of(e);
      link_runtime_copy(copies[r], &e);
      if (!shift.empty()) {
        const auto it = shift.find(i);
        if (it != shift.end()) e.ts_ns += it->second, e.dur_ns -= it->second;
      }
      const bool is_memory = nf.memory[e.name], is_reserved = nf.reserved[e.name];
      const bool step = nf.is_step(e);
      e.track = rank_track(e.track, rank);
      e.name = remap[e.name];
      if (plan.has_main && !e.track.device && rank_of(e.track) == main_rank) {
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
      // Their spans, clipped to those gaps, are copied onto the training thread (nesting is
      // kept: a clipped child stays inside its clipped parent and wins the innermost rule).
      // A copy's step is its own start's (a split call starts where its wait ended).
      // (A source is no step span, so only its start decides: the name's id does not matter.)
      if (!plan.gaps.empty() && gap_source(plan, e, step)) copy_into_gaps(e, steps.step_of(e));
      if (classifier_reads(plan, e, step, is_reserved) || (r == plan.t0_rank && i == plan.t0_index))
        out.events.push_back(e);
      if (((i + 1) & KinetoTrace::kBlockMask) == 0) t.release_until(i + 1);
    }
    t.release_all();
    // The waiting parts of host collectives (a CPU backend's thread) fill gaps as their
    // collective does.
    for (const Event& s : added)
      if (!plan.gaps.empty() && gap_source(plan, s, false)) copy_into_gaps(s, s.step);
    Copies().swap(copies[r]);
    out.events.insert(out.events.end(), added.begin(), added.end());
    for (const auto& [k, v] : t.tracks)
      out.tracks[rank_track(k, rank)] = "rank " + std::to_string(rank) + " " + v;
    for (const auto& [pid, v] : t.processes)
      out.processes[(rank << 24) | (pid & 0xffffffu)] = "rank " + std::to_string(rank) + " " + v;
    for (const auto& [k, v] : t.metadata) out.metadata["rank" + std::to_string(rank) + "." + k] = v;
    t = KinetoTrace{};
  }
  out.metadata["ranks"] = std::to_string(world);
  ranks.clear();
  out.source = fmt::format("kineto trace ({})", format);
  out.metadata["source_format"] = format;
  out.metadata["run.warmup_excluded"] = std::to_string(kWarmupExcluded);
  out.metadata["run.iterations"] = iterations;
  if (plan.has_main) {
    out.names.intern("[memory] Total Reserved");
    out.names.intern("[memory]");
    mem.emit(plan.main, &out);
  }
  // Before the gap copies below: a clipped copy may have lost its runtime calls.
  kineto::mark_cpu_work(out.events.data(), out.events.size(), out.names);
  out.events.insert(out.events.end(), gap_copies.begin(), gap_copies.end());
  out.metadata["run.gap_fill_spans"] = std::to_string(gap_copies.size());
  if (split.ranks > 1) {
    out.metadata["run.comm_collectives"] = std::to_string(split.collectives);
    out.metadata["run.comm_transfer_ns"] = std::to_string(split.transfer_ns);
    out.metadata["run.comm_sync_ns"] = std::to_string(split.sync_ns);
    if (split.straggler_rank >= 0) {
      out.metadata["run.straggler_rank"] = std::to_string(split.straggler_rank);
      out.metadata["run.straggler_wait_ns"] = std::to_string(split.straggler_wait_ns);
      out.metadata["run.straggler_late"] = std::to_string(split.straggler_late);
    }
  }
  return out;
}

}  // namespace

Trace prepare_kineto_trace(std::vector<KinetoTrace> ranks) {
  const std::string iterations = find_iterations(&ranks);
  Waits waits;
  const CollectiveSplit split = match_kineto_collectives(ranks, &waits);
  const size_t world = ranks.size();
  return prepare_matched(std::move(ranks), waits, split, world, iterations);
}

std::vector<Trace> prepare_kineto_ranks(std::vector<KinetoTrace> ranks) {
  find_iterations(&ranks);
  Waits waits;
  const CollectiveSplit split = match_kineto_collectives(ranks, &waits);
  std::vector<Trace> out;
  const size_t world = ranks.size();
  for (size_t r = 0; r < world; ++r) {
    std::vector<KinetoTrace> one;
    one.push_back(std::move(ranks[r]));
    const std::string iterations = one[0].metadata["iterations"];
    out.push_back(prepare_matched(std::move(one), Waits{waits[r]}, split, world, iterations));
  }
  return out;
}

}  // namespace ft::profiler
