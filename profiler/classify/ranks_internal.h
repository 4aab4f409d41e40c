// ranks_internal.h: the per-rank state the cross-rank analysis (ranks.cpp) and its findings share.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"
#include "ft/profiler/findings.h"

namespace ft::profiler {

using Ivs = std::vector<std::pair<int64_t, int64_t>>;  // sorted, disjoint [a, b) intervals

int64_t length(const Ivs& v);
double median_ms(const std::vector<int64_t>& v);

// Parallel degrees (config.*) and this rank's coordinates (run.*).
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int dp_rank = 0, tp_rank = 0, pp_stage = 0;
};
Layout layout_of(const Trace& t);

struct RankData {
  const Trace* trace = nullptr;
  int rank = 0;
  Layout lay;
  std::string host;
  int64_t offset_ns = 0;  // subtracted from its timestamps to line up with rank 0
  Diagnosis d;            // the rank classified alone
  // Filled by analyse_ranks (ns, local clock):
  Track main;
  Ivs windows;                        // steady steps of the training thread
  std::vector<int64_t> window_steps;  // their step numbers
  int64_t wall_ns = 0, steps = 0;
  Ivs exposed;  // training thread inside comm / sync ranges, within the windows
  Ivs covered;  // training thread inside any range but the step's, within the windows
  Ivs sync;     // synchronizing stretches of its matched collectives (any thread)
  Ivs idle;     // pipeline idle: inside the step's pipeline span, outside its pp ranges
  bool has_pipeline = false;
  std::vector<Ivs> pp_busy;  // per window: union of its pp.forward / pp.backward ranges
  int64_t pp_busy_ns = 0;
  int64_t exposed_wait_ns = 0, exposed_idle_ns = 0;
  int64_t uncovered_idle_ns = 0;  // training thread in no range during pipeline idle
  // Exposed waiting at collectives the straggler reached late (beyond the noise margin),
  // outside pipeline idle: what the straggler costs this rank.
  int64_t exposed_straggler_wait_ns = 0;
  int64_t coll_ns = 0, coll_sync_ns = 0;  // matched collectives: time in them, synchronizing
  int64_t comparable = 0, late = 0;       // arrival-comparable collectives; reached late
  int64_t caused_ns = 0;                  // what its late arrivals made the others wait
  std::vector<int64_t> margins;           // how late, at each late arrival
  std::set<int64_t> late_steps;           // steps with at least one late arrival
};

struct CrossRank {
  int64_t collectives = 0, transfer_ns = 0, sync_ns = 0;  // sums over ranks
  int64_t noise_ns = 0;                                   // late-arrival margin
  int straggler = -1;                                     // index into the ranks
};

CrossRank analyse_ranks(std::vector<RankData>* ranks, const FindingRules& rules);

}  // namespace ft::profiler
