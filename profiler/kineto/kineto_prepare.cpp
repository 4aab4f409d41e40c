// kineto_prepare.cpp: turns Kineto ranks into a classifier-ready Trace (copies, memory, comm).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "cpu_work.h"
#include "ft/core/parallel.h"
#include "ft/core/prefault.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/collectives.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/load_trace.h"
#include "kineto_convert.h"
#include "kineto_steps.h"

namespace ft::profiler {
namespace {

// The first profiled step of a PyTorch run carries the profiler's own warm-up: left out of the
// totals and findings (RunInfo::warmup_excluded).
constexpr int kWarmupExcluded = 1;

using kineto::Waits;

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
  std::string format = "kineto";
  if (!ranks.empty()) {
    const auto fit = ranks[0].metadata.find("source_format");
    if (fit != ranks[0].metadata.end()) format = fit->second;
  }
  kineto::convert_ranks(&ranks, waits, &out);
  out.metadata["ranks"] = std::to_string(world);
  ranks.clear();
  out.source = fmt::format("kineto trace ({})", format);
  out.metadata["source_format"] = format;
  out.metadata["run.warmup_excluded"] = std::to_string(kWarmupExcluded);
  out.metadata["run.iterations"] = iterations;
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
